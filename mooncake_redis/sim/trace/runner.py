"""Replays a page-chain trace on every (index, policy, capacity) in memory and measures each.

`replay_pages(trace, "radix", "lru", capacity_pages)` is the ideal leaf-first LRU: the
reference the service's eviction is compared with."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from mooncake_redis.sim.indexes.metrics import TraceRunMetrics, mean, percentiles
from mooncake_redis.sim.indexes.optimum import OPTIMUM_POLICY, with_share_of_optimum
from mooncake_redis.sim.indexes.runner import (
    check_capacity_fractions,
    check_names,
    combinations,
)
from mooncake_redis.sim.indexes.workload import WorkloadConfig
from mooncake_redis.sim.trace.files import TRACE_BLOCK_TOKENS
from mooncake_redis.sim.trace.kv_layout import kv_page_bytes
from mooncake_redis.sim.trace.page_index import HashPageIndex, PageIndex, RadixPageTree
from mooncake_redis.sim.trace.page_optimum import PageBeladyPolicy
from mooncake_redis.sim.trace.page_policies import (
    PAGE_POLICY_NAMES,
    PageBlockHeatPolicy,
    PageLruPolicy,
    PagePolicy,
    PagePrefixProtectedPolicy,
)
from mooncake_redis.sim.trace.page_replay import TOUCH_ORDERS, PageReplay
from mooncake_redis.sim.trace.pages import PageTrace

PAGE_INDEXES: dict[str, Callable[[Sequence[int]], PageIndex]] = {
    HashPageIndex.name: HashPageIndex,
    RadixPageTree.name: RadixPageTree,
}
TRACE_INDEX_NAMES = tuple(PAGE_INDEXES)
TRACE_POLICY_NAMES = (*PAGE_POLICY_NAMES, OPTIMUM_POLICY)
"""The online page policies and the offline optimum, which runs on each index like them."""

DEFAULT_PAGE_BYTES = kv_page_bytes(TRACE_BLOCK_TOKENS, WorkloadConfig.layers,
                                   WorkloadConfig.heads)
"""A trace page at the CLI's default --layers and --heads."""


