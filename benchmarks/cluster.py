"""Cluster: registration and eviction throughput on one Redis vs a 3-master Redis Cluster,
and how the shards spread over the masters."""

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
from .meter import timed
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


def register_and_evict(url: str, pages: Sequence[Page], batch: int) -> dict[str, Any]:
    """batch_put_start + batch_put_end of every page (one object per page), then one
    eviction job down to half; both timed through the public API."""
    index = Index.from_url(url, namespace=NAMESPACE, max_rounds_per_job=100_000)

    def register() -> None:
        for start in range(0, len(pages), batch):
            group = pages[start:start + batch]
            index.batch_put_start([(page, OBJECT_BYTES, parent) for page, parent in group])
            index.batch_put_end([page for page, _ in group])

    register_seconds, _ = timed(register)
    used = index.usage().used_bytes
    index.set_config(capacity_bytes=used)
    evict_seconds, report = timed(lambda: index.evict(target_ratio=1 - EVICTED_SHARE))
    return {"pages": len(pages), "register_seconds": register_seconds,
            "pages_per_second": len(pages) / register_seconds,
            "evicted_objects": report.objects, "evict_seconds": evict_seconds,
            "evicted_per_second": report.objects / evict_seconds, "rounds": report.rounds}


def shard_spread(url: str) -> list[dict[str, Any]]:
    """Per master: the slots it serves, and how many of the namespace's shard tags fall in
    them."""
    index = Index.from_url(url, namespace=NAMESPACE)
    client, schema = index.client, index.ctx.schema
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
                        "rounds", "registration ratio to 1 redis"])
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
                                row["pages_per_second"] / baseline])
    placement = Table("How the namespace's shard tags spread over the masters",
                      ["master", "hash slots", "shard tags"],
                      [[row["master"], row["slots"], row["shards"]] for row in spread])
    return BenchmarkResult([throughput, placement], {"backends": rows, "spread": spread})
