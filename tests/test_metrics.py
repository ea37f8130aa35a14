"""Prometheus metrics on a real redis-server: what a scrape shows is what Index.usage()
and the tree say, served by `mooncake-redis metrics` and by a worker whose counters move
with the jobs it runs."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import redis
import rq
from clock import CHILD_GUARD_S, joined
from helpers import A, B, C, build_small_tree, page
from ports import free_port
from prometheus_client import generate_latest, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families
from redis_server import RedisServer

from mooncake_redis import Index
from mooncake_redis.capacity.eviction import TARGET_REACHED
from mooncake_redis.cli.main import main
from mooncake_redis.errors import NoSpace
from mooncake_redis.operations.failover import FailoverPass
from mooncake_redis.operations.metrics import Exporter
from mooncake_redis.workers.jobs import QUEUE_NAME, request_eviction
from mooncake_redis.workers.monitor import watch

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "mooncake-redis.json"
METRIC_NAME = re.compile(r"\bmooncake_redis_[a-z_]+")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


def build(index: Index) -> None:
    """A <- B (complete), A <- C (processing, soft-pinned), D alone: three leaves."""
    build_small_tree(index)
    index.put_start(f"{page('d')}_0_k", 256)
    index.put_end(f"{page('d')}_0_k")


def assert_matches_usage(scraped: Samples, index: Index) -> None:
    usage = index.usage()
    namespace = index.namespace
    assert value(scraped, "mooncake_redis_up", namespace=namespace) == 1
    assert value(scraped, "mooncake_redis_used_bytes", namespace=namespace) == usage.used_bytes
    assert value(scraped, "mooncake_redis_capacity_bytes",
                 namespace=namespace) == usage.capacity_bytes
    assert value(scraped, "mooncake_redis_objects", namespace=namespace) == usage.objects
    assert value(scraped, "mooncake_redis_nodes", namespace=namespace) == usage.nodes


def test_a_scrape_shows_what_usage_and_the_tree_say(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="met", capacity_bytes=1 << 20)
    other = Index.from_url(redis_url, namespace="other")
    build(index)
    scraped = samples(Exporter([index.ctx, other.ctx]).text())
    assert_matches_usage(scraped, index)
    assert index.usage().used_bytes == 2048 + 1024 + 512 + 256
    assert value(scraped, "mooncake_redis_leaves", namespace="met", pin="none") == 2  # B, D
    assert value(scraped, "mooncake_redis_leaves", namespace="met", pin="soft") == 1  # C
    # a namespace that holds nothing (a mistyped name) is not a healthy empty store
    assert value(scraped, "mooncake_redis_up", namespace="other") == 0
    assert ("mooncake_redis_objects", (("namespace", "other"),)) not in scraped
    other.set_config(lease_ttl_ms=5)  # settings stored: it exists, empty
    scraped = samples(Exporter([other.ctx]).text())
    assert_matches_usage(scraped, other)
    assert value(scraped, "mooncake_redis_objects", namespace="other") == 0

    index.remove(f"{page('d')}_0_k")  # read at every scrape, never cached
    scraped = samples(Exporter([index.ctx]).text())
    assert_matches_usage(scraped, index)
    assert value(scraped, "mooncake_redis_leaves", namespace="met", pin="none") == 1


def test_a_redis_that_is_down_is_up_0_not_a_failed_scrape() -> None:
    server = RedisServer()
    index = Index.from_url(server.url, namespace="gone", cluster_retries=0)
    server.stop()
    scraped = samples(Exporter([index.ctx]).text())
    assert value(scraped, "mooncake_redis_up", namespace="gone") == 0
    assert ("mooncake_redis_objects", (("namespace", "gone"),)) not in scraped


@contextlib.contextmanager
def counting(exporter: Exporter) -> Iterator[Exporter]:
    exporter.count_this_process()
    try:
        yield exporter
    finally:
        exporter.stop_counting()


def test_refusals_are_counted_by_operation_and_reason(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="ref", capacity_bytes=256 * 4096)
    exporter = Exporter([index.ctx])
    a, b = f"{page('a')}_0_k", f"{page('b')}_0_k"
    Index.from_url(redis_url, namespace="ref").put_start(a, 10)  # another writer's
    assert not index.batch_put_start([(a, 10)])[0].ok  # before counting: not counted
    with counting(exporter):
        puts = index.batch_put_start([(a, 10), (b, 10), (f"{page(1)}_0_k", 1 << 20),
                                      (f"{page(2)}_0_k", 1 << 20)])  # over a shard's 4 KiB
        index.put_end(b)
        index.get(b)  # a lease: remove is refused
        removes = index.batch_remove([b])
        ends = index.batch_put_end([f"{page('never')}_0_k"])
        scraped = samples(exporter.text())
    index.batch_remove([b])  # after stop_counting: not counted
    assert samples(exporter.text()) == scraped
    refused = [type(r.error).__name__ for r in puts + removes + ends if r.error]
    assert refused == ["ObjectAlreadyExists", "NoSpace", "NoSpace", "ObjectLeased",
                       "ObjectNotFound"]
    assert isinstance(puts[2].error, NoSpace)
    counted = {labels: count for (name, labels), count in scraped.items()
               if name == "mooncake_redis_refusals_total"}
    ref = ("namespace", "ref")
    assert counted == {
        (ref, ("operation", "put_start"), ("reason", "ObjectAlreadyExists")): 1,
        (ref, ("operation", "put_start"), ("reason", "NoSpace")): 2,
        (ref, ("operation", "remove"), ("reason", "ObjectLeased")): 1,
        (ref, ("operation", "put_end"), ("reason", "ObjectNotFound")): 1,
    }


def test_script_latency_is_observed_per_script_while_counting(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="lat")
    exporter = Exporter([index.ctx])
    index.put_start(f"{page('x')}_0_k", 10)  # before counting: not observed
    with counting(exporter):
        index.batch_put_start([(f"{page(n)}_0_k", 10) for n in range(50)])  # one batch
        for n in range(3):
            index.put_end(f"{page(n)}_0_k")
        scraped = samples(exporter.text())

    def count(script: str) -> float:
        return scraped.get(("mooncake_redis_script_seconds_count", (("script", script),)), 0)

    assert count("put") == 1 and count("put_end") == 3 and count("delete") == 0
    assert value(scraped, "mooncake_redis_script_seconds_sum", script="put") > 0
    assert value(scraped, "mooncake_redis_script_seconds_bucket", script="put_end",
                 le="+Inf") == 3


def test_eviction_lag_counts_from_the_first_scrape_above_the_high_watermark(
        redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="lag", capacity_bytes=1 << 20, lease_ttl_ms=1)
    build(index)  # 3840 bytes
    now = [1000.0]
    exporter = Exporter([index.ctx], clock=lambda: now[0])

    def lag() -> float:
        scraped = samples(exporter.text())
        assert value(scraped, "mooncake_redis_high_watermark_ratio",
                     namespace="lag") == index.settings.high_watermark
        return value(scraped, "mooncake_redis_eviction_lag_seconds", namespace="lag")

    assert lag() == 0
    index.set_config(capacity_bytes=4000)  # 3840 > 0.9 x 4000
    now[0] += 5
    assert lag() == 0  # first seen above now
    now[0] += 30
    assert lag() == 30
    index.evict()
    assert index.usage().used_bytes <= 0.9 * 4000
    now[0] += 10
    assert lag() == 0
    index.set_config(capacity_bytes=1000)  # above again: counted from this scrape
    now[0] += 10
    assert lag() == 0
    now[0] += 7
    assert lag() == 7


def test_eviction_counters_move_with_the_jobs_this_process_runs(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="evm", capacity_bytes=1 << 20, lease_ttl_ms=1)
    build(index)
    exporter = Exporter([index.ctx])
    with counting(exporter):
        before = samples(exporter.text())
        assert ("mooncake_redis_evicted_objects_total", (("namespace", "evm"),)) not in before
        report = index.evict(target_ratio=0)
        scraped = samples(exporter.text())
    assert report.objects == 2  # B and D; A keeps its child C, which is still processing
    assert value(scraped, "mooncake_redis_eviction_jobs_total", namespace="evm",
                 stopped=report.stopped) == 1
    assert value(scraped, "mooncake_redis_evicted_objects_total", namespace="evm") == 2
    assert value(scraped, "mooncake_redis_evicted_bytes_total", namespace="evm") == report.bytes
    assert value(scraped, "mooncake_redis_eviction_rounds_total",
                 namespace="evm") == report.rounds
    assert value(scraped, "mooncake_redis_eviction_job_seconds_count", namespace="evm") == 1
    assert_matches_usage(scraped, index)


def scrape(port: int, deadline_s: float = 30) -> Samples:
    """The endpoint's samples, waiting for the server to listen."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                return samples(reply.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait(timeout=CHILD_GUARD_S)


