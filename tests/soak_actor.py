"""One process of the concurrency soak (tests/soak.py): a client doing random operations
on one shared tree, or an eviction worker running jobs back to back, for a bounded time.
Prints a JSON summary.

    soak_actor.py client  URL NAMESPACE SEED SECONDS PAGES [MIN_OPERATIONS]
    soak_actor.py evictor URL NAMESPACE SEED SECONDS
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from typing import Any

from helpers import page

from mooncake_redis import Index, MooncakeRedisError
from mooncake_redis.capacity.eviction import Evictor

SIZE = 10
CHAIN = 20
"""Pages n and n+1 are parent and child unless n+1 is a multiple of CHAIN: chains of 20."""


PROGRESS_EVERY = 500
"""A client prints its counts every this many operations (an evictor every tenth as many
jobs), so the soak counts the work of an actor it kills up to its last report."""


def report_progress(counts: dict[str, int]) -> None:
    print(json.dumps({"progress": counts}), flush=True)


def client(index: Index, seed: int, seconds: float, pages: int,
           min_operations: int = 0) -> dict[str, Any]:
    """Puts (put_start + put_end), gets, removes and probes of random keys of the shared
    chains, for `seconds` and at least `min_operations`. Every get that returns an object
    records its lease; a get that finds nothing while this client still holds a lease on
    the key is a violation (a leased object was evicted or removed)."""
    rng = random.Random(seed)
    leases: dict[str, int] = {}
    operations = violations = 0
    refusals: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or operations < min_operations:
        n = rng.randrange(pages)
        key = f"{page(f'soak-{n}')}_{rng.randrange(2)}_k"
        parent = page(f"soak-{n - 1}") if n % CHAIN else None
        action = rng.random()
        try:
            if action < 0.4:
                index.put_start(key, SIZE, parent_block_hash=parent)
                index.put_end(key)
            elif action < 0.7:
                info = index.get(key)
                if info is not None:
                    leases[key] = max(leases.get(key, 0), info.lease_ms)
                elif leases.get(key, 0) > index.ctx.redis_time_ms():
                    violations += 1
            elif action < 0.85:
                index.remove(key)
            else:
                index.batch_is_exist([key, f"{page(f'soak-{n + 1}')}_0_k"])
        except MooncakeRedisError as error:
            refusals[type(error).__name__] += 1
        operations += 1
        if operations % PROGRESS_EVERY == 0:
            report_progress({"operations": operations})
    index.close()
    return {"operations": operations, "refusals": dict(refusals), "violations": violations,
            "leases": leases}


def evictor(index: Index, seconds: float) -> dict[str, Any]:
    """Eviction jobs back to back (default target: high_watermark - eviction_ratio), as RQ
    workers run them; two evictors contend for the namespace's lock."""
    jobs = evicted = rounds = 0
    stopped: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = Evictor(index.ctx).run()
        jobs += 1
        evicted += report.objects
        rounds += report.rounds
        stopped[report.stopped] += 1
        if jobs % (PROGRESS_EVERY // 10) == 0:
            report_progress({"jobs": jobs, "evicted": evicted, "rounds": rounds})
        time.sleep(0.01)  # let the clients in between jobs, as a worker polling its queue
    return {"jobs": jobs, "evicted": evicted, "rounds": rounds, "stopped": dict(stopped)}


if __name__ == "__main__":
    role, url, namespace, seed, seconds = sys.argv[1:6]
    index = Index.from_url(url, namespace=namespace)
    if role == "client":
        result = client(index, int(seed), float(seconds), int(sys.argv[6]),
                        int(sys.argv[7]) if len(sys.argv) > 7 else 0)
    else:
        result = evictor(index, float(seconds))
    print(json.dumps(result))
