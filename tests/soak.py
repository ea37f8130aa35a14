"""The concurrency soak: client processes (put, get, remove, probes on one shared tree) and
eviction workers on one namespace for a while; then fsck, and every lease a client still
holds must cover an object that is still there (a client also counts, as it goes, every
get that found an object gone while it held a lease on it). tests/test_soak.py runs it
for seconds in CI; scripts/soak.sh runs it for as long as asked, at a larger scale:

    python tests/soak.py [--url URL] [--seconds S] [--clients N] [--evictors M]
                         [--pages P] [--capacity BYTES] [--namespace NS]

Without --url it starts a throwaway redis-server (AOF on). It prints usage as it goes and
a summary at the end, and exits 1 if anything was violated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clock import CHILD_GUARD_S
from helpers import page
from soak_actor import CHAIN, SIZE

from mooncake_redis import Index
from mooncake_redis.operations.fsck import check
from mooncake_redis.settings import ENV_PREFIX

ACTOR = Path(__file__).with_name("soak_actor.py")
EVICTION_LOCK_TTL_MS = 5000
"""A killed evictor's lock blocks eviction this long (the default, 30 s, would stall the
soak's evictors after every kill of one of them)."""
CRASH_LEFTOVERS = {"dangling_child"}
"""What a killed actor may leave for the resolver: a parent listing a child whose deleter
died before the unlink (docs/RELIABILITY.md, "What a crash may leave")."""


@dataclass
class SoakResult:
    seconds: float = 0.0
    kills: int = 0
    operations: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    jobs: int = 0
    rounds: int = 0
    evicted: int = 0
    job_endings: Counter[str] = field(default_factory=Counter)
    leases_held: int = 0
    leases_violated: list[str] = field(default_factory=list)
    """Keys a client found gone while it held a lease, or still leased at the end and gone."""
    violations_seen: int = 0
    fsck_problems: list[tuple[str, str]] = field(default_factory=list)
    """Before the resolver: nothing may dangle when no actor was killed; with kills, the
    leftovers a crash may leave (CRASH_LEFTOVERS) are allowed here, and nothing after."""
    fsck_after_resolver: list[tuple[str, str]] = field(default_factory=list)
    nodes: int = 0
    objects: int = 0
    used_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not (self.leases_violated or self.violations_seen or self.fsck_problems
                    or self.fsck_after_resolver)

    def summary(self) -> str:
        fsck = "clean" if not (self.fsck_problems or self.fsck_after_resolver) else \
            f"{Counter(k for k, _ in self.fsck_problems + self.fsck_after_resolver)}"
        return (f"soak: {self.seconds:.0f} s, {self.kills} actors killed, {self.operations} "
                f"client operations (killed actors' up to their last report) "
                f"(refused: {dict(self.refusals)}), {self.jobs} eviction jobs "
                f"({dict(self.job_endings)}) in {self.rounds} rounds evicting {self.evicted} "
                f"objects; {self.leases_held} leases held at the end, "
                f"{len(self.leases_violated) + self.violations_seen} violated; fsck {fsck}; "
                f"left {self.objects} objects in {self.nodes} nodes, {self.used_bytes} bytes")