def test_the_metrics_command_serves_the_scrape_over_http(
        redis_url: str, environment: dict[str, str],
        processes: list[subprocess.Popen[str]]) -> None:
    index = Index.from_url(redis_url, namespace="http", capacity_bytes=1 << 20)
    build(index)
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "mooncake_redis", "metrics", "--port", str(port),
         "--address", "127.0.0.1", "--url", redis_url, "--namespace", "http"],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.append(exporter)
    assert_matches_usage(scrape(port), index)
    exporter.terminate()  # SIGTERM: a clean stop
    assert exporter.wait(timeout=30) == 0


def test_an_exporter_started_while_redis_is_down_serves_up_0_until_it_answers(
        environment: dict[str, str], processes: list[subprocess.Popen[str]]) -> None:
    """The documented `mooncake_redis_up == 0` alert must be able to fire for an exporter
    that started first: it serves up 0, then the namespace once Redis is there. Waits on
    what the scrapes say (a hang guard only)."""
    redis_port, port = free_port(), free_port()
    url = f"redis://127.0.0.1:{redis_port}/0"
    exporter = subprocess.Popen(
        [sys.executable, "-m", "mooncake_redis", "metrics", "--port", str(port),
         "--address", "127.0.0.1", "--url", url, "--namespace", "late"],
        env={**environment, "MOONCAKE_REDIS_CLUSTER_RETRIES": "0"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.append(exporter)
    assert value(scrape(port), "mooncake_redis_up", namespace="late") == 0
    assert exporter.poll() is None
    server = RedisServer(port=redis_port)
    try:
        index = Index.from_url(server.url, namespace="late", capacity_bytes=1 << 20)
        build(index)
        deadline = time.monotonic() + 60
        while value(scraped := scrape(port), "mooncake_redis_up", namespace="late") == 0:
            assert time.monotonic() < deadline, "the exporter never saw Redis come up"
            time.sleep(0.05)
        assert_matches_usage(scraped, index)
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
        server.stop()


def test_metrics_once_on_a_mistyped_namespace_says_so_and_exits_1(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Index.from_url(redis_url, namespace="real", capacity_bytes=1 << 20)
    assert main(["--url", redis_url, "metrics", "--once", "real"]) == 0
    capsys.readouterr()
    assert main(["--url", redis_url, "metrics", "--once", "reel"]) == 1
    captured = capsys.readouterr()
    assert 'mooncake_redis_up{namespace="reel"} 0.0' in captured.out
    assert "'reel' down or does not exist" in captured.err


def job_counted(scraped: Samples, namespace: str) -> float:
    return sum(number for (name, labels), number in scraped.items()
               if name == "mooncake_redis_eviction_jobs_total" and ("namespace", namespace)
               in labels)


def assert_whole(scraped: Samples, index: Index, used_before: int) -> None:
    """A scrape that counts the job counts all it did and shows the usage it left."""
    namespace = index.namespace
    if not job_counted(scraped, namespace):
        return
    counted = {name: scraped.get((f"mooncake_redis_{name}_total", (("namespace", namespace),)), 0)
               for name in ("evicted_bytes", "evicted_objects", "eviction_rounds")}
    usage = index.usage()
    assert counted["evicted_bytes"] == used_before - usage.used_bytes > 0, counted
    assert counted["evicted_objects"] > 0 and counted["eviction_rounds"] > 0, counted
    assert value(scraped, "mooncake_redis_eviction_job_seconds_count", namespace=namespace) == 1
    assert value(scraped, "mooncake_redis_used_bytes", namespace=namespace) == usage.used_bytes


class JobMidScrape:
    """The exporter's registry, with an eviction job run after the scrape collected
    `after` + 1 metric families (as a worker's job may end at any point of a scrape)."""

    def __init__(self, exporter: Exporter, after: int, job: Callable[[], object]):
        self.exporter, self.after, self.job = exporter, after, job

    def collect(self) -> Iterator[object]:
        for number, family in enumerate(self.exporter.registry.collect()):
            yield family
            if number == self.after:
                self.job()


class ScrapedAfterEachUpdate:
    """One of the exporter's job metrics: every update is followed by a whole scrape (as a
    scrape may come between any two of the updates that count a job)."""

    def __init__(self, metric: Any, scrape: Callable[[], None]):
        self.metric, self.scrape = metric, scrape

    def labels(self, *values: str) -> Any:
        child, scrape = self.metric.labels(*values), self.scrape

        class Updated:
            def inc(self, amount: float = 1) -> None:
                child.inc(amount)
                scrape()

            def observe(self, amount: float) -> None:
                child.observe(amount)
                scrape()

        return Updated()


def test_a_scrape_that_counts_a_job_shows_all_it_did(redis_url: str) -> None:
    """A job ends whenever it ends: at any point of a scrape, and a scrape may come between
    any two of the counter updates of a job's end. Whenever a scrape counts the job, its
    other counters and the usage gauge show all the job did. (Before, the gauges were read
    before the counters, and the job counted before its bytes: a worker's job that ended
    mid-scrape showed as done beside the usage from before it, and
    test_a_worker_with_metrics_counts_the_jobs_it_runs failed 1 run in 10 under load.)"""
    def above_the_watermark(name: str) -> tuple[Index, Exporter, int]:
        index = Index.from_url(redis_url, namespace=name, capacity_bytes=1 << 20,
                               lease_ttl_ms=0)
        build(index)
        index.put_end(f"{C}_0_k")
        index.set_config(capacity_bytes=3200)  # 3840 bytes used: above the high watermark
        return index, Exporter([index.ctx]), index.usage().used_bytes

    families = len(list(above_the_watermark("families")[1].registry.collect()))
    for after in range(families):
        index, exporter, used = above_the_watermark(f"mid-scrape-{after}")
        with counting(exporter):
            scraped = samples(generate_latest(JobMidScrape(exporter, after, index.evict))
                              .decode())  # type: ignore[arg-type]
        assert_whole(scraped, index, used)
        after_the_job = samples(exporter.text())
        assert job_counted(after_the_job, index.namespace) == 1
        assert_whole(after_the_job, index, used)

    index, exporter, used = above_the_watermark("between-updates")
    scrapes: list[Samples] = []
    for name in ("jobs", "rounds", "objects", "bytes", "seconds"):
        setattr(exporter, name, ScrapedAfterEachUpdate(
            getattr(exporter, name), lambda: scrapes.append(samples(exporter.text()))))
    with counting(exporter):
        index.evict()
    assert len(scrapes) == 5
    for scraped in scrapes:
        assert_whole(scraped, index, used)
    assert job_counted(scrapes[-1], index.namespace) == 1


def test_a_worker_with_metrics_counts_the_jobs_it_runs(
        redis_url: str, environment: dict[str, str],
        processes: list[subprocess.Popen[str]]) -> None:
    queue_url = redis_url.rsplit("/", 1)[0] + "/1"
    index = Index.from_url(redis_url, namespace="wm", capacity_bytes=1 << 20,
                           queue_url=queue_url, lease_ttl_ms=1)
    build(index)
    index.set_config(capacity_bytes=3200)  # 3840 bytes used: above the high watermark
    port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "mooncake_redis", "worker", "--metrics-port", str(port),
         "--url", redis_url, "--namespace", "wm"],
        env={**environment, "MOONCAKE_REDIS_QUEUE_URL": queue_url},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.append(worker)
    before = scrape(port)
    assert ("mooncake_redis_evicted_objects_total", (("namespace", "wm"),)) not in before
    assert_matches_usage(before, index)
    assert request_eviction(index.ctx)
    deadline = time.monotonic() + 60
    while True:  # the counters move once the worker has run the job
        scraped = scrape(port)
        jobs = scraped.get(("mooncake_redis_eviction_jobs_total",
                            (("namespace", "wm"), ("stopped", TARGET_REACHED))), 0)
        assert worker.poll() is None, worker.communicate(timeout=CHILD_GUARD_S)
        if jobs or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert jobs == 1, worker.poll()
    assert value(scraped, "mooncake_redis_script_seconds_count", script="evict") >= 1
    evicted = value(scraped, "mooncake_redis_evicted_bytes_total", namespace="wm")
    assert evicted > 0 and index.usage().used_bytes == 3840 - evicted
    assert index.usage().used_bytes <= 3200 * index.settings.eviction_target_ratio
    assert_matches_usage(scraped, index)
    assert len(rq.Queue(QUEUE_NAME, connection=redis.Redis.from_url(queue_url))) == 0


def test_the_monitor_counts_the_jobs_it_enqueues(redis_url: str) -> None:
    queue_url = redis_url.rsplit("/", 1)[0] + "/1"
    index = Index.from_url(redis_url, namespace="mq", capacity_bytes=1 << 20,
                           queue_url=queue_url)
    build(index)
    index.set_config(capacity_bytes=1000)
    exporter = Exporter([index.ctx])
    on_enqueued = functools.partial(exporter.observe_request, "mq")
    assert watch(index.ctx, interval_s=0, iterations=2, on_enqueued=on_enqueued) == 1
    scraped = samples(exporter.text())
    assert value(scraped, "mooncake_redis_eviction_requests_total", namespace="mq") == 1
    assert len(rq.Queue(QUEUE_NAME, connection=redis.Redis.from_url(queue_url))) == 1


def test_without_prometheus_client_the_command_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # as if not installed
    monkeypatch.setitem(sys.modules, "mooncake_redis.operations.metrics", None)
    assert main(["--url", "memory://", "metrics", "--once"]) == 1
    assert "pip install 'mooncake-redis[metrics]'" in capsys.readouterr().err


@contextlib.contextmanager
def serving(exporter: Exporter) -> Iterator[int]:
    """The exporter's registry over HTTP, as Exporter.serve does, stopped afterwards (a
    server thread left behind would make later forking tests warn)."""
    server = make_server("127.0.0.1", 0, make_wsgi_app(exporter.registry),
                         handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        joined(thread, "the metrics server to stop")


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the Grafana dashboard: panel targets and variables."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert all(panel["targets"] for panel in dashboard["panels"])
    return queries + [variable["definition"] for variable in dashboard["templating"]["list"]
                      if variable["type"] == "query"]


def test_every_metric_the_dashboard_queries_is_served(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="dash", capacity_bytes=256 * 4096,
                           lease_ttl_ms=1)
    build(index)
    index.mount_segment("seg-a", 256 * 4096)  # the same capacity, and segment gauges
    exporter = Exporter([index.ctx])
    with counting(exporter):  # make every counter and histogram hold a sample
        assert not index.batch_put_start([(f"{page(1)}_0_k", 1 << 20)])[0].ok
        index.evict(target_ratio=0)
        exporter.observe_request("dash", 1)
        exporter.observe_hicache("dash", "batches_without_parent", 1)  # test_hicache's
        exporter.observe_failover("dash", FailoverPass(  # test_failover's
            {"127.0.0.1:7000": "0" * 40}, 16, Counter(link=1), True))
    with serving(exporter) as port:
        scraped = scrape(port)
    served = {name for name, _ in scraped}
    queried = {name for query in dashboard_queries() for name in METRIC_NAME.findall(query)}
    assert len(queried) > 10 and not queried - served, sorted(queried - served)
    families = {family.name for family in exporter.registry.collect()}
    shown = {family for family in families if any(name.startswith(family) for name in queried)}
    assert families == shown, sorted(families - shown)  # every metric has a panel


def test_segment_gauges_follow_mounts_and_replicas(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="segm")
    exporter = Exporter([index.ctx])
    index.mount_segment("node-a:1", 1 << 20)
    index.put_start(f"{page(1)}_0_k", 30, replicas=[("node-a:1", "0x1")])
    scraped = samples(exporter.text())
    on = {"namespace": "segm", "segment": "node-a:1"}
    assert value(scraped, "mooncake_redis_segment_used_bytes", **on) == 30
    assert value(scraped, "mooncake_redis_segment_capacity_bytes", **on) == 1 << 20
    assert value(scraped, "mooncake_redis_capacity_bytes", namespace="segm") == 1 << 20
    index.unmount_segment("node-a:1")
    scraped = samples(exporter.text())
    assert not [labels for _, labels in scraped if ("segment", "node-a:1") in labels]
    assert value(scraped, "mooncake_redis_capacity_bytes", namespace="segm") == 0


def test_shells_are_counted_exactly_as_they_come_and_go(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="shells")
    build(index)
    exporter = Exporter([index.ctx])
    assert value(samples(exporter.text()), "mooncake_redis_shells", namespace="shells") == 0
    index.remove(f"{A}_0_k", force=True)  # A keeps its children B and C: a shell
    assert value(samples(exporter.text()), "mooncake_redis_shells", namespace="shells") == 1
    index.remove(f"{B}_0_k", force=True)
    index.put_revoke(f"{C}_0_k")  # the cascade takes the shell
    assert value(samples(exporter.text()), "mooncake_redis_shells", namespace="shells") == 0
