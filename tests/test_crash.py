"""Crashes: eviction workers killed mid-job, client processes killed mid-batch while other
writers keep writing the same chains, Redis killed mid-load and restarted from its AOF,
scripts flushed and Redis restarted under a running client."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis
from clock import CHILD_GUARD_S, read_line, wait_for_redis_time, wait_until
from crash_client import (
    SIZE,
    VICTIM_ERRORS,
    VICTIM_RANK,
    WRITER_ERRORS,
    tree,
    victim_only_pages,
)
from helpers import page
from redis_server import RedisServer

from mooncake_redis import Index, MooncakeRedisError
from mooncake_redis.capacity.eviction import NOTHING_EVICTABLE, TARGET_REACHED
from mooncake_redis.operations.fsck import FsckReport, check
from mooncake_redis.settings import ENV_PREFIX, ENV_URL
from mooncake_redis.tree.links import ResolverReport
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.values import NodeFields, child_field, decode_object, split_node

CLIENT = Path(__file__).with_name("crash_client.py")

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
    wait_until(lambda: not index.client.exists(index.ctx.schema.eviction_lock),
               "a killed job's eviction lock to expire")


def start_killable_job(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", KILLABLE_JOB, "crash"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def test_eviction_workers_killed_at_random_points(redis_url: str) -> None:
    """RQ eviction jobs (four leaves per round, so a job runs long enough to be killed in
    the middle of its resolver, rounds or cascades) killed with SIGKILL at random points:
    every other job once a random number of objects (1 to 200, of 2,000 or more) has gone,
    the others after a random 0.03-0.3 s or at that point, whichever comes first (on a
    loaded machine a timed kill may come before the job evicts anything; on a fast one it
    may come only after it finished, which the count prevents). After each kill fsck finds
    only crash leftovers and the resolver settles them; the killed job's lock expires; at
    the end everything is evictable. A job that still finished before its kill is
    counted, not a failure."""
    index = Index.from_url(redis_url, namespace="crash", leaves_per_round=4,
                           max_rounds_per_job=100_000, eviction_lock_ttl_ms=1000)
    env = child_environment(**{ENV_URL: redis_url})
    rng = random.Random(11)
    crashes = evicted = generations = kills_with_leftovers = finished_first = 0
    leftovers: set[str] = set()
    workers = [start_killable_job(env)]
    try:
        while crashes < CRASHES:
            if index.usage().objects < 2000:  # keep work: the kill comes well within it
                build_forest(index, conversations=200, turns=10, generation=generations)
                generations += 1
            before = index.usage().objects
            timed = (crashes + finished_first) % 2 == 0
            kill_at = rng.uniform(0.03, 0.3) if timed else math.inf  # s after its start, or
            kill_after = rng.randint(1, 200)  # objects evicted, whichever comes first
            worker = workers[-1]
            assert worker.stdin is not None and worker.stdout is not None
            assert read_line(worker.stdout, "the job to be ready").strip() == "ready"
            wait_for_lock_expiry(index)  # a killed job blocks eviction until its lock expires
            worker.stdin.write("go\n")
            worker.stdin.flush()
            assert read_line(worker.stdout, "the job to start").strip() == "started"
            kill_time = time.monotonic() + kill_at
            wait_until(lambda: time.monotonic() >= kill_time  # noqa: B023
                       or before - index.usage().objects >= kill_after,  # noqa: B023
                       "the point to kill the job at")
            worker.kill()
            worker.wait(timeout=CHILD_GUARD_S)
            worker.stdin.close()
            worker.stdout.close()
            if worker.returncode == 0:  # it ran to its end between the last look and the kill
                finished_first += 1
                assert finished_first <= CRASHES, "jobs keep finishing before their kill"
            else:
                assert worker.returncode == -signal.SIGKILL, worker.returncode
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
                worker.wait(timeout=CHILD_GUARD_S)
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
          f"for the resolver; {finished_first} jobs finished before their kill")


CLIENT_KILLS = 16
"""Victims of the client crash test killed at a random moment or by their tripwire, however
slow the machine; then one more that stalls before a put_end."""


def start_client(role: str, redis_url: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CLIENT), role, redis_url, "kill",
                             *map(str, args)], stdout=subprocess.PIPE, text=True,
                            env=child_environment(PYTHONPATH=str(CLIENT.parent)))


def victim_log(path: Path) -> list[list[Any]]:
    """What a killed victim logged: one JSON line per event (a line cut by the kill is
    dropped)."""
    lines = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            lines.append(json.loads(line))
    return lines


def nodes_of(index: Index) -> dict[str, NodeFields]:
    found = {}
    for keys in scan_node_keys(index.ctx):
        for key, fields in zip(keys, [index.client.hgetall(k) for k in keys]):
            if fields:
                found[index.ctx.schema.hash_of_node_key(key)] = split_node(fields)
    return found


def processing_objects(index: Index) -> dict[str, tuple[str | None, int]]:
    """Every processing object: key -> (its node's parent, when its put_start ran)."""
    stuck = {}
    for prefix_hash, node in nodes_of(index).items():
        for suffix, value in node.objects.items():
            stored = decode_object(value)
            assert stored is not None
            if not stored.complete:
                stuck[prefix_hash + suffix] = (node.parent, stored.time_ms)
    return stuck


def assert_victim_links_settled(index: Index) -> None:
    """The links into pages only victims write, between two victims (the writers keep
    writing the rest of the tree): after the resolver none is pending, and each is whole
    or absent: the parent lists the child iff the child names the parent, at one epoch.
    (fsck is not used here: on a live namespace it may see a writer between two steps.)"""
    links = sorted(victim_only_pages().items())
    batch = index.ctx.batch()
    for child, parent in links:
        batch.command("HGET", index.ctx.schema.node(parent), child_field(child))
        batch.command("HMGET", index.ctx.schema.node(child), "p", "pe")
        batch.command("ZRANGE", index.ctx.schema.shard_keys(index.ctx.shard(parent)).pending,
                      0, -1)
    replies = batch.execute()
    for number, (child, parent) in enumerate(links):
        listed, (named, epoch), pending = replies[3 * number:3 * number + 3]
        assert not [m for m in pending if m.startswith(f"{parent}|{child}|")], \
            f"a link {parent} -> {child} still pending after the resolver"
        if listed is not None or named == parent:
            assert (listed, named) == (epoch, parent), \
                f"{parent} lists {child} at {listed}; the child names {named} at {epoch}"


def test_client_killed_mid_batch_while_other_writers_write_the_same_chains(
        redis_url: str, tmp_path: Path) -> None:
    """A client process killed with SIGKILL in the middle of batch_put_start, put_end and
    batch_remove, again and again, while two writer processes keep writing and removing
    their own objects in the same nodes (same chains, same parents). After each kill the
    resolver runs with no grace period while the writers go on, and the links into pages
    only victims write must be whole or gone. Then: the writers were told nothing wrong
    and lost nothing; after the resolver fsck is clean (links, counters, leaf indexes,
    stats: a recount); every node names its right parent; what the victims left
    processing is taken over after the discard timeout or reclaimed by eviction after the
    release timeout, and then everything is evictable. CRASH_SEED=<n> replays a run's
    choices (not its timing)."""
    index = Index.from_url(redis_url, namespace="kill", put_start_discard_timeout_ms=200,
                           put_start_release_timeout_ms=2000)
    seed = int(os.environ.get("CRASH_SEED") or random.randrange(1_000_000))
    print(f"CRASH_SEED={seed}")  # shown with a failure: run again with it
    rng = random.Random(seed)
    stop = tmp_path / "stop"
    writers = [start_client("writer", redis_url, rank, seed + rank, stop) for rank in (1, 2)]
    victims: list[tuple[subprocess.Popen[str], str, Path]] = []
    kills: Counter[str] = Counter()
    died_in: Counter[str] = Counter()
    cuts: Counter[str] = Counter()
    victim_errors: dict[str, Counter[str]] = defaultdict(Counter)
    victim_calls = 0
    resolved = ResolverReport()

    def start_victim(mode: str | None = None) -> None:
        number = len(victims)
        mode = mode or ("external", "tripwire")[number % 2]
        log = tmp_path / f"victim-{number}.log"
        victims.append((start_client("victim", redis_url, seed * 100 + number, mode, log),
                        mode, log))

    try:
        for process in writers:
            assert process.stdout is not None
            assert read_line(process.stdout, "a writer to be ready").strip() == "ready"
        start_victim()
        while True:
            victim, mode, log = victims[-1]
            assert victim.stdout is not None
            assert read_line(victim.stdout, "the victim to be ready").strip() == "ready"
            if mode == "external":
                time.sleep(rng.uniform(0.02, 0.4))  # a random moment of its run: it runs
                victim.kill()  # until killed, so any delay is as good, none can flake
            try:
                victim.wait(timeout=60)  # a hang guard: it dies within a few calls
            except subprocess.TimeoutExpired:
                victim.kill()
                raise AssertionError("the victim's tripwire never fired") from None
            victim.stdout.close()
            # the resolver settles what the victim left before anyone rewrites it, racing
            # the writers' own links (no grace period: as fsck --repair on a live namespace)
            step = index.resolve(grace_ms=0)
            for name in ("intents", "kept", "dropped", "cycles_broken"):
                setattr(resolved, name, getattr(resolved, name) + getattr(step, name))
            assert_victim_links_settled(index)
            if mode != "stall":  # the next starts while we look at this one; the last one
                # stalls before a put_end, so some objects are surely left processing
                start_victim(None if len(victims) < CLIENT_KILLS else "stall")
            lines = victim_log(log)
            assert victim.returncode == -signal.SIGKILL, \
                f"a victim ended by itself ({victim.returncode}): {lines[-3:]}"
            kills[mode] += 1
            calls = [line[1] for line in lines if line[0] == "call"]
            victim_calls += len(calls)
            died_in[calls[-1] if calls else "start"] += 1
            for _, call, pipeline, cut, length in (x for x in lines if x[0] == "tripwire"):
                where = "before" if cut == 0 else "after" if cut == length else "inside"
                cuts[f"{where} {call} #{pipeline}"] += 1
            for line in lines:
                if line[0] == "result":
                    victim_errors[line[1]].update(line[2])
            if mode == "stall":
                break
        stop.touch()
        summaries = []
        for process in writers:
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0
            summaries.append(json.loads(out))
    finally:
        for process in writers + [victim for victim, _, _ in victims]:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=CHILD_GUARD_S)
    assert sum(kills.values()) == CLIENT_KILLS + 1

    for call, errors in victim_errors.items():
        assert set(errors) <= VICTIM_ERRORS[call], (call, errors)
    for summary in summaries:
        for call, errors in summary["errors"].items():
            assert set(errors) <= WRITER_ERRORS[call], (call, errors, summary["examples"])
        assert summary["calls"] > 0

    leftovers = check(index.ctx).counts  # every client is done or dead
    assert set(leftovers) <= CRASH_LEFTOVERS, leftovers
    resolved_at_rest = index.resolve(grace_ms=0)
    report = check(index.ctx)
    assert report.clean, report.problems

    parents = tree()
    nodes = nodes_of(index)
    assert set(nodes) <= set(parents), "a node that no chain has"
    for prefix_hash, node in nodes.items():
        if node.objects:  # every object was put with its page's parent
            assert node.parent == parents[prefix_hash], prefix_hash
        else:  # a shell: made by a child's link (no parent yet), or emptied with children
            assert node.parent in (None, parents[prefix_hash]), prefix_hash
    held = {key for summary in summaries for key in summary["stored"]}
    writer_keys = {prefix_hash + suffix for prefix_hash, node in nodes.items()
                   for suffix in node.objects if not suffix.startswith(f"_{VICTIM_RANK}_")}
    assert writer_keys == held, "a writer's objects changed behind its back"
    assert all(index.batch_is_exist(sorted(held))), "a writer's object is not complete"

    stuck = processing_objects(index)
    assert stuck, "the stalled victim left nothing processing"
    assert all(f"_{VICTIM_RANK}_" in key for key in stuck), "a writer left a processing object"
    discard_ms = index.settings.put_start_discard_timeout_ms
    wait_for_redis_time(index, max(t for _, t in stuck.values()) + discard_ms + 1)
    taken_over = sorted(stuck)[::2]  # past the discard timeout: a new put_start takes over
    takeover = Index.from_url(redis_url, namespace="kill")
    results = takeover.batch_put_start([(key, SIZE, stuck[key][0]) for key in taken_over])
    assert [r.error for r in results if not r.ok] == []
    assert all(r.ok for r in takeover.batch_put_end(taken_over))
    left = processing_objects(index)
    assert set(left) == set(stuck) - set(taken_over)
    release_ms = index.settings.put_start_release_timeout_ms
    if left:  # past the release timeout: eviction reclaims the rest
        wait_for_redis_time(index, max(t for _, t in left.values()) + release_ms + 1)
    evicted = 0
    while (job := index.evict(target_ratio=0)).objects:
        evicted += job.objects
    assert job.stopped in (NOTHING_EVICTABLE, TARGET_REACHED), job.stopped
    usage = index.usage()
    assert (usage.used_bytes, usage.objects, usage.nodes) == (0, 0, 0), usage
    report = check(index.ctx)
    assert report.clean, report.problems
    writer_errors = Counter(name for summary in summaries for errors in summary["errors"].values()
                            for name, count in errors.items() for _ in range(count))
    print(f"client kills: {dict(kills)}, during {dict(died_in)}; tripwires {dict(cuts)}; "
          f"victims made {victim_calls} calls, refused "
          f"{ {call: dict(errors) for call, errors in victim_errors.items() if errors} }; "
          f"writers made {sum(s['calls'] for s in summaries)} calls, refused "
          f"{dict(writer_errors)}; resolver after the kills: {resolved}, at rest: "
          f"{resolved_at_rest}; left processing: {len(stuck)} ({len(taken_over)} taken over, "
          f"the rest among {evicted} objects evicted)")


def started_ms(index: Index, name: str) -> int:
    """When the put_start of page `name`'s processing object ran (Redis ms)."""
    info = index.object_info(f"{page(name)}_0_k")
    assert info is not None and info.started_ms is not None
    return info.started_ms


def test_lowering_the_release_timeout_lets_eviction_reclaim_what_a_dead_writer_left(
        redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="release")
    index.put_start(f"{page('stuck')}_0_k", 10)  # its writer dies before put_end
    stale = Index.from_url(redis_url, namespace="release")  # settings read before the change
    stale.settings  # noqa: B018
    index.set_config(put_start_release_timeout_ms=100)  # the operator reclaims it sooner
    wait_for_redis_time(index, started_ms(index, "stuck") + 101)
    report = check(index.ctx)
    assert report.clean, report.problems  # every leaf was rescored at the change
    stale.put_start(f"{page('stuck-too')}_0_k", 10)  # scored with the old 600 s, then dies
    wait_for_redis_time(index, started_ms(index, "stuck-too") + 101)
    assert index.evict(target_ratio=0).objects == 2  # the job rescores what is too late
    assert check(index.ctx).clean


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
    server.process.wait(timeout=CHILD_GUARD_S)
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
