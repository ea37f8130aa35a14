"""The in-memory page-chain replay against a brute-force reference: every index and policy
evicts exactly the page a full scan would pick, orphans are counted right, and leaf-first
eviction differs from a hash table's LRU where it should."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from mooncake_redis.sim.indexes.eviction_heap import EvictionHeap
from mooncake_redis.sim.trace.files import TraceRequest
from mooncake_redis.sim.trace.page_index import RadixPageTree
from mooncake_redis.sim.trace.page_policies import PAGE_POLICY_NAMES, PageLruPolicy
from mooncake_redis.sim.trace.page_replay import (
    SHUFFLE_SEED,
    TOUCH_ORDERS,
    ReplayCounters,
    WatermarkReplay,
)
from mooncake_redis.sim.trace.pages import NO_PARENT, PageTrace, build_page_trace
from mooncake_redis.sim.trace.runner import (
    TRACE_INDEX_NAMES,
    TraceSettings,
    new_replay,
    replay_pages,
)
from mooncake_redis.sim.trace.synthesis import ChainShape, synthetic_chains

HALF_LIFE = 16
SMALL_TREES = ChainShape(system_prompts=3, system_prompt_pages=(1, 3), new_pages=(0, 3),
                         follow_up=0.7, branch=0.4, recent_requests=30)

Score = Callable[[list[int]], Any]
"""A page's sort key from its use ticks since it was cached."""

REFERENCE_SCORES: dict[str, Score] = {
    "lru": max,
    "prefix-protected": lambda ticks: (len(ticks) >= 2, max(ticks)),
    "block-heat": lambda ticks: sum(2.0 ** (tick / HALF_LIFE) for tick in ticks),
}


def _trace(chains: Sequence[Sequence[int]]) -> PageTrace:
    requests = (TraceRequest(line, 0, 0, 0, tuple(chain))
                for line, chain in enumerate(chains, start=1))
    return build_page_trace(requests, "test")


def _small_tree_trace(seed: int, requests: int = 250) -> PageTrace:
    return _trace(synthetic_chains(requests, seed, SMALL_TREES))


class Reference:
    """The replay's rules with no data structure at all: every eviction scans every cached
    page, scores it from its whole history, and checks which pages have cached children."""

    def __init__(self, trace: PageTrace, capacity: int, leaf_first: bool, score: Score,
                 touch_order: str) -> None:
        self.parents = trace.parents
        self.capacity, self.leaf_first, self.score = capacity, leaf_first, score
        self.touch_order = touch_order
        self.shuffler = random.Random(SHUFFLE_SEED)
        self.uses: dict[int, list[int]] = {}  # cached page -> use ticks since it was cached
        self.ticks = itertools.count(1)
        self.hits = self.usable = self.not_stored = 0
        self.evicted: list[int] = []
        self.orphans_after_each_request: list[int] = []

    def serve(self, chain: Sequence[int]) -> None:
        cached = self.uses
        self.hits += sum(page in cached for page in chain)
        self.usable += next((i for i, page in enumerate(chain) if page not in cached),
                            len(chain))
        for position, page in enumerate(chain):
            if page in cached:
                continue
            if len(cached) >= self.capacity and not self._evict(1, held=set(chain)):
                self.not_stored += sum(rest not in cached for rest in chain[position:])
                break
            cached[page] = []
        order = {"chain": list(chain), "tip-first": list(reversed(chain)),
                 "shuffled": self.shuffler.sample(chain, len(chain))}[self.touch_order]
        for page in order:
            if page in cached:
                cached[page].append(next(self.ticks))
        self.orphans_after_each_request.append(sum(
            1 for page in cached
            if self.parents[page] != NO_PARENT and self.parents[page] not in cached))

    def _evict(self, count: int, held: set[int]) -> bool:
        """Evict up to `count` pages, each the best victim then; False if one was missing."""
        for _ in range(count):
            victim = self._victim(held)
            if victim is None:
                return False
            del self.uses[victim]
            self.evicted.append(victim)
        return True

    def _victim(self, held: set[int]) -> int | None:
        with_children = {self.parents[page] for page in self.uses}
        candidates = [page for page in self.uses if page not in held
                      and not (self.leaf_first and page in with_children)]
        return min(candidates, key=lambda page: self.score(self.uses[page]), default=None)


