"""Prometheus metrics: each namespace's capacity and tree, read from Redis at every scrape
(the shards' exact counters: one round trip), how long it has been above its high
watermark, and what this process did: eviction jobs and requests (worker, monitor),
failovers seen and healed (monitor), items refused by batch calls and script latencies
(any process that counts them). Needs the `metrics` extra (prometheus-client)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisClusterException

from mooncake_redis.capacity.admission import read_shards, segment_usage
from mooncake_redis.capacity.eviction import EvictionReport, job_observers
from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError
from mooncake_redis.executor import Batch
from mooncake_redis.observers import hicache_observers, refusal_observers, script_observers

from .failover import FailoverPass, failover_observers
from .namespaces import namespace_exists

log = logging.getLogger(__name__)

JOB_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600)
"""Eviction job durations: most jobs take well under a second; the RQ timeout is 600 s."""

SCRIPT_SECONDS_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                          0.5, 1, 2.5)
"""Batch round trips: a fraction of a millisecond on a quiet local Redis, more for large
batches, a loaded server or a cluster's several segments."""


def count_leaves(ctx: Context) -> tuple[int, int]:
    """(leaves, soft-pinned leaves): the sizes of every shard's leaf indexes, one round
    trip (per node on a cluster)."""
    def queue(batch: Batch, shard: str) -> None:
        keys = ctx.schema.shard_keys(shard)
        batch.command("ZCARD", keys.leaves)
        batch.command("ZCARD", keys.soft_leaves)

    sizes = [(int(leaves), int(soft)) for _, (leaves, soft) in ctx.per_shard(queue)]
    return sum(leaves for leaves, _ in sizes), sum(soft for _, soft in sizes)


class Opener:
    """A namespace's Context, opened at its first scrape that reaches Redis: an exporter
    started while Redis is down serves `mooncake_redis_up 0` until Redis answers."""

    def __init__(self, namespace: str, open_context: Callable[[], Context]):
        self.namespace = namespace
        self._open = open_context
        self._ctx: Context | None = None

    def get(self) -> Context:
        if self._ctx is None:
            self._ctx = self._open()
        return self._ctx


Source = Context | Opener
"""What an exporter reads: an open Context, or an Opener that opens one when it can."""


def namespace_of_source(source: Source) -> str:
    return source.namespace if isinstance(source, Opener) else source.schema.namespace


def context_of(source: Source) -> Context:
    return source.get() if isinstance(source, Opener) else source


