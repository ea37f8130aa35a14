"""Concurrency soak on loopback: client processes registering, reading and removing while
two eviction workers run; afterwards the tree checks clean and no object that held a
lease was evicted or removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mooncake_redis import Index
from mooncake_redis.fsck import check

ACTOR = Path(__file__).with_name("soak_actor.py")
SECONDS = "6"


def test_clients_and_two_evictors_leave_a_clean_tree_and_leased_objects_alone(
        redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="soak", capacity_bytes=20_000)
    env = dict(os.environ, PYTHONPATH=str(ACTOR.parent))
    roles = [("client", str(seed)) for seed in range(3)] + [("evictor", "0")] * 2
    processes = [subprocess.Popen([sys.executable, str(ACTOR), role, redis_url, "soak", seed,
                                   SECONDS], stdout=subprocess.PIPE, text=True, env=env)
                 for role, seed in roles]
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        results.append(json.loads(out))
    clients, evictors = results[:3], results[3:]

    report = check(index)
    assert report.clean, report.problems
    now_ms = index.client.time()[0] * 1000
    held = sorted({key for c in clients for key, lease in c["leases"].items() if lease > now_ms})
    assert held, "no reader got a lease: the soak tested nothing"
    gone = [key for key, exists in zip(held, index.batch_is_exist(held)) if not exists]
    assert not gone, f"{len(gone)} leased objects were evicted or removed"
    assert sum(e["evicted"] for e in evictors) > 0, "eviction never ran: no pressure"
    operations = sum(c["operations"] for c in clients)
    print(f"soak: {operations} client operations, {sum(e['jobs'] for e in evictors)} eviction "
          f"jobs evicting {sum(e['evicted'] for e in evictors)} objects, "
          f"{len(held)} leases held, 0 violated")
