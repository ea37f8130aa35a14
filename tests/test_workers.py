"""RQ jobs, the monitor and workers (v2): a job carries the namespace and target only, and
each process that runs one reads its Redis URL from its own environment; follow-up jobs
drain what one job's rounds cannot; the monitor enqueues above the watermark and rides
out a Redis restart; memory:// runs the queue in process with rq.SimpleWorker."""

from __future__ import annotations

import itertools
import logging
import os
import queue as queue_module
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from typing import IO

import pytest
import redis
import rq
from clock import CHILD_GUARD_S, read_line, wait_until
from helpers import assert_consistent, page
from redis_server import RedisServer

from mooncake_redis import ConfigurationError, Index, NoSpace
from mooncake_redis.capacity.eviction import LOCK_HELD, ROUND_LIMIT
from mooncake_redis.cli.main import main
from mooncake_redis.settings import ENV_URL
from mooncake_redis.workers.jobs import (
    ENV_QUEUE_URL,
    QUEUE_NAME,
    eviction_job,
    eviction_queue,
    request_eviction,
)
from mooncake_redis.workers.monitor import watch
from mooncake_redis.workers.worker import run_worker

_memory_names = itertools.count()


@pytest.fixture(autouse=True)
def no_index_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


@pytest.fixture
def queue_url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + "/1"