class NamespaceCollector(Collector):
    """Gauges read at scrape time, so any number of exporters agree. A namespace whose Redis
    does not answer, or that holds nothing (no settings, segments or shard stats: a
    mistyped name looks like an empty store otherwise), is reported with
    mooncake_redis_up 0.

    The one thing kept between scrapes is when this exporter first saw a namespace above its
    high watermark (mooncake_redis_eviction_lag_seconds): Redis records no such time, so
    two exporters started apart may differ, and a restarted one counts again from 0."""

    def __init__(self, sources: list[Source], clock: Callable[[], float] = time.monotonic):
        self.sources = sources
        self.clock = clock
        self._above_since: dict[str, float] = {}
        self.last_up: dict[str, bool] = {}
        """Per namespace: whether the last scrape found it up."""

    def eviction_lag(self, namespace: str, above: bool) -> float:
        """Seconds since the first scrape that saw the namespace above its high watermark,
        in a run of such scrapes; 0 when below."""
        if not above:
            self._above_since.pop(namespace, None)
            return 0.0
        now = self.clock()
        return now - self._above_since.setdefault(namespace, now)

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace"]
        up = GaugeMetricFamily("mooncake_redis_up", "1 if the namespace's Redis answered "
                               "this scrape and the namespace exists", labels=labels)
        used = GaugeMetricFamily("mooncake_redis_used_bytes", "bytes of stored and "
                                 "processing objects (the sum of the shards' counters)",
                                 labels=labels)
        capacity = GaugeMetricFamily("mooncake_redis_capacity_bytes", "the capacity_bytes "
                                     "setting (0 = unlimited), or the sum of the mounted "
                                     "segments while any is registered", labels=labels)
        objects = GaugeMetricFamily("mooncake_redis_objects", "objects, complete or "
                                    "processing", labels=labels)
        nodes = GaugeMetricFamily("mooncake_redis_nodes", "radix tree nodes, shells "
                                  "included", labels=labels)
        shells = GaugeMetricFamily("mooncake_redis_shells", "nodes with children and no "
                                   "objects (kept for their children; match_prefix stops "
                                   "at them)", labels=labels)
        leaves = GaugeMetricFamily("mooncake_redis_leaves", "nodes with objects and no "
                                   "children, in the eviction leaf index (pin: none or "
                                   "soft)", labels=["namespace", "pin"])
        watermark = GaugeMetricFamily("mooncake_redis_high_watermark_ratio", "the "
                                      "high_watermark setting: eviction starts when "
                                      "used/capacity passes it", labels=labels)
        lag = GaugeMetricFamily("mooncake_redis_eviction_lag_seconds", "how long used bytes "
                                "have been above high_watermark x capacity, as seen at "
                                "this exporter's scrapes (0 below it); alert when it "
                                "stays up: eviction is not keeping up", labels=labels)
        segment_labels = ["namespace", "segment"]
        segment_used = GaugeMetricFamily("mooncake_redis_segment_used_bytes", "bytes of "
                                         "replicas on each registered segment",
                                         labels=segment_labels)
        segment_capacity = GaugeMetricFamily("mooncake_redis_segment_capacity_bytes",
                                             "each registered segment's capacity (0 while "
                                             "it is being unmounted)", labels=segment_labels)
        for source in self.sources:
            namespace = namespace_of_source(source)
            try:
                ctx = context_of(source)
                exists = namespace_exists(ctx)
                shards = read_shards(ctx)
                plain, soft = count_leaves(ctx)
                settings = ctx.reload_settings()  # the capacity the segments make now
                segments = segment_usage(ctx, ctx.segments)
            except (redis.RedisError, RedisClusterException, MooncakeRedisError) as error:
                log.warning("metrics: namespace %s unavailable: %s", namespace, error)
                exists = False
            else:
                if not exists:
                    log.warning("metrics: namespace %s does not exist (no settings, segments "
                                "or shard stats): up 0", namespace)
            self.last_up[namespace] = exists
            up.add_metric([namespace], int(exists))
            if not exists:
                continue
            used_bytes = sum(shard.used_bytes for shard in shards)
            used.add_metric([namespace], used_bytes)
            capacity.add_metric([namespace], settings.capacity_bytes)
            watermark.add_metric([namespace], settings.high_watermark)
            lag.add_metric([namespace], self.eviction_lag(namespace, bool(
                settings.capacity_bytes) and used_bytes > settings.high_watermark
                * settings.capacity_bytes))
            objects.add_metric([namespace], sum(shard.objects for shard in shards))
            nodes.add_metric([namespace], sum(shard.nodes for shard in shards))
            shells.add_metric([namespace], sum(shard.shells for shard in shards))
            leaves.add_metric([namespace, "none"], plain)
            leaves.add_metric([namespace, "soft"], soft)
            for segment in segments.values():
                segment_used.add_metric([namespace, segment.name], segment.used_bytes)
                segment_capacity.add_metric([namespace, segment.name],
                                            segment.capacity_bytes if segment.mounted else 0)
        yield from (up, used, capacity, objects, nodes, shells, leaves, watermark, lag,
                    segment_used,
                    segment_capacity)


