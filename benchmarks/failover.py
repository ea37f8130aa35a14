"""A cluster failover under a registration load: acknowledged puts lost with wait_acks 0
and 1, and how long the monitor takes to heal the links the lost writes broke.

Run: `python -m benchmarks.failover --runs 3` (a fresh local 3-master cluster with one
replica each per run and setting: free ports, temp dirs, no persistence). Per run: a
monitor (workers/monitor.py `watch`, every `--interval` s) runs beside a load thread
(tests/test_cluster.py's RegistrationLoad) that registers chains of 8 pages (each page's
parent the page before, most links crossing masters: batch_put_start then
batch_put_end); after `--before` batches, one master's replica stops applying the
replication stream (CLIENT PAUSE WRITE on the replica) for `--lag` more batches, the
replication lag a failover loses, then takes over (CLUSTER FAILOVER TAKEOVER). The
load stops once the cluster is healthy again. Then:

  lag_s         how long the replica was paused (the lag batches' time)
  acknowledged  puts whose batch_put_start returned ok (then put_end)
  lost          of those, objects the namespace no longer has
  seen_s        from the replica's promotion to the end of the monitor's check that saw
                the failover (and made the first sweep's first step)
  mended_s      ... to the end of the first sweep (every node's links checked once)
  healed_s      ... to the end of the sweep that mended no link (the heal's end)
  sweeps        how many sweeps the heal took
  clean         whether, after the heal and the load, invariant S holds and fsck finds
                nothing (one read of the whole namespace)

With wait_acks 1 the victim's writes in the lag wait wait_timeout_ms for the paused
replica and are refused (ReplicationIncomplete), not acknowledged. Not run by
`python -m benchmarks`; docs/RELIABILITY.md has the figures.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from typing import Any

from mooncake_redis import Index
from mooncake_redis.operations.failover import FailoverPass, failover_observers
from mooncake_redis.operations.fsck import check
from mooncake_redis.workers.monitor import watch

from .common import NAMESPACE

DEADLINE_S = 120.0
"""Hang guard for every wait on the load or the cluster."""


def healed(index: Index) -> bool:
    from interleaving import invariant_s  # tests/ is on sys.path once common is imported

    return not invariant_s(index) and check(index.ctx).clean


def one_run(wait_acks: int, before: int, lag: int, interval_s: float) -> dict[str, Any]:
    from redis_cluster import LocalCluster
    from test_cluster import RegistrationLoad  # the failover tests' load

    cluster = LocalCluster(masters=3, replicas=1)
    try:
        index = Index.from_url(cluster.url, namespace=NAMESPACE, wait_acks=wait_acks,
                               cluster_retries=8)
        observer = Index.from_url(cluster.url, namespace=NAMESPACE)
        monitor_index = Index.from_url(cluster.url, namespace=NAMESPACE, cluster_retries=8)
        stop = threading.Event()
        monitor = threading.Thread(target=watch, args=(monitor_index.ctx, interval_s),
                                   kwargs={"stop": stop}, daemon=True)
        seen: dict[str, float] = {}
        heal_ended = threading.Event()

        def observe(namespace: str, result: FailoverPass) -> None:
            if result.failovers:
                seen.setdefault("seen", time.monotonic())
            if result.sweep_ended == 1:
                seen["mended"] = time.monotonic()
            if result.healed:
                seen.update(healed=time.monotonic(), sweeps=result.sweeps)
                heal_ended.set()

        failover_observers.append(observe)
        load = RegistrationLoad(index, "failover")
        load.start()
        monitor.start()
        try:
            load.wait_for(before)
            with cluster.lossy_failover(cluster.masters()[0]):
                paused = time.monotonic()
                load.wait_for(load.batches + lag)
                lag_s = time.monotonic() - paused
            promoted = cluster.promoted_at
        finally:
            load.stop()
        try:
            if not heal_ended.wait(DEADLINE_S):
                raise RuntimeError("the monitor did not heal in time")
        finally:
            stop.set()
            monitor.join(DEADLINE_S)
            failover_observers.remove(observe)
        lost = [key for key in load.acknowledged if observer.object_info(key) is None]
        return {"acknowledged": len(load.acknowledged), "lost": len(lost),
                "seen_s": seen["seen"] - promoted, "mended_s": seen["mended"] - promoted,
                "healed_s": seen["healed"] - promoted,
                "sweeps": seen["sweeps"], "lag_s": lag_s, "clean": healed(observer),
                "batches": load.batches, "failed_batches": sum(load.failures.values())}
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=int, default=250, help="load batches before")
    parser.add_argument("--lag", type=int, default=20,
                        help="load batches the replica misses before it takes over")
    parser.add_argument("--wait-acks", type=int, nargs="+", default=[0, 1],
                        help="the settings to run (default: 0 1)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="the monitor's seconds between checks (its default: 1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"{'wait_acks':>9} {'run':>3} {'lag_s':>5} {'acknowledged':>12} {'lost':>5} "
          f"{'seen_s':>6} {'mended_s':>8} {'healed_s':>8} {'sweeps':>6} {'clean':>5} "
          f"{'batches':>7} {'failed':>6}")
    for wait_acks in args.wait_acks:
        for run in range(args.runs):
            r = one_run(wait_acks, args.before, args.lag, args.interval)
            print(f"{wait_acks:>9} {run:>3} {r['lag_s']:>5.2f} {r['acknowledged']:>12} "
                  f"{r['lost']:>5} {r['seen_s']:>6.2f} {r['mended_s']:>8.2f} "
                  f"{r['healed_s']:>8.2f} {r['sweeps']:>6} "
                  f"{r['clean']!s:>5} {r['batches']:>7} {r['failed_batches']:>6}", flush=True)


if __name__ == "__main__":
    main()