def _both(trace: PageTrace, index: str, policy: str, capacity: int,
          touch_order: str = "chain") -> tuple[Reference, list[int], list[int], ReplayCounters]:
    """Run the replay and the reference side by side; returns the reference, the replay's
    evictions, its orphan count after each request, and its counters."""
    settings = TraceSettings(half_life_uses=HALF_LIFE, touch_order=touch_order)
    evicted: list[int] = []
    replay = new_replay(trace, index, policy, capacity, settings, evicted)
    reference = Reference(trace, capacity, index == "radix", REFERENCE_SCORES[policy],
                          touch_order)
    orphans = []
    for chain in trace.chains:
        replay.serve(chain)
        reference.serve(chain)
        orphans.append(replay.orphans.orphans)
    return reference, evicted, orphans, replay.counters


@pytest.mark.parametrize(("seed", "capacity"), [(1, None), (2, None), (3, 6)])
@pytest.mark.parametrize("touch_order", TOUCH_ORDERS)
@pytest.mark.parametrize("policy", PAGE_POLICY_NAMES)
@pytest.mark.parametrize("index", TRACE_INDEX_NAMES)
def test_every_eviction_is_the_one_a_full_scan_would_choose(
    index: str, policy: str, touch_order: str, seed: int, capacity: int | None
) -> None:
    """On small random trees (shared prompts, follow-ups, branches), at a sixth of the
    distinct pages, and at 6 pages, where long chains do not fit (not stored)."""
    trace = _small_tree_trace(seed)
    capacity = capacity or trace.distinct_pages // 6
    reference, evicted, orphans, counters = _both(trace, index, policy, capacity, touch_order)
    assert len(evicted) > 100  # the cache was under pressure throughout
    assert evicted == reference.evicted
    assert (counters.hits, counters.usable_hits, counters.pages_not_stored) == (
        reference.hits, reference.usable, reference.not_stored)
    assert orphans == reference.orphans_after_each_request


