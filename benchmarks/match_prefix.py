"""match_prefix over long chains: latency, client round trips and Redis commands per call."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

from mooncake_redis import Index

from .common import (
    BenchmarkResult,
    Context,
    RoundTrips,
    Scale,
    Table,
    bench_server,
    chain_pages,
    command_delta,
    command_stats,
    connect,
    latency,
    open_index,
    random_hash,
    store_pages,
    timed,
)

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
    table = Table(f"match_prefix over chains of {length:,} pages "
                  "(round trips counted at the redis-py connection; commands by INFO commandstats)",
                  ["call", "pages matched", "p50 ms", "p99 ms", "calls", "round trips/call",
                   "Redis commands/call"])
    results = []
    with bench_server() as server:
        client = connect(server)
        index = open_index(server)
        store_pages(index, (page for tree in trees for page in tree), length * len(trees),
                    "chains")
        for name, call, query_of, expected in cases:
            repeats = scale.match_repeats // (PER_PAGE_SHARE if call is page_by_page else 1)
            queries = [query_of(chains[n % len(chains)]) for n in range(max(1, repeats))]
            before = command_stats(client)
            samples = []
            with RoundTrips().counting() as trips:
                for query in queries:
                    seconds, matched = timed(partial(call, index, query))
                    if matched != expected:
                        raise AssertionError(f"{name}: matched {matched}, expected {expected}")
                    samples.append(seconds)
            commands = sum(calls for calls, _ in command_delta(before, command_stats(client))
                           .values())
            row = {"call": name, "matched": expected, **latency(samples),
                   "round_trips_per_call": trips.count / len(queries),
                   "commands_per_call": commands / len(queries)}
            results.append(row)
            table.rows.append([name, expected, row["p50_ms"], row["p99_ms"], len(queries),
                               row["round_trips_per_call"], row["commands_per_call"]])
    return BenchmarkResult([table], {"calls": results})

