"""Eviction: time to evict the same K leaves from a small and a large tree (cost follows work)."""

from __future__ import annotations

import time
from functools import partial
from itertools import pairwise
from typing import Any

from mooncake_redis.eviction import Evictor

from .common import (
    KEYS_PER_PAGE,
    OBJECT_BYTES,
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    latency,
    open_index,
    timed,
)

NAME = "eviction"
ROUND_LIMIT = 1_000_000
"""max_rounds_per_job for the run: one job must drain all K leaves."""


def tree_sizes(scale: Scale) -> list[int]:
    return list(scale.eviction_objects)


def evict_leaves(context: Context, objects: int) -> dict[str, Any]:
    """Load the tree of `objects` objects, set capacity so that exactly K leaves' bytes
    must go, and time one eviction job that drains them."""
    leaf_bytes = KEYS_PER_PAGE * OBJECT_BYTES
    with bench_server() as server:
        context.snapshots.load(server, objects)
        index = open_index(server, max_rounds_per_job=ROUND_LIMIT)
        used = index.usage().used_bytes
        index.set_config(capacity_bytes=used)
        # Half an object of slack, so float rounding of the target never costs a leaf more.
        evicted_bytes = context.scale.eviction_leaves * leaf_bytes - OBJECT_BYTES // 2
        target_ratio = (used - evicted_bytes) / used
        round_ends = [time.perf_counter()]
        seconds, report = timed(partial(Evictor(index).run, target_ratio,
                                        on_round=lambda _: round_ends.append(time.perf_counter())))
        return {"tree_objects": objects, "leaves": report.leaves, "objects": report.objects,
                "rounds": report.rounds, "seconds": seconds,
                "objects_per_second": report.objects / seconds,
                "round": latency([end - start for start, end in pairwise(round_ends)]),
                "stopped": report.stopped, "nodes_after": index.usage().nodes}


def run(context: Context) -> BenchmarkResult:
    table = Table(f"Eviction: the oldest {context.scale.eviction_leaves:,} leaves "
                  "(chains cascade)",
                  ["tree objects", "leaves", "objects", "rounds", "seconds", "objects/s",
                   "round p50 ms", "round p99 ms", "time ratio to smallest"])
    results = [evict_leaves(context, objects) for objects in context.scale.eviction_objects]
    for row in results:
        row["time_ratio"] = row["seconds"] / results[0]["seconds"]
        table.rows.append([row["tree_objects"], row["leaves"], row["objects"], row["rounds"],
                           row["seconds"], row["objects_per_second"], row["round"]["p50_ms"],
                           row["round"]["p99_ms"], row["time_ratio"]])
    return BenchmarkResult([table], {"trees": results})