@pytest.fixture
def worker_environment(redis_url: str, queue_url: str,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker's process is started with: the index and queue URLs."""
    monkeypatch.setenv(ENV_URL, redis_url)
    monkeypatch.setenv(ENV_QUEUE_URL, queue_url)


def chain(index: Index, pages: int, size: int = 10, name: str = "p") -> list[str]:
    """A chain of complete pages, each the parent of the next."""
    hashes = [page(f"{name}{i}") for i in range(pages)]
    index.batch_put_start([(f"{h}_0_k", size, hashes[i - 1] if i else None)
                           for i, h in enumerate(hashes)])
    index.batch_put_end([f"{h}_0_k" for h in hashes])
    return hashes


def roots(index: Index, pages: int, size: int = 10) -> None:
    """Pages without parents: each a leaf of its own."""
    keys = [f"{page(f'root{i}')}_0_k" for i in range(pages)]
    index.batch_put_start([(key, size) for key in keys])
    index.batch_put_end(keys)


def queue(queue_url: str) -> rq.Queue:
    return eviction_queue(queue_url)


def test_a_job_carries_only_the_namespace_and_target(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="jobs", queue_url=queue_url)
    assert request_eviction(index.ctx, target_ratio=0.5)
    assert not request_eviction(index.ctx)  # one queued per namespace is enough
    (job,) = queue(queue_url).get_jobs()
    assert job.func_name == "mooncake_redis.workers.jobs.eviction_job"
    assert job.args == ("jobs", 0.5) and job.kwargs == {}
    stored = redis.Redis.from_url(queue_url).hgetall(f"rq:job:{job.id}")
    data = zlib.decompress(stored[b"data"])  # type: ignore[arg-type]  # bytes: no decoding
    assert b"redis://" not in data and str(index.client.connection_pool
                                           .connection_kwargs["port"]).encode() not in data
    assert not any(b"redis://" in value for value in stored.values())


def test_a_worker_process_reads_the_index_url_from_its_own_environment(
        redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="env-worker", queue_url=queue_url)
    chain(index, 5)
    elsewhere = redis_url.rsplit("/", 1)[0] + "/2"

    def worker(index_url: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_")}
        code = f"from mooncake_redis.workers.worker import run_worker; " \
               f"run_worker({queue_url!r}, burst=True)"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                       capture_output=True, env={**environment, ENV_URL: index_url})

    assert request_eviction(index.ctx, target_ratio=0)
    worker(elsewhere)  # its environment points at another database: ours is untouched
    assert index.usage().objects == 5
    assert index.client.exists(index.ctx.schema.eviction_requested)  # cleared over there
    assert request_eviction(index.ctx, target_ratio=0, follow_up=True)
    worker(redis_url)
    assert index.usage().objects == 0


@pytest.mark.usefixtures("worker_environment")
def test_leaves_drain_over_follow_up_jobs(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="drain", max_rounds_per_job=4,
                           leaves_per_round=1)
    roots(index, 32)  # one leaf per round: 4 pages per job (a chain drains in one round)
    assert request_eviction(index.ctx, target_ratio=0)
    run_worker(queue_url, burst=True, logging_level="WARNING")
    assert index.usage().objects == 0 and index.usage().nodes == 0
    assert queue(queue_url).finished_job_registry.count == 32 // 4
    assert_consistent(index)


@pytest.mark.usefixtures("worker_environment")
def test_the_monitor_enqueues_once_above_the_watermark(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="mon", queue_url=queue_url)
    roots(index, 95)
    index.set_config(capacity_bytes=1000)  # 950 bytes used: above 90%
    assert watch(index.ctx, interval_s=0, iterations=1) == 1
    assert watch(index.ctx, interval_s=0, iterations=1) == 0  # one queued is enough
    assert len(queue(queue_url)) == 1
    run_worker(queue_url, burst=True, logging_level="WARNING")
    assert index.usage().used_bytes <= 850  # high_watermark - eviction_ratio
    assert watch(index.ctx, interval_s=0, iterations=1) == 0
    assert len(queue(queue_url)) == 0


@pytest.fixture
def restartable_redis() -> Iterator[RedisServer]:
    """A Redis of its own that keeps its data across a kill -9 (AOF, fsync always)."""
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always")
    yield server
    server.stop()


def test_the_monitor_rides_out_a_redis_restart(restartable_redis: RedisServer,
                                               caplog: pytest.LogCaptureFixture) -> None:
    server = restartable_redis
    queue_url = server.url.rsplit("/", 1)[0] + "/1"
    index = Index.from_url(server.url, namespace="restart", queue_url=queue_url,
                           cluster_retries=1, cluster_retry_backoff_ms=10)
    roots(index, 95)
    index.set_config(capacity_bytes=1000)
    server.kill()
    with caplog.at_level(logging.WARNING, logger="mooncake_redis"):
        assert watch(index.ctx, interval_s=0, iterations=2) == 0
    assert sum("Redis unavailable" in r.getMessage() for r in caplog.records) == 2
    restarted = RedisServer("--appendonly", "yes", "--appendfsync", "always",
                            port=server.port, directory=server.directory)
    try:
        assert watch(index.ctx, interval_s=0, iterations=1) == 1  # the same client, again
        assert len(queue(queue_url)) == 1
    finally:
        restarted.stop()


@pytest.mark.usefixtures("worker_environment")
def test_a_put_with_a_wait_is_written_once_the_worker_has_evicted(
        redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="full-wait", queue_url=queue_url)
    roots(index, 2000)
    index.set_config(capacity_bytes=20_000)  # as above: every shard at its limit
    one_more = f"{page('one-more')}_0_k"
    outcome: list[BaseException | None] = []

    def put() -> None:
        try:
            index.put_start(one_more, 10, wait_ms=120_000)  # a liveness bound
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    waiting = threading.Thread(target=put)
    waiting.start()
    wait_until(lambda: len(queue(queue_url)), "the refusal's eviction job")
    assert not outcome and index.object_info(one_more) is None  # waiting: with a queue,
    # the call runs no eviction job itself
    # unforked: forking beside the waiting thread could copy a lock it holds
    run_worker(queue_url, burst=True, logging_level="WARNING", in_process=True)
    waiting.join(timeout=120)
    assert outcome == [None]
    assert index.object_info(one_more) is not None
    assert index.usage().used_bytes <= 17_000 + 10
    assert_consistent(index)


@pytest.mark.usefixtures("worker_environment")
def test_put_start_refused_for_space_enqueues_a_job(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="full", queue_url=queue_url)
    roots(index, 2000)
    # Admission is per shard: after this every shard's limit is its usage. The eviction
    # job frees 15% of capacity, which its keeper spreads over the 256 shards: 11 bytes
    # each, room for one more page of 10 in any shard.
    index.set_config(capacity_bytes=20_000)
    one_more = f"{page('one-more')}_0_k"
    with pytest.raises(NoSpace):
        index.put_start(one_more, 10)
    assert len(queue(queue_url)) == 1
    run_worker(queue_url, burst=True, logging_level="WARNING")
    assert index.usage().used_bytes <= 17_000
    index.put_start(one_more, 10)
    assert_consistent(index)


KILLED_WORKER = """
import sys, time
from mooncake_redis.capacity.eviction import Evictor
from mooncake_redis.workers.jobs import eviction_job
original = Evictor._round
def slow_round(self, *args):
    evicted = original(self, *args)
    print("round", flush=True)
    time.sleep(60)  # the test kills it here, holding the lock
    return evicted
Evictor._round = slow_round
eviction_job("killed", 0)
"""


def test_a_killed_worker_leaves_the_lock_to_expire_and_the_next_job_finishes(
        redis_url: str) -> None:
    """Deterministic on a loaded machine: the lock is taken with a TTL no stall outlasts, so
    it is surely still held when the next job tries; then its expiry is brought forward
    (Redis expires it on its own clock, which a test cannot move on) and the next job,
    started once the key has gone, finishes."""
    lock_ttl_ms = 600_000
    index = Index.from_url(redis_url, namespace="killed", eviction_lock_ttl_ms=lock_ttl_ms,
                           leaves_per_round=1)
    roots(index, 20)  # one leaf per round (a chain would drain in one)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_")}
    worker = subprocess.Popen([sys.executable, "-c", KILLED_WORKER], stdout=subprocess.PIPE,
                              text=True, env={**environment, ENV_URL: redis_url})
    try:
        assert worker.stdout is not None
        assert read_line(worker.stdout, "the job's first round").strip() == "round"
    finally:
        worker.kill()  # kill -9 while it holds the lock
        worker.wait(timeout=CHILD_GUARD_S)
    assert index.usage().objects == 19  # one round ran before the kill
    lock = index.ctx.schema.eviction_lock
    assert 0 < index.client.pttl(lock) <= lock_ttl_ms  # it expires, within the setting
    assert index.evict(target_ratio=0).stopped == LOCK_HELD
    index.client.pexpire(lock, 1)
    wait_until(lambda: not index.client.exists(lock), "the killed job's lock to expire")
    report = index.evict(target_ratio=0)
    assert report.stopped == ROUND_LIMIT and report.leaves == 16  # one job's rounds
    while index.evict(target_ratio=0).objects:
        pass
    assert index.usage().objects == 0
    assert_consistent(index)


def test_the_in_process_queue_runs_jobs_and_follow_ups_with_a_simple_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    number = next(_memory_names)
    index_url, queue_url = f"memory://workers-{number}", f"memory://queue-{number}"
    monkeypatch.setenv(ENV_URL, index_url)  # jobs run in this process and read it here
    monkeypatch.setenv(ENV_QUEUE_URL, queue_url)
    index = Index.from_url(index_url, namespace="inproc", max_rounds_per_job=8,
                           leaves_per_round=1)
    roots(index, 24)
    assert request_eviction(index.ctx, target_ratio=0)
    run_worker(queue_url, burst=True, logging_level="WARNING")
    assert index.usage().objects == 0
    assert queue(queue_url).finished_job_registry.count == 24 // 8
    assert_consistent(index)


def test_a_job_run_directly_reports_what_it_did(redis_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, redis_url)
    index = Index.from_url(redis_url, namespace="direct")
    chain(index, 3)
    index.client.set(index.ctx.schema.eviction_requested, "1")
    result = eviction_job("direct", 0)
    assert result["leaves"] == 3 and result["objects"] == 3 and "summary" in result
    assert not index.client.exists(index.ctx.schema.eviction_requested)
    assert rq.Queue(QUEUE_NAME, connection=redis.Redis.from_url(redis_url)).count == 0


# -- logs: what a container shows ------------------------------------------------------


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mooncake_redis", *args]


def lines_of(stream: IO[str]) -> queue_module.Queue[str]:
    """The stream's lines as they arrive ('' at its end), read by a thread so that a test
    can wait for one with a deadline."""
    lines: queue_module.Queue[str] = queue_module.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


def process_environment(**variables: str) -> dict[str, str]:
    """A container's: no MOONCAKE_REDIS_* but those given, and no PYTHONUNBUFFERED (the
    command must flush its own lines)."""
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith("MOONCAKE_REDIS_") and k != "PYTHONUNBUFFERED"}
    return {**inherited, **variables}