@dataclass(frozen=True)
class TraceSettings:
    """Which combinations to run, the block-heat half-life, the order uses are reported
    in, and the bytes of a page (for orphaned bytes)."""

    indexes: tuple[str, ...] = TRACE_INDEX_NAMES
    policies: tuple[str, ...] = TRACE_POLICY_NAMES
    capacity_fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    half_life_uses: int = 4096
    touch_order: str = TOUCH_ORDERS[0]
    page_bytes: int = DEFAULT_PAGE_BYTES

    def __post_init__(self) -> None:
        check_names("index", self.indexes, TRACE_INDEX_NAMES)
        check_names("policy", self.policies, TRACE_POLICY_NAMES)
        check_names("touch order", (self.touch_order,), TOUCH_ORDERS)
        check_capacity_fractions(self.capacity_fractions)
        for name in ("half_life_uses", "page_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def combinations(self) -> list[tuple[str, str, float]]:
        return combinations(self.indexes, self.policies, self.capacity_fractions)


def make_page_policy(name: str, settings: TraceSettings, trace: PageTrace) -> PagePolicy:
    """A fresh policy; the optimum reads the trace's future."""
    factories: dict[str, Callable[[], PagePolicy]] = {
        PageLruPolicy.name: PageLruPolicy,
        PagePrefixProtectedPolicy.name: PagePrefixProtectedPolicy,
        PageBlockHeatPolicy.name: lambda: PageBlockHeatPolicy(settings.half_life_uses),
        PageBeladyPolicy.name: lambda: PageBeladyPolicy(trace.chains, trace.parents),
    }
    return factories[name]()


def capacity_pages(trace: PageTrace, fraction: float) -> int:
    """Capacity as a fraction of the trace's distinct pages (at least one page)."""
    return max(1, round(fraction * trace.distinct_pages))


def new_replay(trace: PageTrace, index_name: str, policy: str | PagePolicy, capacity: int,
               settings: TraceSettings, evicted: list[int] | None = None) -> PageReplay:
    """A fresh cache under `policy` (a name, or a policy made fresh for it)."""
    if isinstance(policy, str):
        policy = make_page_policy(policy, settings, trace)
    return PageReplay(trace.parents, PAGE_INDEXES[index_name](trace.parents), policy,
                      capacity, settings.touch_order, evicted)


def replay_pages(trace: PageTrace, index_name: str, policy_name: str, capacity: int,
                 settings: TraceSettings | None = None,
                 evicted: list[int] | None = None) -> PageReplay:
    """Serve every request of the trace on a fresh cache of `capacity` pages."""
    replay = new_replay(trace, index_name, policy_name, capacity,
                        settings or TraceSettings(), evicted)
    # As timeit does: a collection pause inside one timed call would be charged to
    # whichever structure happened to be running.
    gc.disable()
    try:
        for chain in trace.chains:
            replay.serve(chain)
    finally:
        gc.enable()
    return replay


MEMORY_SAMPLE_PAGES = 20_000
"""Pages held while memory is measured: tracemalloc makes every allocation several times
slower, so one sample per (index, policy) stands for every capacity."""


def measure_bytes_per_page(trace: PageTrace, index_name: str, policy_name: str,
                           settings: TraceSettings) -> float:
    """Bytes the index, the policy and the heap take per page, holding the trace's first
    MEMORY_SAMPLE_PAGES pages (a tree, since parents come first) and nothing else."""
    pages = list(range(min(MEMORY_SAMPLE_PAGES, trace.distinct_pages)))  # ints made untraced
    policy = make_page_policy(policy_name, settings, trace)  # the optimum's future untraced
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        replay = new_replay(trace, index_name, policy, len(pages), settings)
        replay.store(pages)
        replay.use(pages)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del replay
    return (after - before) / max(1, len(pages))


def run_trace_one(trace: PageTrace, index_name: str, policy_name: str, fraction: float,
                  settings: TraceSettings, bytes_per_page: float) -> TraceRunMetrics:
    """Replay the whole trace on a fresh cache under one policy and capacity."""
    capacity = capacity_pages(trace, fraction)
    started = time.perf_counter()
    replay = replay_pages(trace, index_name, policy_name, capacity, settings)
    seconds = time.perf_counter() - started
    counters = replay.counters
    lookup_p50, lookup_p99 = percentiles(counters.lookup_ns, (0.5, 0.99))
    eviction_p50, eviction_p99 = percentiles(counters.eviction_ns, (0.5, 0.99))
    return TraceRunMetrics(
        index=index_name,
        policy=policy_name,
        capacity_fraction=fraction,
        capacity_pages=capacity,
        **counters.row_fields(replay.orphans.orphans, settings.page_bytes),
        lookup_ns_per_page=sum(counters.lookup_ns) / max(1, counters.requested_pages),
        lookup_p50_ns=lookup_p50,
        lookup_p99_ns=lookup_p99,
        eviction_mean_ns=mean(counters.eviction_ns),
        eviction_p50_ns=eviction_p50,
        eviction_p99_ns=eviction_p99,
        memory_bytes_per_page=bytes_per_page,
        memory_bytes=round(bytes_per_page * capacity),
        seconds=seconds,
    )


def run_trace_experiment(trace: PageTrace, settings: TraceSettings,
                         show_progress: bool = True) -> list[TraceRunMetrics]:
    """Every combination of the settings, in a stable order, with a progress bar on stderr."""
    bytes_per_page: dict[tuple[str, str], float] = {}
    results = []
    for index_name, policy_name, fraction in tqdm(
        settings.combinations(), desc="sim trace", unit="run", disable=not show_progress
    ):
        pair = (index_name, policy_name)
        if pair not in bytes_per_page:
            bytes_per_page[pair] = measure_bytes_per_page(trace, *pair, settings)
        results.append(run_trace_one(trace, index_name, policy_name, fraction, settings,
                                     bytes_per_page[pair]))
    return with_share_of_optimum(results, "usable_prefix_hit_rate",
                                 "usable_prefix_hit_rate_of_optimum")
