"""RQ jobs, the monitor and workers, on the real redis-server (queue in db 1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import rq
from helpers import assert_consistent, page
from mooncake_redis.workers.jobs import eviction_queue, request_eviction
from mooncake_redis.workers.monitor import watch
from mooncake_redis.workers.worker import run_worker

from mooncake_redis import Index, NoSpace
from mooncake_redis.eviction import LOCK_HELD, TARGET_REACHED


@pytest.fixture
def queue_url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + "/1"


def fill(index: Index, pages: int, size: int = 10) -> list[str]:
    chain = [page(f"p{i}") for i in range(pages)]
    index.batch_put_start([(f"{h}_0_k", size, chain[i - 1] if i else None)
                           for i, h in enumerate(chain)])
    index.batch_put_end([f"{h}_0_k" for h in chain])
    return chain


def test_a_chain_of_3000_pages_drains_over_follow_up_jobs(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="chain", queue_url=queue_url)
    assert index.config.max_rounds_per_job == 16
    fill(index, 3000)
    assert request_eviction(index, target_ratio=0)
    run_worker(queue_url, burst=True)
    assert index.usage().objects == 0 and index.usage().nodes == 0
    finished = rq.Queue(connection=eviction_queue(queue_url).connection,
                        name=eviction_queue(queue_url).name).finished_job_registry
    assert finished.count >= 3000 // 16  # one leaf per round on a chain: many follow-ups
    assert_consistent(index)


def test_the_monitor_enqueues_once_above_the_watermark(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="mon", queue_url=queue_url, capacity_bytes=1000)
    fill(index, 95)  # 950 bytes: above 90%
    assert watch(index, interval_s=0, iterations=1, say=lambda _: None) == 1
    assert watch(index, interval_s=0, iterations=1, say=lambda _: None) == 0  # one queued is enough
    assert len(eviction_queue(queue_url)) == 1
    run_worker(queue_url, burst=True)
    assert index.usage().used_bytes <= 850
    assert watch(index, interval_s=0, iterations=1, say=lambda _: None) == 0


def test_put_start_refused_for_space_enqueues_a_job(redis_url: str, queue_url: str) -> None:
    index = Index.from_url(redis_url, namespace="full", queue_url=queue_url, capacity_bytes=100)
    fill(index, 10)
    with pytest.raises(NoSpace):
        index.put_start("one-more", 10)
    assert len(eviction_queue(queue_url)) == 1
    run_worker(queue_url, burst=True)
    index.put_start("one-more", 10)
    assert_consistent(index)


KILLED_WORKER = """
import sys, time
from mooncake_redis.eviction import Evictor
from mooncake_redis.workers.jobs import eviction_job
original = Evictor.round
def slow_round(self, need):
    freed = original(self, need)
    print("round", flush=True)
    time.sleep(60)
    return freed
Evictor.round = slow_round
eviction_job(sys.argv[1], "killed", 0)
"""


def test_a_killed_worker_leaves_the_lock_to_expire_and_the_next_job_finishes(
        redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="killed", eviction_lock_ttl_ms=1500,
                           leaves_per_round=1)
    fill(index, 20)
    worker = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, redis_url],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert worker.stdout is not None and worker.stdout.readline().strip() == "round"
    worker.kill()
    worker.wait()
    assert index.usage().objects == 19  # one round ran before the kill
    assert 0 < index.client.pttl(index.schema.eviction_lock) <= 1500
    assert index.evict(target_ratio=0).stopped == LOCK_HELD
    time.sleep(1.6)
    report = index.evict(target_ratio=0)
    assert report.stopped != LOCK_HELD and report.leaves == 16  # one job's rounds
    while index.evict(target_ratio=0).objects:
        pass
    assert index.usage().objects == 0
    assert_consistent(index)


def test_the_cli_evict_prints_a_report(redis_url: str, capsys) -> None:
    from mooncake_redis.cli import main

    index = Index.from_url(redis_url, namespace="cli-evict", capacity_bytes=100)
    fill(index, 10)
    assert main(["--url", redis_url, "--namespace", "cli-evict", "evict", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"stopped:          {TARGET_REACHED}" in out and "leaves evicted:   2" in out
    assert index.usage().used_bytes == 80
