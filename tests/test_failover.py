"""A failover heals itself (issue 34 item 2): the monitor sees that a shard is served under
another replication ID than its record and runs fsck --repair over the namespace, a few
shards per check, with a log line and metrics. On a master + replica (the damage planted,
the failover a real `REPLICAOF NO ONE`) and on the local cluster with replicas (a real
lossy failover: the replica stops applying the stream while the master acknowledges
writes, then takes over)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from helpers import page
from interleaving import invariant_s
from redis.exceptions import RedisClusterException
from redis_cluster import LocalCluster
from redis_server import RedisServer

from mooncake_redis import Index
from mooncake_redis.operations.failover import RECORD_FIELD, FailoverHealer
from mooncake_redis.operations.fsck import check
from mooncake_redis.operations.metrics import Exporter
from mooncake_redis.workers.monitor import watch

CHAIN = 8
HALF = [f"{n:x}" for n in range(0, 16, 2)]
"""The shards a node of a two-master cluster might serve."""


def write_chains(index: Index, name: str, count: int) -> list[str]:
    """`count` chains of CHAIN complete pages (each page's parent the page before it, so
    most links cross shards); returns the keys acknowledged."""
    acknowledged = []
    for n in range(count):
        chain = [page(f"{name}-{n}-{i}") for i in range(CHAIN)]
        items = [(f"{h}_0_k", 1, p) for h, p in zip(chain, [None, *chain])]
        started = [r.key for r in index.batch_put_start(items) if r.ok]
        assert len(started) == CHAIN
        acknowledged += [r.key for r in index.batch_put_end(started) if r.ok]
    return acknowledged


def failover_metrics(exporter: Exporter, namespace: str) -> dict[str, float]:
    """The exporter's failover counters for the namespace (0 for one not counted yet)."""
    wanted = {"failovers": "mooncake_redis_failovers_total",
              "heals": "mooncake_redis_failover_heals_total",
              "nodes": "mooncake_redis_failover_checked_nodes_total"}
    found = dict.fromkeys(wanted, 0.0)
    for line in exporter.text().splitlines():
        for short, metric in wanted.items():
            if line.startswith(f'{metric}{{namespace="{namespace}"}} '):
                found[short] = float(line.rsplit(" ", 1)[1])
    return found


@pytest.fixture
def counting() -> Iterator[Exporter]:
    """An exporter counting what this process does (as `monitor --metrics-port`)."""
    exporter = Exporter([])
    exporter.count_this_process()
    yield exporter
    exporter.stop_counting()


def heal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("failover")]


@contextmanager
def rolled_back(server: RedisServer, index: Index, shards: list[str]) -> Iterator[None]:
    """These shards of a single Redis lose the writes the block makes, as when a cluster
    node serving them fails over to a replica that had not received them: their keys
    (nodes and the shard's own: each shard consistent in itself, links to other shards
    half made) are put back as they were before the block."""
    raw = redis.Redis(port=server.port)
    patterns = [f"{index.ctx.schema.tag(shard)}:*" for shard in shards]

    def keys() -> list[bytes]:
        return [key for pattern in patterns for key in raw.scan_iter(match=pattern)]

    saved = {key: raw.dump(key) for key in keys()}
    yield
    raw.delete(*keys())
    for key, value in saved.items():
        raw.restore(key, 0, value)


@pytest.fixture
def master_and_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    master = RedisServer()
    try:
        replica = master.start_replica()
    except BaseException:
        master.stop()
        raise
    yield master, replica
    replica.stop()
    master.stop()


def test_a_promoted_replica_is_healed_by_the_next_monitor_check(
        master_and_replica: tuple[RedisServer, RedisServer], counting: Exporter,
        caplog: pytest.LogCaptureFixture) -> None:
    master, replica = master_and_replica
    index = Index.from_url(master.url, namespace="fo")
    write_chains(index, "fo", 2)
    watch(index.ctx, interval_s=0, iterations=1)  # a monitor check before the failover
    with rolled_back(master, index, HALF):  # what a failover of half the shards loses
        write_chains(index, "fo-late", 4)
    raw = redis.Redis(port=master.port, decode_responses=True)
    assert raw.wait(1, 30_000) == 1
    promoted = redis.Redis(port=replica.port, decode_responses=True)
    replid_before = promoted.info("replication")["master_replid"]
    promoted.execute_command("REPLICAOF", "NO", "ONE")
    replid = promoted.info("replication")["master_replid"]
    assert replid != replid_before
    after = Index.from_url(replica.url, namespace="fo")  # the clients' Redis now
    assert invariant_s(after)
    caplog.set_level(logging.INFO)

    # a monitor started after the failover: a sweep that mends the links, one that finds
    # nothing more
    watch(after.ctx, interval_s=0, iterations=2)

    assert invariant_s(after) == []
    assert check(after.ctx).clean
    lines = heal_lines(caplog)
    assert len(lines) == 3 and f"127.0.0.1:{replica.port}" in lines[0] and replid in lines[0]
    assert replid_before in lines[0] and "mended" in lines[1]
    assert "swept 2 times" in lines[2]
    counted = failover_metrics(counting, "fo")
    assert counted["failovers"] == 1 and counted["heals"] == 1 and counted["nodes"] > 16 * 2
    stats = [after.ctx.schema.shard_keys(shard).stats for shard in after.ctx.all_shards()]
    assert {promoted.hget(key, "replid") for key in stats if promoted.exists(key)} == {replid}

    caplog.clear()
    watch(after.ctx, interval_s=0, iterations=2)  # no failover since: nothing to repair
    assert heal_lines(caplog) == []
    assert failover_metrics(counting, "fo") == counted


