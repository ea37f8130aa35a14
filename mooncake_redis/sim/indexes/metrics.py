"""What one (index, policy, capacity) run measured, and the measuring helpers it needs."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mooncake_redis.sim.indexes.cache_index import CacheIndex
from mooncake_redis.sim.indexes.keys import CacheKey


@dataclass(frozen=True)
class RunMetrics:
    """One row of the results table."""

    index: str
    policy: str
    capacity_fraction: float
    capacity_entries: int
    reads: int
    hits: int
    hit_rate: float
    lookup_mean_ns: float | None
    """The timings and memory are None on the optimum's row, which no index ran."""
    lookup_p50_ns: float | None
    lookup_p99_ns: float | None
    evictions: int
    evicted_entries: int
    eviction_mean_ns: float | None
    eviction_p50_ns: float | None
    eviction_p99_ns: float | None
    eviction_ns_per_entry: float | None
    """Total eviction time over entries evicted: comparable across policies that evict
    one entry (LRU) or a whole block at a time."""
    retier_total_ms: float | None
    """Time spent moving entries between LRU tiers when a question is asked or answered."""
    memory_bytes: int | None
    """tracemalloc bytes of the index alone, filled to capacity (same for every policy)."""
    seconds: float
    hit_rate_of_optimum: float | None = None
    """hit_rate over the offline optimum's at the same capacity (when it was run)."""


def mean(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def percentile(values: Sequence[int], fraction: float) -> float:
    """Nearest-rank percentile (fraction in 0..1); 0.0 for no values."""
    return percentiles(values, (fraction,))[0]


def percentiles(values: Sequence[int], fractions: Sequence[float]) -> list[float]:
    """Nearest-rank percentiles (fractions in 0..1) of one sort; 0.0 each for no values.

    The table shows the median beside the p99, not the mean: a few samples that waited on
    a loaded machine (a preemption, a page fault) can lift the mean above the p99."""
    if not values:
        return [0.0] * len(fractions)
    ordered = sorted(values)
    ranks = (max(1, -(-len(ordered) * fraction // 1)) for fraction in fractions)  # ceiling
    return [float(ordered[int(rank) - 1]) for rank in ranks]


def measure_index_memory(
    make_index: Callable[[], CacheIndex[Any]], keys: Iterable[CacheKey]
) -> int:
    """Bytes allocated by an index holding `keys`, its encoded keys included, nothing else."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = make_index()
        for key in keys:
            index.insert(index.encode_key(key))
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del index
    return after - before


def timer_overhead_ns(samples: int = 10_000) -> float:
    """What one perf_counter_ns pair costs by itself: the floor under every timing here."""
    clock = time.perf_counter_ns
    total = 0
    for _ in range(samples):
        start = clock()
        total += clock() - start
    return total / samples


@dataclass(frozen=True)
class TraceRunMetrics:
    """One row of the trace table: one (index, policy, capacity) over a page-chain trace."""

    index: str
    policy: str
    capacity_fraction: float
    capacity_pages: int
    requests: int
    requested_pages: int
    hits: int
    hit_rate: float
    """Cached pages found over pages requested, wherever they sit in the chain."""
    usable_hits: int
    usable_prefix_hit_rate: float
    """Pages of the cached leading run over pages requested: what an engine can reuse."""
    pages_stored: int
    pages_not_stored: int
    evicted_pages: int
    orphaned_pages: int
    """At the end: cached pages whose parent is not cached (unusable, yet holding space)."""
    orphaned_bytes: int
    mean_orphaned_pages: float
    """Orphans after each request, averaged over requests."""
    peak_orphaned_pages: int
    peak_orphaned_bytes: int
    lookup_ns_per_page: float
    lookup_p50_ns: float
    lookup_p99_ns: float
    """Per request (a whole chain's lookup)."""
    eviction_mean_ns: float
    eviction_p50_ns: float
    eviction_p99_ns: float
    memory_bytes_per_page: float
    """tracemalloc bytes of the index, the policy's state and the eviction heap, per page,
    holding the trace's first pages (trace/runner.MEMORY_SAMPLE_PAGES of them)."""
    memory_bytes: int
    """memory_bytes_per_page x capacity_pages: the cache full, stale heap entries aside."""
    seconds: float
    usable_prefix_hit_rate_of_optimum: float | None = None
    """usable_prefix_hit_rate over the offline optimum's at the same capacity (when it was
    run)."""