def test_an_eviction_job_logs_one_line_however_it_stops(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    index = Index.from_url(redis_url, namespace="logged", capacity_bytes=1 << 20,
                           lease_ttl_ms=1)
    roots(index, 4, size=100)
    caplog.set_level(logging.INFO, logger="mooncake_redis.capacity.eviction")
    index.client.set(index.ctx.schema.eviction_lock, "another-job", px=10_000)
    index.evict(target_ratio=0)
    index.client.delete(index.ctx.schema.eviction_lock)
    report = index.evict(target_ratio=0)
    lines = [record.getMessage() for record in caplog.records
             if record.name == "mooncake_redis.capacity.eviction"]
    assert len(lines) == 2
    assert lines[0].startswith(f"eviction job in namespace logged: {LOCK_HELD}: 0 rounds")
    assert lines[1].startswith(
        f"eviction job in namespace logged: target reached: {report.rounds} rounds, 4 leaves, "
        f"4 objects, 400 bytes in ")
    assert index.usage().objects == 0


def test_the_worker_logs_rq_lines_and_each_eviction_job_to_a_pipe(
        redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="wlog", capacity_bytes=1 << 20,
                           queue_url=queue_url)
    roots(index, 10)
    index.set_config(capacity_bytes=100)  # 100 bytes used: above the high watermark
    assert request_eviction(index.ctx)
    result = subprocess.run(command("worker", "--burst", "--url", redis_url, "--namespace",
                                    "wlog"),
                            env=process_environment(MOONCAKE_REDIS_QUEUE_URL=queue_url),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    job_lines = [line for line in result.stderr.splitlines()
                 if " INFO mooncake_redis.capacity.eviction: eviction job in namespace wlog: "
                 in line]
    assert len(job_lines) == 1 and "target reached" in job_lines[0]
    assert " INFO rq.worker: " in result.stderr  # RQ's own lines, in the same format
    assert "Job OK" in result.stderr
    assert index.usage().used_bytes <= 85


def test_the_monitor_logs_while_it_runs_and_stops_cleanly_on_sigterm(
        redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="mlog", capacity_bytes=1 << 20)
    roots(index, 10)
    index.set_config(capacity_bytes=100)
    monitor = subprocess.Popen(command("monitor", "--interval", "0.2", "--url", redis_url,
                                       "--namespace", "mlog"),
                               env=process_environment(MOONCAKE_REDIS_QUEUE_URL=queue_url),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert monitor.stderr is not None and monitor.stdout is not None
        arriving = lines_of(monitor.stderr)
        seen: list[str] = []
        # Each line must arrive while the monitor runs, not sit in its buffer.
        while not any("eviction job enqueued" in line for line in seen):
            seen.append(arriving.get(timeout=30))
            assert seen[-1], "the monitor exited: " + "".join(seen)
        assert any(" INFO mooncake_redis.cli.eviction: monitor started" in line
                   for line in seen)
        assert monitor.poll() is None  # still running
        monitor.terminate()  # SIGTERM, as docker stop sends
        monitor.wait(timeout=30)
        out = monitor.stdout.read()
        err = "".join(iter(lambda: arriving.get(timeout=30), ""))
    finally:
        monitor.kill()
    assert monitor.returncode == 0, err
    assert "monitor stopped: 1 eviction job enqueued" in err
    assert out == "1 eviction job enqueued\n"
    assert len(queue(queue_url)) == 1


def test_a_worker_that_is_done_does_not_wait_out_its_command_reader(queue_url: str) -> None:
    """rq 3.0 reads its command channel in 60-second blocks, and redis-py 8 waits for the
    read to end when the reader is stopped: a --burst worker took up to a minute to exit
    (the env-worker test timed out 4 runs in 5). Ours reads in COMMAND_READ_S blocks. The
    reader is stopped while blocked in a read (it just handled a command and read again);
    the bound below is a hang guard 30x a read's length, not a timing."""
    from mooncake_redis.workers.worker import COMMAND_READ_S, ForkingWorker

    worker = ForkingWorker([queue(queue_url)], connection=queue(queue_url).connection)
    handled = threading.Event()
    worker.handle_payload = lambda message: handled.set()  # what subscribe() registers
    worker.subscribe()
    channel = worker.pubsub_channel_name
    wait_until(lambda: worker.connection.pubsub_numsub(channel)[0][1] == 1,
               "the worker subscribed to its command channel")
    worker.connection.publish(channel, "{}")
    assert handled.wait(timeout=30), "the command reader never read the message"
    reader = worker.pubsub_thread
    stopping = threading.Thread(target=reader.stop)  # redis-py 8: waits for the reader
    stopping.start()
    reader.join(timeout=30 * COMMAND_READ_S)
    assert not reader.is_alive(), "the command reader kept the worker from exiting"
    stopping.join(timeout=30 * COMMAND_READ_S)
    worker.pubsub.close()


def test_worker_and_monitor_default_the_queue_to_the_index_redis(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without $MOONCAKE_REDIS_QUEUE_URL both use the index's own Redis (rq's convention), and
    say so: reclaiming and unmounting need no queue setting, and a job they enqueue is
    worked by a worker started the same way."""
    index = Index.from_url(redis_url, namespace="default-queue")
    roots(index, 20)
    index.set_config(capacity_bytes=100)  # 200 bytes used: above the watermark
    assert main(["--url", redis_url, "--namespace", "default-queue", "monitor",
                 "--iterations=1", "--interval=0"]) == 0
    err = capsys.readouterr().err
    assert "(the index's Redis: no $MOONCAKE_REDIS_QUEUE_URL)" in err
    assert len(queue(redis_url)) == 1  # on the index's own Redis
    monkeypatch.setenv(ENV_URL, "")  # restored after the test: the worker sets both
    monkeypatch.setenv(ENV_QUEUE_URL, "")
    assert main(["--url", redis_url, "--namespace", "default-queue", "worker", "--burst"]) == 0
    assert len(queue(redis_url)) == 0
    assert index.usage().used_bytes <= 100


def test_the_queue_refuses_a_cluster_url_before_any_work(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ENV_QUEUE_URL, "redis+cluster://127.0.0.1:1")
    for command in ("worker", "monitor"):
        assert main(["--url", redis_url, command, "--burst" if command == "worker"
                     else "--iterations=1"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: the eviction queue needs a plain Redis"), err
        assert "Traceback" not in err
    with pytest.raises(ConfigurationError, match="RQ does not run on Redis Cluster"):
        run_worker("redis+cluster://127.0.0.1:1", burst=True)
