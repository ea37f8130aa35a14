"""One process of the concurrency soak (tests/test_soak.py): a client doing random
operations, or an eviction worker, for a bounded time. Prints a JSON summary."""

from __future__ import annotations

import json
import random
import sys
import time

from helpers import page

from mooncake_redis import Index, MooncakeRedisError
from mooncake_redis.eviction import Evictor


def client(index: Index, seed: int, seconds: float) -> dict:
    rng = random.Random(seed)
    leases: dict[str, int] = {}
    operations = refusals = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = rng.randrange(400)
        key = f"{page(f'soak-{n}')}_{rng.randrange(2)}_k"
        parent = page(f"soak-{n - 1}") if n % 20 else None
        action = rng.random()
        try:
            if action < 0.4:
                index.put_start(key, 100, parent_block_hash=parent)
                index.put_end(key)
            elif action < 0.7:
                info = index.get(key)
                if info is not None:
                    leases[key] = max(leases.get(key, 0), info.lease_ms)
            elif action < 0.85:
                index.remove(key)
            else:
                index.batch_is_exist([key, f"{page(f'soak-{n + 1}')}_0_k"])
        except MooncakeRedisError:
            refusals += 1
        operations += 1
    return {"operations": operations, "refusals": refusals, "leases": leases}


def evictor(index: Index, seconds: float) -> dict:
    jobs = evicted = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = Evictor(index).run()
        jobs += 1
        evicted += report.objects
        time.sleep(0.01)
    return {"jobs": jobs, "evicted": evicted}


if __name__ == "__main__":
    role, url, namespace, seed, seconds = sys.argv[1:6]
    index = Index.from_url(url, namespace=namespace)
    if role == "client":
        result = client(index, int(seed), float(seconds))
    else:
        result = evictor(index, float(seconds))
    print(json.dumps(result))
