"""match_prefix over long chains: latency, client round trips and Redis commands per call."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from mooncake_redis import Index

from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    connect,
    latency,
    open_index,
    store_pages,
)
from .meter import measure, timed
from .trees import OBJECT_BYTES, Page, chain_pages, page_keys, random_hash

NAME = "match_prefix"
PER_PAGE_SHARE = 10
"""The page-by-page baseline is that many times slower; it runs that many times fewer calls."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


def page_by_page(index: Index, chain: list[str]) -> int:
    """The baseline without match_prefix: one query (one round trip) per page until a miss."""
    for position, prefix_hash in enumerate(chain):
        if not index.get_keys_by_prefix(prefix_hash):
            return position
    return len(chain)


DEEP_BATCH = 200
"""Pages in one batch written deep in a chain (a per-rank batch)."""


def time_calls(index: Index, call: Callable[[Index, list[str]], int], queries: list[list[str]],
               expected: int, name: str) -> list[float]:
    """Seconds of each call, each checked to match `expected` pages."""
    samples = []
    for query in queries:
        seconds, matched = timed(partial(call, index, query))
        if matched != expected:
            raise AssertionError(f"{name}: matched {matched}, expected {expected}")
        samples.append(seconds)
    return samples


def deep_writes(index: Index, client: redis.Redis, tree: list[Page], rng: random.Random
                ) -> list[dict[str, Any]]:
    """Writes at the bottom of a stored chain, with their round trips: v1 walked to the root
    for every new link; v2 walks only where a node with children gets a new parent."""
    deepest = tree[-DEEP_BATCH:]
    below = chain_pages(rng, DEEP_BATCH)
    below[0] = (below[0][0], tree[-1][0])
    detached = chain_pages(rng, DEEP_BATCH)
    store_pages(index, detached, DEEP_BATCH, "detached")
    cases: list[tuple[str, Callable[[], list[Any]]]] = [
        (f"rank 1 stores the last {DEEP_BATCH} pages of the chain (same parents)",
         lambda: index.batch_put_start([(f"{page}_1_k", OBJECT_BYTES, parent)
                                        for page, parent in deepest])),
        (f"{DEEP_BATCH} new pages continuing the chain below depth {len(tree):,}",
         lambda: index.batch_put_start([(key, OBJECT_BYTES, parent) for page, parent in below
                                        for key in page_keys(page)])),
        (f"path B: the root of a stored {DEEP_BATCH}-page chain linked under depth "
         f"{len(tree):,} (walks up for a cycle)",
         lambda: index.batch_register_radix_tree_node(
             [(detached[0][0], tree[-1][0], page_keys(detached[0][0]))])),
    ]
    rows = []
    for name, call in cases:
        m = measure(client, call)
        refused = [r for r in m.result if not r.ok]
        if refused:
            raise AssertionError(f"{name}: {refused[0].key}: {refused[0].error}")
        rows.append({"write": name, "items": len(m.result), "round_trips": m.round_trips,
                     "evalsha": m.evalsha, "ms": m.seconds * 1e3})
    return rows


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    rng = random.Random(context.seed)
    length = scale.chain_pages
    trees = [chain_pages(rng, length) for _ in range(scale.chains)]
    chains = [[page for page, _ in tree] for tree in trees]
    unknown = [random_hash(rng) for _ in range(length)]
    cases: list[tuple[str, Callable[[Index, list[str]], int], Callable[[list[str]], list[str]],
                      int]] = [
        ("match_prefix, all pages cached", Index.match_prefix, lambda c: c, length),
        ("match_prefix, first half cached", Index.match_prefix,
         lambda c: c[:length // 2] + unknown[length // 2:], length // 2),
        ("match_prefix, nothing cached", Index.match_prefix, lambda c: unknown, 0),
        ("baseline: a query per page, all cached", page_by_page, lambda c: c, length),
    ]
    table = Table(f"match_prefix over chains of {length:,} pages (2 objects each)",
                  ["call", "pages matched", "p50 ms", "p99 ms", "calls", "round trips/call",
                   "Redis commands/call", "client CPU ms/call", "Redis CPU ms/call"],
                  note="Round trips counted at the redis-py connection; commands from INFO "
                       "commandstats; CPU as in the registration table.")
    results = []
    with bench_server() as server:
        client = connect(server)
        index = open_index(server)
        store_pages(index, (page for tree in trees for page in tree), length * len(trees),
                    "chains")
        for name, call, query_of, expected in cases:
            repeats = scale.match_repeats // (PER_PAGE_SHARE if call is page_by_page else 1)
            queries = [query_of(chains[n % len(chains)]) for n in range(max(1, repeats))]
            m = measure(client, partial(time_calls, index, call, queries, expected, name))
            samples = m.result
            calls = len(queries)
            row = {"call": name, "matched": expected, **latency(samples),
                   "round_trips_per_call": m.round_trips / calls,
                   "commands_per_call": sum(n for n, _ in m.commands.values()) / calls,
                   "client_cpu_ms_per_call": m.client_cpu_seconds * 1e3 / calls,
                   "redis_cpu_ms_per_call": m.redis_cpu_seconds * 1e3 / calls}
            results.append(row)
            table.rows.append([name, expected, row["p50_ms"], row["p99_ms"], calls,
                               row["round_trips_per_call"], row["commands_per_call"],
                               row["client_cpu_ms_per_call"], row["redis_cpu_ms_per_call"]])
        deep = deep_writes(index, client, trees[0], rng)
    deep_table = Table(f"Writes at the bottom of a {length:,}-page chain",
                       ["write", "items", "round trips", "EVALSHA", "ms"],
                       [[r["write"], r["items"], r["round_trips"], r["evalsha"], r["ms"]]
                        for r in deep])
    return BenchmarkResult([table, deep_table], {"calls": results, "deep_writes": deep})