@pytest.mark.parametrize("seed", [4, 5])
def test_leaf_first_never_orphans_while_a_hash_lru_does(seed: int) -> None:
    trace = _small_tree_trace(seed)
    capacity = max(4, trace.distinct_pages // 6)
    radix_reference, _, radix_orphans, radix = _both(trace, "radix", "lru", capacity)
    hash_reference, _, hash_orphans, hashed = _both(trace, "hash", "lru", capacity)
    assert max(radix_orphans) == 0 and radix.hits == radix.usable_hits
    assert max(hash_orphans) > 0 and hashed.hits > hashed.usable_hits


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_a_hash_lru_touched_tip_first_evicts_exactly_what_leaf_first_lru_evicts(
    seed: int,
) -> None:
    """A prefix is used whenever its extensions are; reported last, it is always more
    recent than them, so the oldest page of all is a leaf: the tree adds nothing to LRU's
    choices here (it still guarantees them whatever the order)."""
    trace = _small_tree_trace(seed)
    capacity = max(4, trace.distinct_pages // 6)
    leaf_first: list[int] = []
    replay_pages(trace, "radix", "lru", capacity, evicted=leaf_first)
    for index in TRACE_INDEX_NAMES:
        tip_first: list[int] = []
        replay_pages(trace, index, "lru", capacity, TraceSettings(touch_order="tip-first"),
                     evicted=tip_first)
        assert tip_first == leaf_first


@pytest.mark.parametrize("policy", ["lru", "prefix-protected"])
def test_the_tree_evicts_the_same_pages_whatever_the_touch_order(policy: str) -> None:
    """The pages a request leaves cached are a path with one leaf, so the order of its uses
    never decides between two leaves (recency across requests does)."""
    trace = _small_tree_trace(seed=9)
    capacity = max(4, trace.distinct_pages // 6)
    victims = []
    for touch_order in TOUCH_ORDERS:
        evicted: list[int] = []
        replay_pages(trace, "radix", policy, capacity, TraceSettings(touch_order=touch_order),
                     evicted=evicted)
        victims.append(evicted)
    assert len(victims[0]) > 100 and victims[1:] == victims[:1] * 2


def test_a_parent_left_without_children_competes_at_once_with_its_own_recency() -> None:
    #            requests: [a b]  [c]  [a]   [d]       [e]
    # radix:              b, c, a cached; d evicts b (oldest leaf), then a is a leaf used
    #                     after c, so e evicts c, not a.
    trace = _trace([[1, 2], [3], [1], [4], [5]])
    a, b, c = 0, 1, 2
    evicted: list[int] = []
    replay = replay_pages(trace, "radix", "lru", capacity=3, evicted=evicted)
    assert evicted == [b, c]
    assert a in replay.index.pages


def test_leaf_first_keeps_the_prefix_a_hash_lru_throws_away() -> None:
    trace = _trace([[1, 2], [3], [1, 2]])
    radix = replay_pages(trace, "radix", "lru", capacity=2).counters
    hashed = replay_pages(trace, "hash", "lru", capacity=2).counters
    # [3] needs room: the tree evicts the tip 2, the hash table the older root 1. For the
    # last request the tree has 1 (usable); the hash table has 2, which nothing can reach.
    assert (radix.hits, radix.usable_hits) == (1, 1)
    assert (hashed.hits, hashed.usable_hits) == (1, 0)


def test_a_chain_longer_than_the_cache_stores_what_fits_and_keeps_its_own_pages() -> None:
    trace = _trace([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]])
    for index in TRACE_INDEX_NAMES:
        counters = replay_pages(trace, index, "lru", capacity=3).counters
        assert (counters.pages_stored, counters.pages_not_stored) == (3, 2 + 2)
        assert (counters.usable_hits, counters.evicted_pages) == (3, 0)


def test_the_heap_skips_stale_entries_and_stays_compact() -> None:
    heap: EvictionHeap[int] = EvictionHeap()
    for round_number in range(3000):
        heap.push(round_number % 3, score=-round_number)  # rescoring: older entries go stale
    assert len(heap) <= 2 * 3 + 1024 + 1
    evictable = {0, 1, 2}
    assert [heap.pop(evictable.__contains__, held=()) for _ in range(4)] == [2, 1, 0, None]
    heap.push(7, 1.0)
    heap.push(8, 2.0)
    assert heap.pop(lambda page: True, held={7}) == 8  # a held page's entry is dropped
    assert heap.pop(lambda page: True, held=()) is None


def _watermark_replay(trace: PageTrace, capacity: int, high: float, target: float,
                      evicted: list[int]) -> WatermarkReplay:
    replay = WatermarkReplay(trace.parents, RadixPageTree(trace.parents), PageLruPolicy(),
                             capacity, high, target)
    replay.evicted = evicted
    return replay


def test_evicting_in_jobs_up_to_the_capacity_is_evicting_one_page_at_a_time() -> None:
    trace = _small_tree_trace(6)
    capacity = trace.distinct_pages // 6
    evicted: list[int] = []
    replay = _watermark_replay(trace, capacity, 1.0, 1.0, evicted)
    for chain in trace.chains:
        replay.serve(chain)
    one_at_a_time: list[int] = []
    replay_pages(trace, "radix", "lru", capacity, evicted=one_at_a_time)
    assert len(evicted) > 100 and evicted == one_at_a_time


class WatermarkReference(Reference):
    """Leaf-first LRU evicting in jobs at the watermarks, by full scans: before a request's
    pages are stored, if they do not fit, down to the target or to room for them; after
    it, if above the high watermark, down to the target. (Victims are never the request's
    own pages, so evicting before the lookup counts the same hits.)"""

    def __init__(self, trace: PageTrace, capacity: int, high: float, target: float) -> None:
        super().__init__(trace, capacity, True, max, "chain")
        self.high, self.target = high * capacity, int(target * capacity)

    def serve(self, chain: Sequence[int]) -> None:
        missing = len({page for page in chain if page not in self.uses})
        if len(self.uses) + missing > self.capacity:
            self._evict(len(self.uses) - min(self.target, self.capacity - missing), set(chain))
        super().serve(chain)
        if len(self.uses) > self.high:
            self._evict(len(self.uses) - self.target, set())


@pytest.mark.parametrize("seed", [7, 8])
def test_jobs_at_the_watermarks_evict_what_a_full_scan_would_choose(seed: int) -> None:
    trace = _small_tree_trace(seed)
    capacity = 40
    evicted: list[int] = []
    replay = _watermark_replay(trace, capacity, 0.9, 0.5, evicted)
    reference = WatermarkReference(trace, capacity, 0.9, 0.5)
    for chain in trace.chains:
        before = len(evicted)
        replay.serve(chain)
        reference.serve(chain)
        assert len(replay.cached) <= 0.9 * capacity
        assert len(evicted) == before or len(evicted) - before >= 4  # jobs, not single pages
    assert len(evicted) > 100 and evicted == reference.evicted
    assert (replay.counters.hits, replay.counters.usable_hits) == (reference.hits,
                                                                  reference.usable)