class Exporter:
    """One registry: the namespaces' gauges, and counters of what this process did."""

    def __init__(self, sources: list[Source], clock: Callable[[], float] = time.monotonic):
        self.registry = CollectorRegistry()
        self.collector = NamespaceCollector(sources, clock)
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
        self.failovers = Counter("mooncake_redis_failovers", "failovers this process (the "
                                 "monitor) saw: a Redis node serving shards under another "
                                 "replication ID than their record", ns,
                                 registry=self.registry)
        self.failover_heals = Counter("mooncake_redis_failover_heals", "heals after a "
                                      "failover this process finished (sweeps of the "
                                      "namespace's links until one mended none)", ns,
                                      registry=self.registry)
        self.failover_nodes = Counter("mooncake_redis_failover_checked_nodes", "tree nodes "
                                      "whose links those sweeps checked (at most 1,000 per "
                                      "primary per monitor check)", ns,
                                      registry=self.registry)
        self.failover_repairs = Counter("mooncake_redis_failover_repairs", "what those "
                                        "sweeps mended, by fsck's kind (link: a parent "
                                        "that did not list its child; dangling_link)",
                                        ["namespace", "kind"], registry=self.registry)
        self.refusals = Counter("mooncake_redis_refusals", "items refused by this process's "
                                "batch calls, by operation and error class (NoSpace, "
                                "ObjectLeased, ...)", ["namespace", "operation", "reason"],
                                registry=self.registry)
        self.hicache = Counter("mooncake_redis_hicache", "what the SGLang HiCache backends of "
                               "this process counted: batches_without_parent, "
                               "parents_linked, conflicting_pages (docs/INTEGRATIONS.md)",
                               ["namespace", "counter"], registry=self.registry)
        self.script_seconds = Histogram("mooncake_redis_script_seconds", "time of the "
                                        "batches (round trips) that carried each script, "
                                        "once per script per batch", ["script"],
                                        buckets=SCRIPT_SECONDS_BUCKETS, registry=self.registry)
        # A scrape collects in registration order: the counters first, then the gauges
        # read from Redis. A job counts itself after its writes, so a scrape that shows a
        # job done also shows the usage it left (read after the counters); the other order
        # showed a job that ended mid-scrape with the usage from before it.
        self.registry.register(self.collector)

    def observe_job(self, namespace: str, report: EvictionReport) -> None:
        """Count a job that ended; the job itself last, in the reverse of the order a scrape
        reads them, so a scrape that counts the job counts all it did."""
        self.seconds.labels(namespace).observe(report.seconds)
        self.bytes.labels(namespace).inc(report.bytes)
        self.objects.labels(namespace).inc(report.objects)
        self.rounds.labels(namespace).inc(report.rounds)
        self.jobs.labels(namespace, report.stopped).inc()

    def observe_request(self, namespace: str, enqueued: int) -> None:
        self.requests.labels(namespace).inc(enqueued)

    def observe_failover(self, namespace: str, result: FailoverPass) -> None:
        for kind, count in result.repaired.items():
            self.failover_repairs.labels(namespace, kind).inc(count)
        self.failover_nodes.labels(namespace).inc(result.checked)
        self.failover_heals.labels(namespace).inc(int(result.healed))
        self.failovers.labels(namespace).inc(len(result.failovers))

    def observe_refusal(self, namespace: str, operation: str, reason: str) -> None:
        self.refusals.labels(namespace, operation, reason).inc()

    def observe_script(self, script: str, seconds: float) -> None:
        self.script_seconds.labels(script).observe(seconds)

    def observe_hicache(self, namespace: str, counter: str, amount: int) -> None:
        self.hicache.labels(namespace, counter).inc(amount)

    def _hooks(self) -> list[tuple[list[Any], Any]]:
        return [(job_observers, self.observe_job), (refusal_observers, self.observe_refusal),
                (script_observers, self.observe_script),
                (hicache_observers, self.observe_hicache),
                (failover_observers, self.observe_failover)]

    def count_this_process(self) -> None:
        """Count from now on what this process does: the eviction jobs it runs, the items
        its batch calls refuse, the time of the batches carrying each script, the
        failovers its monitor sees and heals."""
        for observers, observe in self._hooks():
            if observe not in observers:
                observers.append(observe)

    def stop_counting(self) -> None:
        for observers, observe in self._hooks():
            if observe in observers:
                observers.remove(observe)

    def text(self) -> str:
        """The exposition a scrape returns."""
        return generate_latest(self.registry).decode()

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Serve /metrics from a daemon thread of this process, on this machine only unless
        told another address ("0.0.0.0": every interface)."""
        from prometheus_client import start_http_server

        start_http_server(port, address, registry=self.registry)
        log.info("metrics on http://%s:%d/metrics", address, port)
