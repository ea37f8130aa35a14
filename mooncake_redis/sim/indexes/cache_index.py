"""The one interface every simulated KV-cache index implements, and the LRU tiers policies use."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Protocol, TypeVar

from mooncake_redis.sim.indexes.keys import CacheKey

# Each entry sits on exactly one LRU list ("tier"). Policies name the tiers; the index only
# keeps them apart, so that finding the oldest entry of a tier needs no scan.
NORMAL_TIER = 0
PROTECTED_TIER = 1
TIER_COUNT = 2

KeyT = TypeVar("KeyT", bound=Hashable)


class CacheIndex(Protocol[KeyT]):
    """Entries keyed by an encoded CacheKey, each on the LRU list of its tier."""

    name: str

    def encode_key(self, key: CacheKey) -> KeyT:
        """This index's own, order-preserving form of `key`."""
        ...

    def insert(self, key: KeyT, tier: int = NORMAL_TIER) -> None:
        """Add `key`, or move a cached one to `tier`, as the most recently used entry of `tier`."""
        ...

    def find(self, key: KeyT) -> bool:
        """Whether `key` is cached; a probe that changes no recency."""
        ...

    def access(self, key: KeyT) -> bool:
        """Whether `key` is cached; a hit becomes the most recently used entry of its tier."""
        ...

    def remove(self, key: KeyT) -> bool:
        """Drop `key`; False when it was not cached."""
        ...

    def evict_oldest(self, tier: int) -> KeyT | None:
        """Remove and return the least recently used entry of `tier`, None if there is none
        (or, for a bounded index, none within its search budget)."""
        ...

    def find_by_prefix(
        self, sequence: int, layer: int | None = None, head: int | None = None
    ) -> list[KeyT]:
        """Cached keys of a sequence, or of one of its layers, or of one head of that layer."""
        ...

    def keys_in_range(self, low: KeyT, high: KeyT) -> list[KeyT]:
        """Cached keys with low <= key < high (in key order where the index has one)."""
        ...

    def __len__(self) -> int:
        """How many entries are cached."""
        ...

    def __iter__(self) -> Iterator[KeyT]:
        """Every cached key (in key order where the index has one)."""
        ...
