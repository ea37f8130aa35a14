"""Redis Cluster specifics on a real local cluster: URLs, the cross-slot guard, per-node
pipelines (queue order, barriers, MOVED, NOSCRIPT on every node), WAIT, and failover.

Every public operation also runs on the cluster through the `backend` parameter of
conftest.py; this module covers what only a cluster has.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from helpers import assert_consistent, page
from redis.crc import key_slot
from redis_cluster import LocalCluster

from mooncake_redis import ConfigurationError, Index, MooncakeRedisError
from mooncake_redis.batch import CrossSlotCall
from mooncake_redis.errors import ReplicationIncomplete
from mooncake_redis.fsck import check
from mooncake_redis.prefix import all_shards

LIVENESS_DEADLINE_S = 120
"""Bound on waiting for the registration load (not a performance assertion: it only
keeps a broken client from hanging the suite)."""

ACCEPTABLE_LEFTOVERS = {"dangling_child", "usage_counter"}
"""What an interrupted batch may leave: a parent listing a child whose write never
happened (the link goes first), and bytes reserved for a put whose outcome is unknown."""


@pytest.fixture
def cluster_index(cluster_url: str) -> Index:
    return Index.from_url(cluster_url, namespace="c")


def test_a_url_lists_one_or_many_seed_nodes(redis_cluster: LocalCluster, cluster_url: str) -> None:
    first_seed_only = cluster_url.split(",")[0]
    for url in (cluster_url, first_seed_only):
        index = Index.from_url(url, namespace="urls")
        index.put_start(f"{page(url)}_0_k", 1)
        assert index.object_info(f"{page(url)}_0_k") is not None
    assert len(index.client.get_primaries()) == 3


@pytest.mark.parametrize("url", ["redis+cluster://", "redis+cluster://localhost:port",
                                 "redis+cluster://user:hunter2@127.0.0.1:1"])
def test_a_bad_or_unreachable_cluster_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Index.from_url(url)
    assert "hunter2" not in str(refused.value)


def test_a_call_with_keys_of_two_slots_is_refused_before_sending(cluster_index: Index) -> None:
    a, b = page("left"), page("right")
    keys = [cluster_index.schema.node_keys(a).node, cluster_index.schema.node_keys(b).node]
    assert key_slot(keys[0].encode()) != key_slot(keys[1].encode())
    batch = cluster_index.batch()
    with pytest.raises(CrossSlotCall):
        batch.call(cluster_index.scripts.all[0], keys, [])
    assert len(batch) == 0


def test_replies_come_back_in_queue_order_across_nodes(cluster_index: Index) -> None:
    client = cluster_index.client
    keys = [f"c:{{{shard:02x}}}:probe" for shard in range(0, 256, 7)]
    for number, key in enumerate(keys):
        client.set(key, number)
    batch = cluster_index.batch()
    for key in keys:
        batch.command("GET", key)
    assert batch.execute() == [str(number) for number in range(len(keys))]
    assert len({client.nodes_manager.get_node_from_slot(key_slot(k.encode())).name
                for k in keys}) == 3


def test_a_barrier_orders_calls_on_different_nodes(cluster_index: Index) -> None:
    manager = cluster_index.client.nodes_manager
    node_of = {h: manager.get_node_from_slot(key_slot(cluster_index.schema.node_keys(h).node
                                                      .encode())).name
               for h in (page(i) for i in range(40))}
    parent = page(0)
    child = next(h for h, node in node_of.items() if node != node_of[parent])
    batch = cluster_index.batch()
    cluster_index.scripts.link_child(batch, parent, child)
    batch.barrier()
    batch.command("SMEMBERS", cluster_index.schema.node_keys(parent).children)
    _, children = batch.execute()
    assert set(children) == {child}


def test_a_stale_slot_map_is_refreshed_on_moved(cluster_index: Index) -> None:
    key = f"{page('moved')}_0_k"
    slot = key_slot(cluster_index.schema.object_key(key, cluster_index.prefix_of(key)).encode())
    manager = cluster_index.client.nodes_manager
    owner = manager.get_node_from_slot(slot)
    other = next(n for n in cluster_index.client.get_primaries() if n.name != owner.name)
    manager.slots_cache[slot] = [other]  # as if the slot had moved since the last refresh
    cluster_index.put_start(key, 5)
    assert cluster_index.object_info(key) is not None
    assert manager.get_node_from_slot(slot).name == owner.name


def test_scripts_are_reloaded_on_every_node_after_script_flush(redis_cluster: LocalCluster,
                                                               cluster_index: Index) -> None:
    chain = [page(f"flush-{i}") for i in range(12)]
    cluster_index.batch_put_start([(f"{h}_0_k", 1, p) for h, p in zip(chain, [None, *chain])])
    for master in redis_cluster.masters():
        redis_cluster.client(master).script_flush()
    cluster_index.batch_put_end([f"{h}_0_k" for h in chain])
    cluster_index.remove_all()
    assert cluster_index.usage().objects == 0
    assert_consistent(cluster_index)


def test_a_write_no_replica_acknowledged_stops_the_batch(cluster_url: str) -> None:
    index = Index.from_url(cluster_url, namespace="wait", wait_replicas=1, wait_timeout_ms=10)
    key = f"{page('wait')}_0_k"
    with pytest.raises(ReplicationIncomplete):
        index.put_start(key, 1)
    assert index.usage().used_bytes == 1  # the reservation is applied on its primary...
    assert index.object_info(key) is None  # ...and nothing after it was sent


class RegistrationLoad(threading.Thread):
    """Registers chains of pages in batches (each page's parent is the page before it,
    mostly in another shard and on another node) until stopped; remembers which keys
    were acknowledged and which batches failed, by error type."""

    CHAIN = 8

    def __init__(self, index: Index):
        super().__init__(daemon=True)
        self.index = index
        self.acknowledged: list[str] = []
        self.failures: Counter[str] = Counter()
        self.batches = 0
        self._progress = threading.Condition()
        self._stop_requested = threading.Event()

    def run(self) -> None:
        while not self._stop_requested.is_set():
            chain = [page(f"load-{self.batches}-{i}") for i in range(self.CHAIN)]
            items = [(f"{h}_0_k", 1, p) for h, p in zip(chain, [None, *chain])]
            try:
                self.index.batch_put_start(items)
                self.acknowledged += [key for key, _, _ in items]
            except (MooncakeRedisError, redis.exceptions.RedisError) as error:
                self.failures[type(error).__name__] += 1
            with self._progress:
                self.batches += 1
                self._progress.notify_all()

    def wait_for(self, batches: int) -> None:
        with self._progress:
            if not self._progress.wait_for(lambda: self.batches >= batches, LIVENESS_DEADLINE_S):
                raise AssertionError(f"the load stalled at {self.batches} batches")

    def stop(self) -> None:
        self._stop_requested.set()
        self.join()


@pytest.fixture
def cluster_with_replicas() -> Iterator[LocalCluster]:
    cluster = LocalCluster(masters=3, replicas=1)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("wait_replicas", [0, 1])
def test_registrations_carry_on_through_a_failover(cluster_with_replicas: LocalCluster,
                                                   wait_replicas: int) -> None:
    cluster = cluster_with_replicas
    index = Index.from_url(cluster.url, namespace="fo", wait_replicas=wait_replicas,
                           cluster_retries=8)
    load = RegistrationLoad(index)
    load.start()
    try:
        load.wait_for(batches=30)
        victim = cluster.masters()[0]
        victim.kill()  # kill -9 during the load
        cluster.wait_until_healthy()  # its replica has taken over its slots
        cluster.restart(victim)  # back as a replica, so WAIT can be answered again
        cluster.wait_until_healthy()
        acknowledged_before_recovery = len(load.acknowledged)
        load.wait_for(batches=load.batches + 30)
    finally:
        load.stop()
    assert len(load.acknowledged) > acknowledged_before_recovery, "no progress after failover"

    lost = [key for key in load.acknowledged if index.object_info(key) is None]
    report = check(index)
    print(f"\nfailover with wait_replicas={wait_replicas}: {len(load.acknowledged)} puts "
          f"acknowledged in {load.batches} batches, {len(lost)} lost, failed batches "
          f"{dict(load.failures)}, fsck {dict(report.counts)}")
    if wait_replicas:
        assert lost == []
    if not lost:  # without WAIT a lost write may also lose a link: see docs/CLUSTER.md
        assert set(report.counts) <= ACCEPTABLE_LEFTOVERS, report.problems
        stored_bytes = sum(int(index.client.hget(index.schema.shard_keys(shard).stats,
                                                 "used_bytes") or 0) for shard in all_shards())
        assert index.usage().used_bytes >= stored_bytes, "usage may only over-count"
