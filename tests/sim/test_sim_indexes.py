"""Every index keeps LRU order per tier; the bounded-scan hash table gives up where it must."""

from __future__ import annotations

from typing import Any

import pytest

from mooncake_redis.sim.indexes.bitwise_radix import BitwiseRadixTreeIndex
from mooncake_redis.sim.indexes.cache_index import NORMAL_TIER, PROTECTED_TIER, CacheIndex
from mooncake_redis.sim.indexes.hash_table import BoundedScanHashTableIndex, HashTableIndex
from mooncake_redis.sim.indexes.keys import CacheKey
from mooncake_redis.sim.indexes.radix_tree import RadixTreeIndex

INDEXES = {
    "hash": HashTableIndex,
    "hash-bounded-scan": lambda: BoundedScanHashTableIndex(scan_limit=1000),
    "radix": RadixTreeIndex,
    "bitwise-radix": BitwiseRadixTreeIndex,
}


@pytest.fixture(params=list(INDEXES))
def index(request: pytest.FixtureRequest) -> CacheIndex[Any]:
    return INDEXES[request.param]()  # type: ignore[no-any-return]


def _keys(index: CacheIndex[Any], positions: range, sequence: int = 1) -> list[Any]:
    return [index.encode_key(CacheKey(sequence, 0, 0, position)) for position in positions]


def test_evict_oldest_follows_access_order(index: CacheIndex[Any]) -> None:
    keys = _keys(index, range(6))
    for key in keys:
        index.insert(key)
    assert index.access(keys[0]) and index.access(keys[2])
    assert not index.access(index.encode_key(CacheKey(9, 0, 0, 0)))
    evicted = [index.evict_oldest(NORMAL_TIER) for _ in range(6)]
    assert evicted == [keys[1], keys[3], keys[4], keys[5], keys[0], keys[2]]
    assert index.evict_oldest(NORMAL_TIER) is None and len(index) == 0


def test_find_is_a_probe_that_leaves_recency_alone(index: CacheIndex[Any]) -> None:
    first, second = _keys(index, range(2))
    index.insert(first)
    index.insert(second)
    assert index.find(first)
    assert index.evict_oldest(NORMAL_TIER) == first


def test_tiers_keep_separate_lru_orders_and_insert_moves_between_them(
    index: CacheIndex[Any],
) -> None:
    protected = _keys(index, range(3))
    normal = _keys(index, range(3, 6))
    for key in protected:
        index.insert(key, PROTECTED_TIER)
    for key in normal:
        index.insert(key, NORMAL_TIER)
    index.insert(protected[0], NORMAL_TIER)  # re-tiered: newest of the normal tier
    assert index.evict_oldest(NORMAL_TIER) == normal[0]
    assert index.evict_oldest(PROTECTED_TIER) == protected[1]
    assert sorted(index) == sorted([protected[0], protected[2], normal[1], normal[2]])
    assert index.remove(normal[1]) and not index.remove(normal[1])
    assert len(index) == 3


def test_range_and_prefix_queries_see_only_their_keys(index: CacheIndex[Any]) -> None:
    for sequence in (1, 2):
        for key in _keys(index, range(20), sequence):
            index.insert(key)
    low, high = index.encode_key(CacheKey(1, 0, 0, 5)), index.encode_key(CacheKey(1, 0, 0, 8))
    assert sorted(index.keys_in_range(low, high)) == _keys(index, range(5, 8))
    assert sorted(index.find_by_prefix(2)) == _keys(index, range(20), 2)
    assert index.find_by_prefix(3) == []


def test_bounded_scan_gives_up_after_its_limit() -> None:
    index = BoundedScanHashTableIndex(scan_limit=3)
    for position in range(3):
        index.insert(index.encode_key(CacheKey(0, 0, 0, position)), PROTECTED_TIER)
    unprotected = index.encode_key(CacheKey(1, 0, 0, 0))
    index.insert(unprotected, NORMAL_TIER)
    # The unprotected entry is the 4th from the LRU end: beyond a 3-entry scan.
    assert index.evict_oldest(NORMAL_TIER) is None
    index.scan_limit = 4
    assert index.evict_oldest(NORMAL_TIER) == unprotected


def test_bounded_scan_rejects_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="scan_limit"):
        BoundedScanHashTableIndex(scan_limit=0)
