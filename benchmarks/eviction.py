"""Eviction: objects/s evicting the same K leaves from a small and a large tree (cost must
follow the work, not the tree), at the default leaves_per_round and a larger one."""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import redis

from mooncake_redis import Index
from mooncake_redis.capacity.eviction import EvictionReport, Evictor
from mooncake_redis.settings import Settings

from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    connect,
    latency,
    namespace_context,
    open_index,
)
from .meter import Measured, measure
from .trees import KEYS_PER_PAGE, OBJECT_BYTES

NAME = "eviction"
ROUND_LIMIT = 100_000
"""max_rounds_per_job for the run: one job must drain all K leaves."""

LARGE_ROUNDS = 4096
"""The second setting tried: leaves_per_round raised (a namespace setting, not code)."""


def tree_sizes(scale: Scale) -> list[int]:
    return list(scale.eviction_objects)


def timed_eviction(client: redis.Redis, index: Index, leaves: int,
                   on_round: Callable[[EvictionReport], None] | None = None) -> Measured:
    """Set the namespace's capacity to its used bytes and time one eviction job whose
    target is `leaves` leaves' bytes below it (Measured.result: its EvictionReport)."""
    index.set_config(max_rounds_per_job=ROUND_LIMIT)
    used = index.usage().used_bytes
    index.set_config(capacity_bytes=used)
    # Half an object of slack, so float rounding of the target never costs a leaf more.
    evicted_bytes = leaves * KEYS_PER_PAGE * OBJECT_BYTES - OBJECT_BYTES // 2
    target_ratio = (used - evicted_bytes) / used
    ctx = namespace_context(index)
    return measure(client, lambda: Evictor(ctx).run(target_ratio, on_round=on_round))


def evict_leaves(context: Context, objects: int, leaves_per_round: int) -> dict[str, Any]:
    """Load the tree of `objects` objects, set capacity so that exactly K leaves' bytes
    must go, and time one eviction job that drains them."""
    with bench_server() as server:
        context.snapshots.load(server, objects)
        client = connect(server)
        index = open_index(server)
        index.set_config(leaves_per_round=leaves_per_round)
        round_ends = [time.perf_counter()]
        m = timed_eviction(client, index, context.scale.eviction_leaves,
                           on_round=lambda _: round_ends.append(time.perf_counter()))
        report = m.result
        rounds = max(1, report.rounds)
        return {"tree_objects": objects, "leaves_per_round": leaves_per_round,
                "leaves": report.leaves, "objects": report.objects, "rounds": report.rounds,
                "seconds": m.seconds, "objects_per_second": report.objects / m.seconds,
                "cpu_seconds": m.redis_cpu_seconds + m.client_cpu_seconds,
                "round": latency([end - start for start, end in pairwise(round_ends)]),
                "round_trips_per_round": m.round_trips / rounds,
                "evalsha_per_round": m.evalsha / rounds,
                "redis_cpu_us_per_object": m.redis_cpu_seconds * 1e6 / max(1, report.objects),
                "client_cpu_us_per_object": m.client_cpu_seconds * 1e6 / max(1, report.objects),
                "redis_busy": m.redis_cpu_seconds / m.seconds,
                "stopped": report.stopped, "nodes_after": index.usage().nodes}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time, with every run's seconds kept."""
    chosen = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {**chosen, "runs_seconds": [r["seconds"] for r in runs]}


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    settings = (Settings().leaves_per_round, LARGE_ROUNDS)
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {
        (per_round, objects): [] for per_round in settings for objects in scale.eviction_objects}
    for _ in range(scale.eviction_repeats):  # interleaved: a busy minute slows every case
        for per_round, objects in runs:
            runs[per_round, objects].append(evict_leaves(context, objects, per_round))
    table = Table(f"Eviction: the oldest {scale.eviction_leaves:,} leaves "
                  f"({KEYS_PER_PAGE * scale.eviction_leaves:,} objects; chains cascade), "
                  f"median of {scale.eviction_repeats} interleaved runs",
                  ["tree objects", "leaves_per_round", "objects", "rounds", "seconds",
                   "objects/s", "round p50 ms", "round p99 ms", "round trips/round",
                   "Redis CPU µs/object", "client CPU µs/object", "time ratio to smallest",
                   "CPU ratio to smallest"])
    results = []
    for per_round in settings:
        rows = [median_run(runs[per_round, objects]) for objects in scale.eviction_objects]
        for row in rows:
            row["time_ratio"] = row["seconds"] / rows[0]["seconds"]
            row["cpu_ratio"] = row["cpu_seconds"] / rows[0]["cpu_seconds"]
            table.rows.append([row["tree_objects"], per_round, row["objects"], row["rounds"],
                               row["seconds"], row["objects_per_second"],
                               row["round"]["p50_ms"], row["round"]["p99_ms"],
                               row["round_trips_per_round"], row["redis_cpu_us_per_object"],
                               row["client_cpu_us_per_object"], row["time_ratio"],
                               row["cpu_ratio"]])
        results += rows
    table.note = ("Capacity is set to the used bytes and one Evictor(ctx).run(target) is "
                  "timed, target = K leaves' bytes below it (the job also runs the resolver "
                  "first and the admission keeper last). CPU ratio: Redis + client CPU, "
                  "which a busy machine's waits do not inflate.")
    return BenchmarkResult([table], {"trees": results})
