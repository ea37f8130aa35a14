"""Belady's offline optimum against a search of every schedule on tiny traces: it equals
the best any schedule gets, and no policy on any index gets more."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from functools import cache

import pytest

from mooncake_redis.sim.indexes.optimum import (
    OPTIMUM_INDEX,
    OPTIMUM_POLICY,
    References,
    belady_hits,
    next_uses,
    workload_references,
)
from mooncake_redis.sim.indexes.runner import SimulationSettings, run_experiment
from mooncake_redis.sim.indexes.workload import WorkloadConfig, generate_workload
from mooncake_redis.sim.trace.files import TraceRequest
from mooncake_redis.sim.trace.page_optimum import page_depths
from mooncake_redis.sim.trace.page_replay import TOUCH_ORDERS
from mooncake_redis.sim.trace.pages import NO_PARENT, PageTrace, build_page_trace
from mooncake_redis.sim.trace.runner import (
    TRACE_INDEX_NAMES,
    TRACE_POLICY_NAMES,
    TraceSettings,
    capacity_pages,
    replay_pages,
    run_trace_experiment,
)
from mooncake_redis.sim.trace.synthesis import ChainShape, synthetic_chains

TINY_TREES = ChainShape(system_prompts=2, system_prompt_pages=(1, 2), new_pages=(0, 2),
                        follow_up=0.6, branch=0.5, recent_requests=4)


def _trace(chains: Sequence[Sequence[int]]) -> PageTrace:
    requests = (TraceRequest(line, 0, 0, 0, tuple(chain))
                for line, chain in enumerate(chains, start=1))
    return build_page_trace(requests, "test")


def _tiny_traces(count: int) -> list[PageTrace]:
    traces = []
    for seed in range(count):
        requests = random.Random(seed).randint(3, 9)
        traces.append(_trace(synthetic_chains(requests, seed, TINY_TREES)))
    return traces


def best_schedule_hits(trace: PageTrace, capacity: int, leaf_first: bool) -> int:
    """The most hits of any schedule, by trying every one.

    Per request: count its hits in the cache (with leaf_first, the cached leading run,
    which is every cached page of the chain when no page outlives its parent; without,
    every cached page of the chain); then the chain's cached pages stay and its missing
    pages are stored in chain order until the cache is full (the request's demand), and
    of the other cached pages any subset that fits may stay. With leaf_first only subsets
    that leave no page cached without its parent are allowed."""
    parents = trace.parents

    def closed(pages: frozenset[int]) -> bool:
        return all(parents[page] == NO_PARENT or parents[page] in pages for page in pages)

    @cache
    def best(request: int, cached: frozenset[int]) -> int:
        if request == len(trace.chains):
            return 0
        chain = trace.chains[request]
        if leaf_first:
            hits = next((i for i, page in enumerate(chain) if page not in cached), len(chain))
        else:
            hits = sum(page in cached for page in chain)
        kept = cached & set(chain)
        missing = [page for page in chain if page not in cached]
        demand = kept | set(missing[:max(0, capacity - len(kept))])
        others = sorted(cached - set(chain))
        room = capacity - len(demand)
        options = []
        for size in range(min(room, len(others)) + 1):
            for stay in itertools.combinations(others, size):
                after = demand | frozenset(stay)
                if not leaf_first or closed(after):
                    options.append(best(request + 1, after))
        return hits + max(options)

    return best(0, frozenset())


@pytest.mark.parametrize("capacity", [1, 2, 3, 4])
def test_the_optimum_equals_the_best_schedule_and_no_policy_beats_it(capacity: int) -> None:
    """On 60 tiny traces of one-size pages (branching trees, chains longer than the cache
    included): the optimum on either index gets exactly the most hits a search of every
    leaf-first schedule finds, the same as the best schedule free to strand pages (the
    leaf-first rule costs the optimum nothing), and every policy, index and touch order
    gets at most that, per page and in the usable prefix."""
    for trace in _tiny_traces(60):
        leaf_first_best = best_schedule_hits(trace, capacity, leaf_first=True)
        assert best_schedule_hits(trace, capacity, leaf_first=False) == leaf_first_best
        for index in TRACE_INDEX_NAMES:
            optimum = replay_pages(trace, index, OPTIMUM_POLICY, capacity).counters
            assert (optimum.hits, optimum.usable_hits) == (leaf_first_best, leaf_first_best)
            assert optimum.peak_orphaned_pages == 0
        for index, policy, touch_order in itertools.product(
                TRACE_INDEX_NAMES, TRACE_POLICY_NAMES, TOUCH_ORDERS):
            counters = replay_pages(trace, index, policy, capacity,
                                    TraceSettings(touch_order=touch_order)).counters
            assert counters.usable_hits <= counters.hits <= leaf_first_best, (index, policy)


def test_the_search_sees_a_better_schedule_than_lru() -> None:
    """The brute force is not the LRU replay by another name: on a trace where LRU evicts
    the page about to be reused, the search (and the optimum) keep it."""
    trace = _trace([[1], [2], [3], [1]])  # a cache of 2: LRU drops 1 to store 3
    assert replay_pages(trace, "radix", "lru", 2).counters.usable_hits == 0
    assert best_schedule_hits(trace, 2, leaf_first=True) == 1  # drop 2 instead: 1 hits
    assert replay_pages(trace, "radix", OPTIMUM_POLICY, 2).counters.usable_hits == 1


def test_the_optimum_evicts_the_farthest_then_the_deepest_page() -> None:
    # chains: 0-1-2, then 3, then 0 (page 0 reused soonest), then 0-1-2 again
    trace = _trace([[10, 11, 12], [20], [10], [10, 11, 12]])
    evicted: list[int] = []
    replay_pages(trace, "hash", OPTIMUM_POLICY, 3, evicted=evicted)
    # storing 3 needs one page: 1 and 2 are next used at request 3, 2 is deeper -> 2 goes;
    # storing nothing at request 2; at request 3, 1 is cached, 2 missing: 3 (never used
    # again) goes
    assert evicted == [2, 3]
    assert page_depths(trace.parents) == [0, 1, 2, 0]


def test_on_the_hash_table_the_optimum_evicts_what_the_tree_does() -> None:
    trace = _trace(synthetic_chains(300, 5, ChainShape(new_pages=(1, 4))))
    capacity = capacity_pages(trace, 0.1)
    on_tree: list[int] = []
    on_hash: list[int] = []
    replay_pages(trace, "radix", OPTIMUM_POLICY, capacity, evicted=on_tree)
    replay_pages(trace, "hash", OPTIMUM_POLICY, capacity, evicted=on_hash)
    assert on_tree == on_hash and len(on_tree) > 100


def test_each_trace_row_carries_its_share_of_the_optimum() -> None:
    trace = _trace(synthetic_chains(300, 6, ChainShape(new_pages=(1, 4))))
    results = run_trace_experiment(trace, TraceSettings(capacity_fractions=(0.1, 0.3)),
                                   show_progress=False)
    assert len(results) == 2 * len(TRACE_POLICY_NAMES) * len(TRACE_INDEX_NAMES)
    for result in results:
        optimum = next(row for row in results if row.policy == OPTIMUM_POLICY
                       and row.capacity_fraction == result.capacity_fraction)
        assert result.usable_prefix_hit_rate_of_optimum == pytest.approx(
            result.usable_prefix_hit_rate / optimum.usable_prefix_hit_rate)
        assert result.usable_prefix_hit_rate_of_optimum <= 1
    lru = next(row for row in results if (row.policy, row.index, row.capacity_fraction)
               == ("lru", "radix", 0.1))
    assert lru.usable_prefix_hit_rate_of_optimum < 0.95  # a gap to measure, on this trace


def best_entry_schedule_hits(references: References, capacity: int) -> int:
    """The most read hits of any schedule of single entries: after each reference, the
    referenced entry is cached and any other cached entries that fit may stay."""
    @cache
    def best(position: int, cached: frozenset[int]) -> int:
        if position == len(references.entries):
            return 0
        entry = references.entries[position]
        hit = int(references.is_read[position] and entry in cached)
        others = sorted(cached - {entry})
        return hit + max(
            best(position + 1, frozenset(stay) | {entry})
            for size in range(min(capacity - 1, len(others)) + 1)
            for stay in itertools.combinations(others, size))

    return best(0, frozenset())


def test_the_entry_optimum_equals_the_best_schedule() -> None:
    """Random references to 5 entries, each entry's first a write (as in the workload:
    an entry is written once, then read, a miss caching it again)."""
    for seed in range(80):
        rng = random.Random(seed)
        entries = [rng.randrange(5) for _ in range(rng.randint(4, 12))]
        is_read = [entry in entries[:position] for position, entry in enumerate(entries)]
        references = References(entries, is_read, next_uses(entries))
        for capacity in (1, 2, 3):
            best = best_entry_schedule_hits(references, capacity)
            assert belady_hits(references, capacity).hits == best, (seed, capacity)


def test_next_uses_point_at_the_next_reference_of_the_same_item() -> None:
    assert next_uses([7, 8, 7, 7, 9]) == [2, 5, 3, 5, 5]


TINY_WORKLOAD = WorkloadConfig(sessions=3, turns=2, system_prompt_tokens=6, question_tokens=4,
                               answer_tokens=5, layers=1, heads=2, seed=4)


def test_no_index_or_policy_beats_the_entry_optimum() -> None:
    workload = generate_workload(TINY_WORKLOAD)
    references = workload_references(workload)
    assert references.reads > 0 and len(set(references.entries)) == \
        workload.working_set_entries
    written: set[int] = set()
    for entry, read in zip(references.entries, references.is_read):
        assert read == (entry in written)  # written once, first; then only read
        written.add(entry)
    results = run_experiment(workload, SimulationSettings(capacity_fractions=(0.1, 0.2, 0.5)),
                             show_progress=False)
    for fraction in (0.1, 0.2, 0.5):
        rows = [result for result in results if result.capacity_fraction == fraction]
        optimum = [row for row in rows if row.policy == OPTIMUM_POLICY]
        assert [row.index for row in optimum] == [OPTIMUM_INDEX]
        assert optimum[0].reads == references.reads == rows[0].reads
        assert all(row.hits <= optimum[0].hits for row in rows)
        assert all(row.hit_rate_of_optimum == pytest.approx(row.hit_rate / optimum[0].hit_rate)
                   for row in rows)
    lru = [row for row in results if row.policy == "lru" and row.capacity_fraction == 0.1]
    assert all(row.hits < optimum_row.hits for row in lru
               for optimum_row in results
               if row.capacity_fraction == optimum_row.capacity_fraction
               and optimum_row.policy == OPTIMUM_POLICY)
