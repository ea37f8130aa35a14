"""Prefix query: get_keys_by_prefix (one HKEYS of the node) against what a flat store,
one Redis key per object as Mooncake's master keeps them, must do: SCAN MATCH."""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any

import redis
from tqdm import tqdm

from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    chunks,
    connect,
    latency,
    open_index,
)
from .meter import timed
from .trees import Page, page_keys

NAME = "prefix_query"
SCAN_COUNT = 1000
"""COUNT hint per SCAN call: generous to the baseline (fewer round trips)."""

FLAT = "flat:"
"""Key prefix of the flat store's copy of every object (a small string value each)."""

MIN_SCANS = 3


def tree_sizes(scale: Scale) -> list[int]:
    return list(scale.prefix_objects)


def fill_flat_store(client: redis.Redis, pages: list[Page]) -> None:
    for group in tqdm(chunks(pages, 2000), desc="flat store", leave=False):
        pipe = client.pipeline(transaction=False)
        for page, _ in group:
            for key in page_keys(page):
                pipe.set(FLAT + key, "1")
        pipe.execute()


def scan_prefix(client: redis.Redis, prefix_hash: str) -> list[str]:
    """What a flat object store must do: walk every key looking for the prefix's objects."""
    keys = client.scan_iter(match=f"{FLAT}{prefix_hash}*", count=SCAN_COUNT)
    return sorted(key.removeprefix(FLAT) for key in keys)


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    table = Table("Prefix query: get_keys_by_prefix vs SCAN MATCH over a flat store",
                  ["objects", "Redis keys", "index p50 ms", "index p99 ms", "SCAN p50 ms",
                   "SCAN p99 ms", "SCANs timed", "p50 ratio"],
                  note="The flat copy (one key per object) lives in the same server as the "
                       "index, so SCAN walks both: about 1.5 keys per object.")
    results = []
    for objects in scale.prefix_objects:
        with bench_server() as server:
            context.snapshots.load(server, objects)
            client = connect(server)
            index = open_index(server)
            pages = context.snapshots.pages(objects)
            fill_flat_store(client, pages)
            rng = random.Random(context.seed)
            hashes = [page for page, _ in rng.choices(pages, k=scale.prefix_queries)]
            index_samples = [timed(partial(index.get_keys_by_prefix, h))[0] for h in hashes]
            scan_samples: list[float] = []
            deadline = time.perf_counter() + scale.scan_budget_seconds
            for prefix_hash in hashes:
                if len(scan_samples) >= MIN_SCANS and time.perf_counter() > deadline:
                    break
                seconds, found = timed(partial(scan_prefix, client, prefix_hash))
                if found != index.get_keys_by_prefix(prefix_hash):
                    raise AssertionError(f"SCAN and the index disagree on {prefix_hash}")
                scan_samples.append(seconds)
            row: dict[str, Any] = {"objects": objects, "redis_keys": client.dbsize(),
                   "index": latency(index_samples), "scan": latency(scan_samples)}
            row["p50_ratio"] = row["scan"]["p50_ms"] / row["index"]["p50_ms"]
            results.append(row)
            table.rows.append([objects, row["redis_keys"], row["index"]["p50_ms"],
                               row["index"]["p99_ms"], row["scan"]["p50_ms"],
                               row["scan"]["p99_ms"], len(scan_samples), row["p50_ratio"]])
    return BenchmarkResult([table], {"sizes": results})