def last_progress(out: str) -> Counter[str]:
    """A killed actor's counts as of its last progress line (none: nothing counted)."""
    for line in reversed(out.splitlines()):
        try:
            return Counter(json.loads(line)["progress"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by the kill, or not a progress line
    return Counter()


def prefill(index: Index, pages: int, ratio: float) -> None:
    """Complete objects on the clients' chains until usage reaches `ratio` of capacity (a
    shard that refuses for space is passed over), so that eviction has work from the
    start however slowly the clients go."""
    capacity = index.usage().capacity_bytes
    for start in range(0, pages, 100):
        items = [(f"{page(f'soak-{n}')}_{rank}_k", SIZE,
                  page(f"soak-{n - 1}") if n % CHAIN else None)
                 for n in range(start, min(pages, start + 100)) for rank in range(2)]
        written = [r.key for r in index.batch_put_start(items) if r.ok]
        index.batch_put_end(written)
        if index.usage().used_bytes >= ratio * capacity:
            return
    raise AssertionError(f"the prefill did not reach {ratio:.0%} of capacity")


def run_soak(url: str, namespace: str = "soak", seconds: float = 6, clients: int = 3,
             evictors: int = 2, pages: int = 2500, capacity: int = 10_000,
             progress_s: float | None = None, kill_every_s: float | None = None,
             seed: int = 0, min_operations: int = 0, prefill_ratio: float = 0.0,
             lease_ttl_ms: int | None = None) -> SoakResult:
    """Start the actors, wait for them, check. Settings are filled in when the namespace is
    new: jobs evict down to 60 % of capacity (eviction_ratio 0.3), well below where
    per-shard admission starts refusing (about 256 objects short of capacity), so the
    evictors have work as soon as the clients have filled 60 %.

    With kill_every_s, every so often one actor, chosen at random, is killed with SIGKILL
    wherever it is and a new one takes its place for the time left: what a killed actor
    did counts up to its last progress report, and what it may leave (a dangling child
    until the resolver runs, processing objects until they time out) is allowed before
    the resolver only.

    For a bounded run that must test something however slow the machine (CI): each client
    makes at least min_operations; prefill_ratio fills the namespace that far first;
    lease_ttl_ms (when the namespace is new) long enough that the leases the clients took
    are still held when the run is checked."""
    lease = {} if lease_ttl_ms is None else {"lease_ttl_ms": lease_ttl_ms}
    index = Index.from_url(url, namespace=namespace, capacity_bytes=capacity,
                           eviction_ratio=0.3, eviction_lock_ttl_ms=EVICTION_LOCK_TTL_MS,
                           **lease)
    if prefill_ratio:
        prefill(index, pages, prefill_ratio)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["PYTHONPATH"] = str(ACTOR.parent)
    commands = [["client", str(n), str(pages), str(min_operations)] for n in range(clients)]
    commands += [["evictor", str(n)] for n in range(evictors)]
    started = time.monotonic()
    deadline = started + seconds
    rng = random.Random(seed)

    def launch(role: str, number: str, *rest: str) -> subprocess.Popen[str]:
        left = f"{max(0.1, deadline - time.monotonic()):.1f}"
        return subprocess.Popen([sys.executable, str(ACTOR), role, url, namespace, number,
                                 left, *rest], stdout=subprocess.PIPE, text=True, env=env)

    processes = [launch(*command) for command in commands]
    kills = 0
    killed: Counter[str] = Counter()
    outputs = []
    try:
        next_progress = started + (progress_s or seconds)
        next_kill = started + (kill_every_s or seconds)
        while min(next_progress, next_kill) < deadline - 1:
            time.sleep(max(0.0, min(next_progress, next_kill) - time.monotonic()))
            if time.monotonic() >= next_kill:
                victim = rng.randrange(len(processes))
                processes[victim].kill()
                out, _ = processes[victim].communicate(timeout=CHILD_GUARD_S)
                killed.update(last_progress(out))
                role, number, *rest = commands[victim]
                commands[victim] = [role, str(int(number) + 1000 * (kills + 1)), *rest]
                processes[victim] = launch(*commands[victim])
                kills += 1
                next_kill += kill_every_s or seconds
            if time.monotonic() >= next_progress:
                usage = index.usage()
                print(f"{time.monotonic() - started:6.0f} s: {usage.objects} objects in "
                      f"{usage.nodes} nodes, {usage.ratio:.0%} of capacity, {kills} kills",
                      flush=True)
                next_progress += progress_s or seconds
        for process in processes:
            out, _ = process.communicate(timeout=seconds + 120)
            if process.returncode != 0:
                raise RuntimeError(f"a soak actor failed ({process.returncode}): {out[-500:]}")
            outputs.append(json.loads(out.splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=CHILD_GUARD_S)
    result = SoakResult(seconds=time.monotonic() - started, kills=kills)
    result.operations, result.jobs = killed["operations"], killed["jobs"]
    result.rounds, result.evicted = killed["rounds"], killed["evicted"]
    client_results, evictor_results = outputs[:clients], outputs[clients:]
    for c in client_results:
        result.operations += c["operations"]
        result.refusals.update(c["refusals"])
        result.violations_seen += c["violations"]
    for e in evictor_results:
        result.jobs += e["jobs"]
        result.rounds += e["rounds"]
        result.evicted += e["evicted"]
        result.job_endings.update(e["stopped"])
    now_ms = index.ctx.redis_time_ms()  # leases first: they run out while fsck reads
    held = sorted({key for c in client_results for key, lease in c["leases"].items()
                   if lease > now_ms})
    result.leases_held = len(held)
    result.leases_violated = [key for key, exists in zip(held, index.batch_is_exist(held))
                              if not exists]
    result.fsck_problems = [(kind, detail) for kind, detail in check(index.ctx).problems
                            if not (kills and kind in CRASH_LEFTOVERS)]
    index.resolve(grace_ms=0)
    result.fsck_after_resolver = check(index.ctx).problems
    usage = index.usage()
    result.nodes, result.objects, result.used_bytes = usage.nodes, usage.objects, usage.used_bytes
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: start a throwaway one)")
    parser.add_argument("--cluster", action="store_true",
                        help="start a throwaway 3-master Redis Cluster instead of one server")
    parser.add_argument("--namespace", default="soak")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--evictors", type=int, default=2)
    parser.add_argument("--pages", type=int, default=50_000)
    parser.add_argument("--capacity", type=int, default=200_000)
    parser.add_argument("--progress", type=float, default=30, help="seconds between reports")
    parser.add_argument("--kill-every", type=float, default=None, metavar="SECONDS",
                        help="SIGKILL a random actor this often and start another in its place")
    parser.add_argument("--seed", type=int, default=0, help="which actors the kills choose")
    args = parser.parse_args(argv)
    server = None
    if args.url is None and args.cluster:
        from redis_cluster import LocalCluster

        server = LocalCluster(masters=3)
    elif args.url is None:
        from redis_server import RedisServer

        server = RedisServer("--appendonly", "yes", "--appendfsync", "everysec")
    try:
        result = run_soak(args.url or server.url, args.namespace,  # type: ignore[union-attr]
                          args.seconds, args.clients, args.evictors, args.pages,
                          args.capacity, args.progress, args.kill_every, args.seed)
    finally:
        if server is not None:
            server.stop()
    print(result.summary())
    for kind, detail in (result.fsck_problems + result.fsck_after_resolver)[:20]:
        print(f"fsck: {kind}: {detail}")
    for key in result.leases_violated[:20]:
        print(f"lease violated: {key}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

