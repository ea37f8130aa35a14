"""Policies evict what they must, on every index; complete indexes give equal hit rates."""

from __future__ import annotations

from typing import Any

import pytest

from mooncake_redis.sim.indexes.bitwise_radix import BitwiseRadixTreeIndex
from mooncake_redis.sim.indexes.cache_index import CacheIndex
from mooncake_redis.sim.indexes.hash_table import BoundedScanHashTableIndex, HashTableIndex
from mooncake_redis.sim.indexes.keys import CacheKey
from mooncake_redis.sim.indexes.policies import (
    BlockHeatPolicy,
    LruPolicy,
    PrefixProtectedLruPolicy,
)
from mooncake_redis.sim.indexes.radix_tree import RadixTreeIndex
from mooncake_redis.sim.indexes.runner import SimulationSettings, run_one
from mooncake_redis.sim.indexes.workload import (
    Span,
    SpanKind,
    WorkloadConfig,
    generate_workload,
)

COMPLETE_INDEXES = {
    "hash": HashTableIndex,
    "radix": RadixTreeIndex,
    "bitwise-radix": BitwiseRadixTreeIndex,
}

LAYERS, HEADS = 2, 1


@pytest.fixture(params=list(COMPLETE_INDEXES))
def index(request: pytest.FixtureRequest) -> CacheIndex[Any]:
    return COMPLETE_INDEXES[request.param]()  # type: ignore[no-any-return]


def _cache(policy: Any, sequence: int, positions: range) -> None:
    """What the runner does when it admits entries: insert on the policy's tier, then tell it."""
    for position in positions:
        for layer in range(LAYERS):
            key = policy.index.encode_key(CacheKey(sequence, layer, 0, position))
            policy.index.insert(key, policy.tier_for(sequence, position))
            policy.on_insert(sequence, position)


def _cached(policy: Any) -> set[tuple[int, int]]:
    index = policy.index
    return {
        (key.sequence, key.position)
        for sequence in range(4)
        for key in (
            _decode(raw) for raw in index.find_by_prefix(sequence)
        )
    }


def _decode(raw: str | int) -> CacheKey:
    from mooncake_redis.sim.indexes.keys import parse_key, unpack_key

    return parse_key(raw) if isinstance(raw, str) else unpack_key(raw)


def test_lru_evicts_the_least_recently_accessed(index: CacheIndex[Any]) -> None:
    policy = LruPolicy(index, LAYERS, HEADS)
    _cache(policy, 1, range(3))
    for layer in range(LAYERS):
        assert index.access(index.encode_key(CacheKey(1, layer, 0, 0)))
    assert [policy.evict() for _ in range(2)] == [1, 1]
    assert _cached(policy) == {(1, 0), (1, 2)}  # position 1, layer 0 and 1, went first


def test_prefix_protection_spares_system_prompt_and_question_while_others_remain(
    index: CacheIndex[Any],
) -> None:
    policy = PrefixProtectedLruPolicy(index, LAYERS, HEADS)
    _cache(policy, 0, range(4))  # the system prompt: oldest of all
    policy.on_span(Span(SpanKind.QUESTION_ASKED, 1, 10, 12))
    _cache(policy, 1, range(10, 12))  # the current question
    _cache(policy, 2, range(3))  # another session's history: the newest
    protected = {(0, p) for p in range(4)} | {(1, 10), (1, 11)}
    for _ in range(3 * LAYERS):
        assert policy.evict() == 1
        assert protected <= _cached(policy)
    assert _cached(policy) == protected
    # Nothing unprotected is left: now the oldest protected entry goes.
    assert policy.evict() == 1
    assert _cached(policy) == protected  # the other layer of (0, 0) is still there
    assert policy.evict() == 1
    assert (0, 0) not in _cached(policy)


def test_an_answered_question_loses_its_protection(index: CacheIndex[Any]) -> None:
    policy = PrefixProtectedLruPolicy(index, LAYERS, HEADS)
    _cache(policy, 0, range(2))
    question = Span(SpanKind.QUESTION_ASKED, 1, 5, 7)
    policy.on_span(question)
    _cache(policy, 1, range(5, 7))
    policy.on_span(question._replace(kind=SpanKind.QUESTION_ANSWERED))
    assert policy.tier_for(1, 5) == policy.tier_for(3, 0) != policy.tier_for(0, 0)
    for _ in range(2 * LAYERS):
        policy.evict()
    assert _cached(policy) == {(0, 0), (0, 1)}


def test_bounded_scan_evicts_a_protected_entry_although_unprotected_ones_remain() -> None:
    policy = PrefixProtectedLruPolicy(BoundedScanHashTableIndex(scan_limit=4), LAYERS, HEADS)
    _cache(policy, 0, range(4))  # 8 protected entries at the LRU end
    _cache(policy, 2, range(2))
    oldest_protected = policy.index.encode_key(CacheKey(0, 0, 0, 0))
    assert policy.index.find(oldest_protected)
    policy.evict()
    # The 4 oldest entries are protected: the scan gives up and evicts one of them.
    assert not policy.index.find(oldest_protected)
    assert {(2, 0), (2, 1)} <= _cached(policy) and len(policy.index) == 11
    complete = PrefixProtectedLruPolicy(HashTableIndex(), LAYERS, HEADS)
    _cache(complete, 0, range(4))
    _cache(complete, 2, range(2))
    complete.evict()
    assert {(0, p) for p in range(4)} <= _cached(complete)


def test_block_heat_evicts_the_coldest_whole_block(index: CacheIndex[Any]) -> None:
    policy = BlockHeatPolicy(index, LAYERS, HEADS, block_tokens=4, half_life_uses=1000)
    _cache(policy, 1, range(12))  # blocks 0, 1, 2 of sequence 1
    for _ in range(3):
        for position in (0, 9):  # blocks 0 and 2 are used, block 1 is not
            policy.on_position_used(1, position)
    assert policy.evict() == 4 * LAYERS
    assert _cached(policy) == {(1, p) for p in (0, 1, 2, 3, 8, 9, 10, 11)}


def test_block_heat_decays_so_recent_use_beats_old_use() -> None:
    policy = BlockHeatPolicy(HashTableIndex(), LAYERS, HEADS, block_tokens=4, half_life_uses=2)
    for _ in range(10):
        policy.on_position_used(1, 0)  # block 0: many uses, long ago
    for _ in range(2000):  # 1,000 half-lives: 2**1000 weights would near the float range
        policy.on_position_used(2, 0)
    policy.on_position_used(1, 4)  # block 1: one use, just now
    assert policy.heat_of(1, 4) > policy.heat_of(1, 0)
    # Used at every one of its last 2000 uses, then once not: 2**-0.5 * (1 + 2**-0.5 + 2**-1 ...)
    assert policy.heat_of(2, 0) == pytest.approx(2**-0.5 / (1 - 2**-0.5), rel=1e-6)


@pytest.mark.parametrize("policy", ["lru", "prefix-protected", "block-heat"])
def test_hit_rate_belongs_to_the_policy_not_the_index(policy: str) -> None:
    workload = generate_workload(
        WorkloadConfig(sessions=3, turns=2, system_prompt_tokens=8, question_tokens=6,
                       answer_tokens=6, layers=1, heads=2, seed=5)
    )
    settings = SimulationSettings()
    hits = {  # at 0.2 every policy evicts and still hits (at 0.1 prefix-protected hit 0)
        run_one(workload, index, policy, 0.2, settings, memory_bytes=0).hits
        for index in COMPLETE_INDEXES
    }
    assert len(hits) == 1 and min(hits) > 0, hits
