"""Crashes: eviction workers killed mid-job, Redis killed mid-load and restarted from its
AOF, scripts flushed and Redis restarted under a running client."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from helpers import page
from redis_server import RedisServer

from mooncake_redis import Index, MooncakeRedisError
from mooncake_redis.eviction import NOTHING_EVICTABLE, TARGET_REACHED
from mooncake_redis.fsck import FsckReport, check
from mooncake_redis.settings import ENV_PREFIX, ENV_URL

CRASH_LEFTOVERS = {"dangling_child"}
"""What a crash may leave by design in data model v2, as fsck sees it before the resolver
ran: a parent still listing a child that was deleted (removed or evicted) by a process
that died before the unlink in the parent's shard ran. Its outbox entry makes the resolver
finish the unlink; meanwhile it only keeps the parent from being a leaf. A link whose
first step ran without its second is no finding at all (its pending entry covers it), and
counters, leaf indexes and stats are written by the same script as the objects, so a
crash cannot leave them wrong. Anything else would be corruption."""

KILLABLE_JOB = """
import sys
from mooncake_redis.workers.jobs import eviction_job
print("ready", flush=True)
if sys.stdin.readline().strip() == "go":
    print("started", flush=True)
    eviction_job(sys.argv[1], 0)
"""
"""An RQ eviction job in a process of its own, started ahead (its imports take longer than
the checks between two kills) and run on "go"."""

CRASHES = 14

LOCK_EXPIRY_DEADLINE_S = 30
"""Bound on waiting for a killed job's lock to expire (liveness, not a timing assertion)."""


def child_environment(**extra: str) -> dict[str, str]:
    """This process's environment without MOONCAKE_REDIS_* settings (a developer's shell
    must not change the test), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    return env | extra


def build_forest(index: Index, conversations: int, turns: int, generation: int = 0) -> int:
    """Chains that branch like chats: a shared prefix, then one chain per conversation."""
    items = []
    shared = [page(f"system-{generation}-{i}") for i in range(5)]
    for i, prefix_hash in enumerate(shared):
        items.append((f"{prefix_hash}_0_k", 100, shared[i - 1] if i else None))
    for c in range(conversations):
        parent = shared[-1]
        for t in range(turns):
            prefix_hash = page(f"conv-{generation}-{c}-{t}")
            items.append((f"{prefix_hash}_0_k", 100, parent))
            parent = prefix_hash
    for result in index.batch_put_start(items):
        result.unwrap()
    for result in index.batch_put_end([key for key, _, _ in items]):
        result.unwrap()
    return len(items)


def assert_only_crash_leftovers_then_resolve(index: Index) -> set[str]:
    """fsck finds at most what a crash leaves by design; the resolver (no grace period:
    every writer is done) settles it, and a second fsck finds nothing."""
    found = set(check(index.ctx).counts)
    assert found <= CRASH_LEFTOVERS, found
    index.resolve(grace_ms=0)
    after = check(index.ctx)
    assert after.clean, after.problems
    return found


def assert_repair_cleans_in_one_run(index: Index) -> FsckReport:
    """fsck --repair (resolver first, then every finding fixed), then a plain check: clean."""
    first = check(index.ctx)
    assert set(first.counts) <= CRASH_LEFTOVERS, first.problems
    repaired = check(index.ctx, repair=True)
    after = check(index.ctx)
    assert after.clean, after.problems
    return repaired


def wait_for_lock_expiry(index: Index) -> None:
    deadline = time.monotonic() + LOCK_EXPIRY_DEADLINE_S
    while index.client.exists(index.ctx.schema.eviction_lock):
        assert time.monotonic() < deadline, "a killed job's eviction lock never expired"
        time.sleep(0.02)


def start_killable_job(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", KILLABLE_JOB, "crash"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def test_eviction_workers_killed_at_random_points(redis_url: str) -> None:
    """RQ eviction jobs (four leaves per round, so a job runs long enough to be killed in
    the middle of its resolver, rounds or cascades) killed with SIGKILL at random points;
    after each kill fsck finds only crash leftovers and the resolver settles them; the
    killed job's lock expires; at the end everything is evictable."""
    index = Index.from_url(redis_url, namespace="crash", leaves_per_round=4,
                           max_rounds_per_job=100_000, eviction_lock_ttl_ms=1000)
    env = child_environment(**{ENV_URL: redis_url})
    rng = random.Random(11)
    crashes = evicted = generations = kills_with_leftovers = 0
    leftovers: set[str] = set()
    workers = [start_killable_job(env)]
    try:
        while crashes < CRASHES:
            if index.usage().objects < 200:  # however fast this machine evicts, keep work
                build_forest(index, conversations=40, turns=10, generation=generations)
                generations += 1
            before = index.usage().objects
            worker = workers[-1]
            assert worker.stdin is not None and worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
            wait_for_lock_expiry(index)  # a killed job blocks eviction until its lock expires
            worker.stdin.write("go\n")
            worker.stdin.flush()
            assert worker.stdout.readline().strip() == "started"
            time.sleep(rng.uniform(0.03, 0.3))
            worker.kill()
            worker.wait()
            assert worker.returncode == -signal.SIGKILL, "the job ended before it was killed"
            worker.stdin.close()
            worker.stdout.close()
            crashes += 1
            if crashes < CRASHES:
                workers.append(start_killable_job(env))  # it starts while we check
            found = assert_only_crash_leftovers_then_resolve(index)
            leftovers |= found
            kills_with_leftovers += bool(found)
            evicted += before - index.usage().objects
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert evicted > 0, "the killed jobs never got to evict: the test tested nothing"
    index.set_config(leaves_per_round=256)
    wait_for_lock_expiry(index)
    while (report := index.evict(target_ratio=0)).objects:
        pass
    assert report.stopped in (NOTHING_EVICTABLE, TARGET_REACHED), report.stopped
    usage = index.usage()
    assert (usage.used_bytes, usage.objects, usage.nodes) == (0, 0, 0)
    assert check(index.ctx).clean
    print(f"eviction worker crashes survived: {crashes} ({evicted} objects evicted by the "
          f"killed jobs); {kills_with_leftovers} kills left {sorted(leftovers) or 'nothing'} "
          "for the resolver")