@pytest.fixture(scope="module")
def cluster_with_replicas() -> Iterator[LocalCluster]:
    cluster = LocalCluster(masters=3, replicas=1)
    yield cluster
    cluster.stop()


def test_the_monitor_heals_a_lossy_cluster_failover(
        cluster_with_replicas: LocalCluster, counting: Exporter,
        caplog: pytest.LogCaptureFixture) -> None:
    cluster = cluster_with_replicas
    index = Index.from_url(cluster.url, namespace="heal", cluster_retries=8)
    write_chains(index, "before", 8)
    watch(index.ctx, interval_s=0, iterations=1)  # records each shard's replication ID
    victim = cluster.masters()[0]
    with cluster.lossy_failover(victim):
        acknowledged = write_chains(index, "during", 12)  # wait_acks 0: acknowledged
    lost = [key for key in acknowledged if index.object_info(key) is None]
    assert lost, "the failover lost nothing: no damage to heal"
    index.close()
    index.resolve(grace_ms=0)  # the resolver alone mends none of it
    assert invariant_s(index), "S held after the failover: nothing to heal"
    caplog.set_level(logging.INFO)

    watch(index.ctx, interval_s=0, iterations=2)

    assert invariant_s(index) == []
    report = check(index.ctx)
    assert report.clean, report.problems
    counted = failover_metrics(counting, "heal")
    assert counted["failovers"] == 1 and counted["heals"] == 1 and counted["nodes"] > 0
    assert len(heal_lines(caplog)) == 3
    caplog.clear()
    watch(index.ctx, interval_s=0, iterations=1)
    assert heal_lines(caplog) == []
    assert failover_metrics(counting, "heal")["heals"] == 1


def test_a_sweep_is_bounded_per_check_and_a_lost_record_is_remembered(
        master_and_replica: tuple[RedisServer, RedisServer]) -> None:
    master, replica = master_and_replica
    index = Index.from_url(master.url, namespace="fb")
    write_chains(index, "fb", 2)
    healer = FailoverHealer(scan_count=2)
    first = healer.step(index.ctx)  # first sight: recorded, nothing checked
    assert not first.failovers and first.checked == 0
    with rolled_back(master, index, HALF):
        write_chains(index, "fb-late", 2)
    raw = redis.Redis(port=master.port, decode_responses=True)
    assert raw.wait(1, 30_000) == 1
    promoted = redis.Redis(port=replica.port, decode_responses=True)
    promoted.execute_command("REPLICAOF", "NO", "ONE")
    after = Index.from_url(replica.url, namespace="fb")
    for shard in after.ctx.all_shards():  # the records were lost too
        promoted.hdel(after.ctx.schema.shard_keys(shard).stats, RECORD_FIELD)

    # this process remembers the IDs; two sweeps (the second mends nothing), a few node
    # keys per check (SCAN COUNT is a hint: pages are about that size)
    passes = [healer.step(after.ctx)]
    while not passes[-1].healed:
        assert len(passes) < 1000, "the heal never ended"
        passes.append(healer.step(after.ctx))

    assert [bool(p.failovers) for p in passes] == [True] + [False] * (len(passes) - 1)
    nodes = len(after.client.keys(after.ctx.schema.node_pattern()))
    assert len(passes) >= 4 and max(p.checked for p in passes) < nodes / 2
    assert sum(p.checked for p in passes) >= nodes  # every node, in each sweep
    assert invariant_s(after) == [] and check(after.ctx).clean
    assert healer.step(after.ctx).checked == 0
    # a restarted monitor without the records sees no failover: it records
    assert FailoverHealer().step(after.ctx).checked == 0


def test_fsck_leaves_a_record_alone_and_a_junk_record_costs_one_sweep(
        redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="fj")
    write_chains(index, "fj", 2)
    healer = FailoverHealer()
    healer.step(index.ctx)
    stats = index.ctx.schema.shard_keys(index.ctx.schema.shard(page("fj-0-0"))).stats
    index.client.hset(stats, RECORD_FIELD, "junk")
    assert check(index.ctx).clean
    assert not +check(index.ctx, repair=True).repaired  # nothing repaired
    swept = healer.step(index.ctx)
    assert swept.healed and swept.checked == 16 and not +swept.repaired  # 16 nodes
    assert index.client.hget(stats, RECORD_FIELD) != "junk"
    assert healer.step(index.ctx).checked == 0


def test_a_user_that_may_not_run_info_is_told_once_and_the_monitor_carries_on(
        caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer()
    try:
        admin = redis.Redis(port=server.port)
        admin.execute_command("ACL", "SETUSER", "mc-user", "on", ">pw", "~ac:*",
                              "resetchannels", "+@all", "-@admin", "-@dangerous")
        index = Index.from_url(f"redis://mc-user:pw@127.0.0.1:{server.port}/0", namespace="ac")
        write_chains(index, "ac", 1)
        caplog.set_level(logging.INFO)
        watch(index.ctx, interval_s=0, iterations=3)
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1 and "+info" in said[0], said
    finally:
        server.stop()


def test_a_slot_map_that_cannot_be_read_mid_failover_is_waited_out(
        cluster_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    index = Index.from_url(cluster_url, namespace="slots")
    write_chains(index, "slots", 1)

    def uncovered() -> None:
        raise RedisClusterException("slot 42 is not covered by the cluster")

    monkeypatch.setattr(index.ctx.client.nodes_manager, "initialize", uncovered)
    watch(index.ctx, interval_s=0, iterations=2)  # no RedisClusterException escapes
    assert any("Redis unavailable" in r.getMessage() and "slot 42" in r.getMessage()
               for r in caplog.records)
