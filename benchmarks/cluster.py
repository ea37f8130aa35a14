"""Cluster: registration and eviction throughput on one Redis vs a 3-master Redis Cluster,
each master's Redis CPU (so scale-out can be read on a machine whose cores all serve
every master), and how the shards spread over the masters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any

from redis.crc import key_slot

from mooncake_redis import Index

from .common import (
    NAMESPACE,
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
)
from .meter import redis_cpu_seconds, timed
from .trees import OBJECT_BYTES, Page, chat_pages

NAME = "cluster"
MASTERS = 3
NODES_SHARE = 5
"""The run registers registration_nodes / NODES_SHARE pages per backend (two backends)."""

EVICTED_SHARE = 0.5
"""Eviction frees this share of what was registered."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


@contextmanager
def single_redis() -> Iterator[str]:
    with bench_server() as server:
        yield server.url


@contextmanager
def local_cluster() -> Iterator[str]:
    from redis_cluster import LocalCluster  # tests/ is on sys.path once common is imported

    cluster = LocalCluster(masters=MASTERS)
    try:
        yield cluster.url
    finally:
        cluster.stop()


def masters_of(index: Index) -> dict[str, Any]:
    """Name -> a client of each server that holds data: the primaries of a cluster, or the
    one server."""
    client = index.client
    if hasattr(client, "get_primaries"):
        return {node.name: node.redis_connection for node in client.get_primaries()}
    kwargs = client.connection_pool.connection_kwargs
    return {f"{kwargs.get('host')}:{kwargs.get('port')}": client}


def cpu_of(masters: dict[str, Any]) -> dict[str, float]:
    return {name: redis_cpu_seconds(client) for name, client in masters.items()}


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def register_and_evict(url: str, pages: Sequence[Page], batch: int) -> dict[str, Any]:
    """batch_put_start + batch_put_end of every page (one object per page), then one
    eviction job down to half; both timed through the public API, with the Redis CPU each
    master spent on each."""
    index = Index.from_url(url, namespace=NAMESPACE, max_rounds_per_job=100_000)
    masters = masters_of(index)

    def register() -> None:
        for start in range(0, len(pages), batch):
            group = pages[start:start + batch]
            index.batch_put_start([(page, OBJECT_BYTES, parent) for page, parent in group])
            index.batch_put_end([page for page, _ in group])

    start = cpu_of(masters)
    register_seconds, _ = timed(register)
    registered = cpu_of(masters)
    used = index.usage().used_bytes
    index.set_config(capacity_bytes=used)
    evicting = cpu_of(masters)
    evict_seconds, report = timed(lambda: index.evict(target_ratio=1 - EVICTED_SHARE))
    evicted = cpu_of(masters)
    register_cpu, evict_cpu = cpu_spent(start, registered), cpu_spent(evicting, evicted)
    return {"pages": len(pages), "register_seconds": register_seconds,
            "pages_per_second": len(pages) / register_seconds,
            "evicted_objects": report.objects, "evict_seconds": evict_seconds,
            "evicted_per_second": report.objects / evict_seconds, "rounds": report.rounds,
            "register_cpu_us_per_page": 1e6 * sum(register_cpu.values()) / len(pages),
            "evict_cpu_us_per_object": 1e6 * sum(evict_cpu.values()) / max(report.objects, 1),
            "masters": [{"master": name, "register_cpu_s": register_cpu[name],
                         "evict_cpu_s": evict_cpu[name]} for name in sorted(masters)]}


def shard_spread(url: str) -> list[dict[str, Any]]:
    """Per master: the slots it serves, and how many of the namespace's shard tags fall in
    them."""
    index = Index.from_url(url, namespace=NAMESPACE)
    client, schema = index.client, index.schema
    manager = client.nodes_manager
    shards = Counter(manager.get_node_from_slot(key_slot(schema.shard_keys(s).stats.encode())).name
                     for s in schema.shards)
    slots = Counter(node.name for slot in range(16384)
                    for node in [manager.get_node_from_slot(slot)])
    return [{"master": name, "slots": slots[name], "shards": shards[name]}
            for name in sorted(slots)]


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    pages = list(islice(chat_pages(context.seed), scale.registration_nodes // NODES_SHARE))
    backends: list[tuple[str, Callable[[], Any]]] = [("1 redis-server", single_redis),
                                                     (f"cluster, {MASTERS} masters", local_cluster)]
    throughput = Table(f"Registration and eviction of {len(pages):,} pages "
                       f"(batches of {scale.registration_batch}), same client, same machine",
                       ["backend", "pages/s registered", "objects/s evicted", "evicted",
                        "rounds", "registration ratio to 1 redis",
                        "Redis CPU µs/page registered (all masters)",
                        "Redis CPU µs/object evicted (all masters)"])
    rows: dict[str, dict[str, Any]] = {}
    spread: list[dict[str, Any]] = []
    for label, backend in backends:
        with backend() as url:
            rows[label] = register_and_evict(url, pages, scale.registration_batch)
            if "cluster" in label:
                spread = shard_spread(url)
    baseline = rows[backends[0][0]]["pages_per_second"]
    for label, row in rows.items():
        throughput.rows.append([label, row["pages_per_second"], row["evicted_per_second"],
                                row["evicted_objects"], row["rounds"],
                                row["pages_per_second"] / baseline,
                                row["register_cpu_us_per_page"],
                                row["evict_cpu_us_per_object"]])
    per_master = Table(
        "Each server's Redis CPU (INFO cpu, user + sys) for the same work",
        ["backend", "server", "registration CPU s", "share", "eviction CPU s", "share"],
        [[label, m["master"], m["register_cpu_s"],
          m["register_cpu_s"] / max(sum(x["register_cpu_s"] for x in row["masters"]), 1e-9),
          m["evict_cpu_s"],
          m["evict_cpu_s"] / max(sum(x["evict_cpu_s"] for x in row["masters"]), 1e-9)]
         for label, row in rows.items() for m in row["masters"]],
        note="On a machine with a core per master, the cluster's registration rate is bounded "
             "by its busiest master: pages / (registration CPU s of that master). Here every "
             "master shares the same 2 cores with the client, so the wall rates above cannot "
             "show scale-out; the shares can.")
    placement = Table("How the namespace's shard tags spread over the masters",
                      ["master", "hash slots", "shard tags"],
                      [[row["master"], row["slots"], row["shards"]] for row in spread])
    return BenchmarkResult([throughput, per_master, placement],
                           {"backends": rows, "spread": spread})