def test_redis_killed_mid_load_loses_no_acknowledged_put_end(tmp_path: Path) -> None:
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always", directory=tmp_path)
    # one quick retry: once Redis is gone the loader should stop, not back off for seconds
    index = Index.from_url(server.url, namespace="aof", cluster_retries=1,
                           cluster_retry_backoff_ms=10)
    acknowledged: list[str] = []
    stopped = threading.Event()

    def load() -> None:
        parent = None
        for i in range(100_000):
            prefix_hash = page(f"load-{i}")
            key = f"{prefix_hash}_0_k"
            try:
                index.put_start(key, 10, parent_block_hash=parent)
                index.put_end(key)
            except (redis.RedisError, MooncakeRedisError):
                break
            acknowledged.append(key)
            parent = prefix_hash if i % 7 else None
        stopped.set()

    loader = threading.Thread(target=load)
    loader.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 300 and loader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(acknowledged) >= 300, "the loader stopped or stalled before Redis was killed"
    server.kill()
    loader.join(timeout=60)
    assert stopped.is_set()
    restarted = RedisServer("--appendonly", "yes", "--appendfsync", "always",
                            port=server.port, directory=tmp_path)
    try:
        index = Index.from_url(restarted.url, namespace="aof")
        exists = index.batch_is_exist(acknowledged)
        assert all(exists), f"{exists.count(False)} acknowledged put_end lost"
        assert_repair_cleans_in_one_run(index)
        print(f"Redis kill -9 under load: {len(acknowledged)} acknowledged, 0 lost")
    finally:
        restarted.stop()


def test_clients_carry_on_after_script_flush_and_a_redis_restart(tmp_path: Path) -> None:
    server = RedisServer("--appendonly", "yes", directory=tmp_path)
    index = Index.from_url(server.url, namespace="restart")
    index.put_start(f"{page(0)}_0_k", 1)
    index.client.script_flush()
    index.put_end(f"{page(0)}_0_k")  # NOSCRIPT: reloaded and re-sent
    index.put_start(f"{page(1)}_0_k", 1, parent_block_hash=page(0))
    redis.Redis(port=server.port).shutdown(nosave=False)
    server.process.wait()
    restarted = RedisServer("--appendonly", "yes", port=server.port, directory=tmp_path)
    try:
        index.put_end(f"{page(1)}_0_k")  # same Index object: reconnects, scripts reloaded
        assert index.match_prefix([page(0), page(1)]) == 2
        report = check(index.ctx)
        assert report.clean, report.problems
    finally:
        restarted.stop()


@pytest.mark.parametrize("flush_between", [True, False])
def test_a_batch_survives_script_flush(redis_url: str, flush_between: bool) -> None:
    index = Index.from_url(redis_url, namespace="flush")
    index.put_start(f"{page('warm')}_0_k", 1)  # the scripts are loaded (and then flushed)
    if flush_between:
        index.client.script_flush()
    results = index.batch_put_start([(f"{page(i)}_0_k", 1, page(i - 1) if i else None)
                                     for i in range(50)])
    assert [r.error for r in results if not r.ok] == []
    assert index.usage().objects == 51
    report = check(index.ctx)
    assert report.clean, report.problems
