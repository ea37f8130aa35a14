"""Prometheus metrics: each namespace's capacity and tree, read from Redis at every scrape
(the shards' exact counters: one round trip), and the eviction jobs and requests of this
process (worker, monitor). Needs the `metrics` extra (prometheus-client)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisClusterException

from .admission import read_shards
from .context import Context
from .errors import MooncakeRedisError
from .eviction import EvictionReport, job_observers

log = logging.getLogger(__name__)

JOB_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600)
"""Eviction job durations: most jobs take well under a second; the RQ timeout is 600 s."""


def count_leaves(ctx: Context) -> tuple[int, int]:
    """(leaves, soft-pinned leaves): the sizes of every shard's leaf indexes, one round
    trip (per node on a cluster)."""
    batch = ctx.batch()
    for shard in ctx.all_shards():
        keys = ctx.schema.shard_keys(shard)
        batch.command("ZCARD", keys.leaves)
        batch.command("ZCARD", keys.soft_leaves)
    sizes = [int(size) for size in batch.execute()]
    return sum(sizes[0::2]), sum(sizes[1::2])


class NamespaceCollector(Collector):
    """Gauges read at scrape time, so any number of exporters agree and none keeps state.
    A namespace whose Redis does not answer is reported with mooncake_redis_up 0."""

    def __init__(self, contexts: list[Context]):
        self.contexts = contexts

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace"]
        up = GaugeMetricFamily("mooncake_redis_up", "1 if the namespace's Redis answered "
                               "this scrape", labels=labels)
        used = GaugeMetricFamily("mooncake_redis_used_bytes", "bytes of stored and "
                                 "processing objects (the sum of the shards' counters)",
                                 labels=labels)
        capacity = GaugeMetricFamily("mooncake_redis_capacity_bytes", "the capacity_bytes "
                                     "setting (0 = unlimited)", labels=labels)
        objects = GaugeMetricFamily("mooncake_redis_objects", "objects, complete or "
                                    "processing", labels=labels)
        nodes = GaugeMetricFamily("mooncake_redis_nodes", "radix tree nodes, shells "
                                  "included", labels=labels)
        leaves = GaugeMetricFamily("mooncake_redis_leaves", "nodes with objects and no "
                                   "children, in the eviction leaf index (pin: none or "
                                   "soft)", labels=["namespace", "pin"])
        for ctx in self.contexts:
            namespace = ctx.schema.namespace
            try:
                shards = read_shards(ctx)
                plain, soft = count_leaves(ctx)
                capacity_bytes = ctx.settings.capacity_bytes
            except (redis.RedisError, RedisClusterException, MooncakeRedisError) as error:
                log.warning("metrics: namespace %s unavailable: %s", namespace, error)
                up.add_metric([namespace], 0)
                continue
            up.add_metric([namespace], 1)
            used.add_metric([namespace], sum(shard.used_bytes for shard in shards))
            capacity.add_metric([namespace], capacity_bytes)
            objects.add_metric([namespace], sum(shard.objects for shard in shards))
            nodes.add_metric([namespace], sum(shard.nodes for shard in shards))
            leaves.add_metric([namespace, "none"], plain)
            leaves.add_metric([namespace, "soft"], soft)
        yield from (up, used, capacity, objects, nodes, leaves)


class Exporter:
    """One registry: the namespaces' gauges, and counters of what this process did."""

    def __init__(self, contexts: list[Context]):
        self.registry = CollectorRegistry()
        self.registry.register(NamespaceCollector(contexts))
        ns = ["namespace"]
        self.jobs = Counter("mooncake_redis_eviction_jobs", "eviction jobs this process ran, "
                            "by how they stopped", ["namespace", "stopped"],
                            registry=self.registry)
        self.rounds = Counter("mooncake_redis_eviction_rounds", "eviction rounds this "
                              "process ran", ns, registry=self.registry)
        self.objects = Counter("mooncake_redis_evicted_objects", "objects this process "
                               "evicted", ns, registry=self.registry)
        self.bytes = Counter("mooncake_redis_evicted_bytes", "bytes this process evicted",
                             ns, registry=self.registry)
        self.seconds = Histogram("mooncake_redis_eviction_job_seconds", "eviction job "
                                 "duration", ns, buckets=JOB_SECONDS_BUCKETS,
                                 registry=self.registry)
        self.requests = Counter("mooncake_redis_eviction_requests", "eviction jobs this "
                                "process enqueued (the monitor, above the high watermark)",
                                ns, registry=self.registry)

    def observe_job(self, namespace: str, report: EvictionReport) -> None:
        self.jobs.labels(namespace, report.stopped).inc()
        self.rounds.labels(namespace).inc(report.rounds)
        self.objects.labels(namespace).inc(report.objects)
        self.bytes.labels(namespace).inc(report.bytes)
        self.seconds.labels(namespace).observe(report.seconds)

    def observe_request(self, namespace: str, enqueued: int) -> None:
        self.requests.labels(namespace).inc(enqueued)

    def count_jobs(self) -> None:
        """Count every eviction job this process runs from now on."""
        if self.observe_job not in job_observers:
            job_observers.append(self.observe_job)

    def text(self) -> str:
        """The exposition a scrape returns."""
        return generate_latest(self.registry).decode()

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serve /metrics from a daemon thread of this process."""
        from prometheus_client import start_http_server

        start_http_server(port, address, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", address, port)
