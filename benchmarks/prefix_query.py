"""Prefix query: get_keys_by_prefix (one ZRANGE) against a flat store's SCAN MATCH."""

from __future__ import annotations

import random
import time
from functools import partial

import redis

from .common import (
    NAMESPACE,
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    connect,
    latency,
    open_index,
    timed,
)

NAME = "prefix_query"
SCAN_COUNT = 1000
"""COUNT hint per SCAN call: generous to the baseline (fewer round trips)."""

MIN_SCANS = 3


def tree_sizes(scale: Scale) -> list[int]:
    return list(scale.prefix_objects)


def scan_prefix(client: redis.Redis, prefix_hash: str) -> list[str]:
    """What a flat object store must do: walk every key looking for the prefix's objects."""
    pattern = f"{NAMESPACE}:*:obj:{prefix_hash}*"
    keys = client.scan_iter(match=pattern, count=SCAN_COUNT)
    return sorted(key.rsplit(":obj:", 1)[1] for key in keys)


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    table = Table("Prefix query: get_keys_by_prefix vs SCAN MATCH over all keys",
                  ["objects", "Redis keys", "index p50 ms", "index p99 ms", "SCAN p50 ms",
                   "SCAN p99 ms", "SCANs timed", "p50 ratio"])
    results = []
    for objects in scale.prefix_objects:
        with bench_server() as server:
            context.snapshots.load(server, objects)
            client = connect(server)
            index = open_index(server)
            rng = random.Random(context.seed)
            hashes = [page for page, _ in rng.choices(context.snapshots.pages(objects),
                                                       k=scale.prefix_queries)]
            index_samples = [timed(partial(index.get_keys_by_prefix, h))[0] for h in hashes]
            scan_samples = []
            deadline = time.perf_counter() + scale.scan_budget_seconds
            for prefix_hash in hashes:
                if len(scan_samples) >= MIN_SCANS and time.perf_counter() > deadline:
                    break
                seconds, found = timed(partial(scan_prefix, client, prefix_hash))
                if found != index.get_keys_by_prefix(prefix_hash):
                    raise AssertionError(f"SCAN and the index disagree on {prefix_hash}")
                scan_samples.append(seconds)
            row = {"objects": objects, "redis_keys": client.dbsize(),
                   "index": latency(index_samples), "scan": latency(scan_samples)}
            row["p50_ratio"] = row["scan"]["p50_ms"] / row["index"]["p50_ms"]
            results.append(row)
            table.rows.append([objects, row["redis_keys"], row["index"]["p50_ms"],
                               row["index"]["p99_ms"], row["scan"]["p50_ms"],
                               row["scan"]["p99_ms"], len(scan_samples), row["p50_ratio"]])
    return BenchmarkResult([table], {"sizes": results})
