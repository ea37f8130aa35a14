"""Crashes: eviction workers killed mid-job, Redis killed mid-load and restarted from its
AOF, scripts flushed and Redis restarted under a running client."""

from __future__ import annotations

import random
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
from mooncake_redis.fsck import check

CRASH_LEFTOVERS = {"dangling_child", "usage_counter"}
"""What a crash may leave by design: a child reference whose unlink or write never ran
(it only keeps its parent from eviction) and bytes reserved or not yet released (only an
over-count). Anything else would be corruption."""

KILLABLE_JOB = """
import sys
from mooncake_redis.workers.jobs import eviction_job
print("started", flush=True)
eviction_job(sys.argv[1], sys.argv[2], 0)
"""


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
    index.batch_put_start(items)
    index.batch_put_end([key for key, _, _ in items])
    return len(items)


def assert_only_crash_leftovers_then_repair(index: Index) -> set[str]:
    found = set(check(index).counts)
    assert found <= CRASH_LEFTOVERS, found
    check(index, repair=True)
    after = check(index)
    assert after.clean, after.problems
    return found


def test_eviction_workers_killed_at_random_points(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="crash", leaves_per_round=1,
                           max_rounds_per_job=100_000, eviction_lock_ttl_ms=200)
    rng = random.Random(11)
    crashes, evicted, generations, leftovers = 0, 0, 0, set()
    while crashes < 24:
        if index.usage().objects < 500:  # however fast this machine evicts, keep work to do
            build_forest(index, conversations=100, turns=20, generation=generations)
            generations += 1
        before = index.usage().objects
        worker = subprocess.Popen([sys.executable, "-c", KILLABLE_JOB, redis_url, "crash"],
                                  stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None and worker.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.03, 0.25))
        worker.kill()
        worker.wait()
        crashes += 1
        leftovers |= assert_only_crash_leftovers_then_repair(index)
        evicted += before - index.usage().objects
        time.sleep(0.25)  # the dead worker's lock expires
    assert evicted > 0, "the killed jobs never got to evict: the test tested nothing"
    index.set_config(leaves_per_round=256)
    while index.evict(target_ratio=0).objects:
        pass
    assert index.usage().objects == 0 and index.usage().nodes == 0
    assert check(index).clean
    print(f"eviction worker crashes survived: {crashes} ({evicted} objects evicted by the "
          f"killed jobs), leftovers seen: {sorted(leftovers)}")


def test_redis_killed_mid_load_loses_no_acknowledged_put_end(tmp_path: Path) -> None:
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always", directory=tmp_path)
    index = Index.from_url(server.url, namespace="aof")
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
    while len(acknowledged) < 300:
        time.sleep(0.01)
    server.kill()
    loader.join(timeout=60)
    assert stopped.is_set()
    restarted = RedisServer("--appendonly", "yes", "--appendfsync", "always",
                            port=server.port, directory=tmp_path)
    try:
        index = Index.from_url(restarted.url, namespace="aof")
        exists = index.batch_is_exist(acknowledged)
        assert all(exists), f"{exists.count(False)} acknowledged put_end lost"
        assert_only_crash_leftovers_then_repair(index)
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
        assert check(index).clean
    finally:
        restarted.stop()


@pytest.mark.parametrize("flush_between", [True, False])
def test_a_batch_survives_script_flush(redis_url: str, flush_between: bool) -> None:
    index = Index.from_url(redis_url, namespace="flush")
    if flush_between:
        index.client.script_flush()
    index.batch_put_start([(f"{page(i)}_0_k", 1, page(i - 1) if i else None) for i in range(50)])
    assert index.usage().objects == 50 and check(index).clean
