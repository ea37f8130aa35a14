"""Hash-table indexes: a dict with O(1) LRU lists, and a one-list variant that scans for victims."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from itertools import islice

from mooncake_redis.sim.indexes.cache_index import NORMAL_TIER, TIER_COUNT
from mooncake_redis.sim.indexes.keys import CacheKey, format_key, string_prefix


class _StringKeyedTable:
    """What every hash table shares: string keys and no order, so range and prefix queries scan."""

    _tier_of: Mapping[str, int]

    def encode_key(self, key: CacheKey) -> str:
        return format_key(key)

    def find(self, key: str) -> bool:
        return key in self._tier_of

    def find_by_prefix(
        self, sequence: int, layer: int | None = None, head: int | None = None
    ) -> list[str]:
        # No prefix structure: every cached key is looked at.
        prefix = string_prefix(sequence, layer, head)
        return [key for key in self._tier_of if key.startswith(prefix)]

    def keys_in_range(self, low: str, high: str) -> list[str]:
        return [key for key in self._tier_of if low <= key < high]

    def __len__(self) -> int:
        return len(self._tier_of)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._tier_of))


class HashTableIndex(_StringKeyedTable):
    """A dict from key to tier plus one OrderedDict per tier: every operation is O(1)."""

    name = "hash"

    def __init__(self) -> None:
        self._tier_of: dict[str, int] = {}
        self._lru_by_tier: list[OrderedDict[str, None]] = [OrderedDict() for _ in range(TIER_COUNT)]

    def insert(self, key: str, tier: int = NORMAL_TIER) -> None:
        old_tier = self._tier_of.get(key)
        if old_tier is not None:
            del self._lru_by_tier[old_tier][key]
        self._tier_of[key] = tier
        self._lru_by_tier[tier][key] = None

    def access(self, key: str) -> bool:
        tier = self._tier_of.get(key)
        if tier is None:
            return False
        self._lru_by_tier[tier].move_to_end(key)
        return True

    def remove(self, key: str) -> bool:
        tier = self._tier_of.pop(key, None)
        if tier is None:
            return False
        del self._lru_by_tier[tier][key]
        return True

    def evict_oldest(self, tier: int) -> str | None:
        lru = self._lru_by_tier[tier]
        if not lru:
            return None
        key, _ = lru.popitem(last=False)
        del self._tier_of[key]
        return key


class BoundedScanHashTableIndex(_StringKeyedTable):
    """A dict kept in one LRU order, each entry tagged with its tier.

    This is the hash table as the founding document describes it: with no second list, the
    oldest entry of a tier is found by walking from the LRU end. The walk gives up after
    `scan_limit` entries, so a policy asking for an unprotected victim may get none and
    fall back to evicting a protected one.
    """

    name = "hash-bounded-scan"

    def __init__(self, scan_limit: int) -> None:
        if scan_limit < 1:
            raise ValueError(f"scan_limit must be at least 1, got {scan_limit}")
        self.scan_limit = scan_limit
        self._tier_of: OrderedDict[str, int] = OrderedDict()

    def insert(self, key: str, tier: int = NORMAL_TIER) -> None:
        self._tier_of[key] = tier
        self._tier_of.move_to_end(key)

    def access(self, key: str) -> bool:
        if key not in self._tier_of:
            return False
        self._tier_of.move_to_end(key)
        return True

    def remove(self, key: str) -> bool:
        return self._tier_of.pop(key, None) is not None

    def evict_oldest(self, tier: int) -> str | None:
        for key, key_tier in islice(self._tier_of.items(), self.scan_limit):
            if key_tier == tier:
                del self._tier_of[key]
                return key
        return None
