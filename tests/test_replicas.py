"""Replicas, upsert and soft-pin TTL (the object model Mooncake's master has), on every
backend, asserting on what Redis holds and on the events streams."""

from __future__ import annotations

from typing import Any

import pytest
from clock import wait_for_redis_time
from conftest import IndexFactory
from helpers import A, B, C, assert_consistent, node_fields, page, snapshot, stream_events

from mooncake_redis import Index, InvalidArgument, ObjectAlreadyExists
from mooncake_redis.errors import ObjectNotFound, SegmentNotMounted
from mooncake_redis.models import Replica
from mooncake_redis.values import decode_replicas


def events(index: Index, prefix_hash: str) -> list[dict[str, Any]]:
    """The events of one node, oldest first, each as its fields: type, hash, suffix, size,
    parent and replicas where it has them, and its type's own."""
    return [{"type": event.type, "hash": event.hash, "suffix": event.suffix,
             "size": str(event.size), **({"parent": event.parent} if event.parent else {}),
             **({"replicas": event.replicas_raw} if event.replicas_raw else {}), **event.extra}
            for event in stream_events(index, index.ctx.shard(prefix_hash))
            if event.hash == prefix_hash]


@pytest.fixture
def store(make_index: IndexFactory) -> Index:
    index = make_index(events_max_len=10_000)
    index.mount_segment("node-a:7000", 1 << 30)
    index.mount_segment("disk/ssd0", 1 << 30)
    return index


def test_replicas_round_trip_and_count_against_their_segments(store: Index) -> None:
    replicas = [("node-a:7000", "0x7f00,1000|odd%"), Replica("disk/ssd0", "/kv/a", "disk")]
    store.put_start(f"{A}_0_k", 100, replicas=replicas)
    store.put_end(f"{A}_0_k")
    store.put_start(f"{B}_0_k", 10, parent_block_hash=A, replicas=[("node-a:7000", "0x10")])
    store.put_end(f"{B}_0_k")
    assert store.get_replica_desc(f"{A}_0_k") == [
        Replica("node-a:7000", "0x7f00,1000|odd%", "memory", 100),
        Replica("disk/ssd0", "/kv/a", "disk", 100)]
    results = store.batch_get_replica_desc([f"{B}_0_k", f"{C}_0_k"])
    assert [r.value for r in results] == [[Replica("node-a:7000", "0x10", "memory", 10)], []]
    usage = store.usage()
    assert usage.used_bytes == 2 * 100 + 10  # a replica holds the whole object
    assert {n: s.used_bytes for n, s in usage.segments.items()} == {"node-a:7000": 110,
                                                                    "disk/ssd0": 100}
    assert usage.capacity_bytes == 2 << 30
    assert store.get_node(A).bytes == 200  # type: ignore[union-attr]
    stored = events(store, B)[-1]
    assert stored["type"] == "stored" and stored["parent"] == A
    assert decode_replicas(stored["replicas"], 10) == (Replica("node-a:7000", "0x10",
                                                               "memory", 10),)
    assert_consistent(store)


def test_a_put_on_a_segment_that_is_not_mounted_is_refused_and_writes_nothing(
        store: Index) -> None:
    store.put_start(f"{A}_0_k", 1, replicas=[("node-a:7000", "0x1")])
    results = store.batch_put_start([
        (f"{B}_0_k", 5, A, [("node-a:7000", "0x2"), ("never-mounted", "0x3")]),
        (f"{C}_0_k", 5, A, [("disk/ssd0", "/c")])])
    assert isinstance(results[0].error, SegmentNotMounted)
    assert "never-mounted" in str(results[0].error)
    assert results[1].ok  # each item on its own
    store.close()
    store.resolve(grace_ms=0)  # the refused item's link attempt settles
    before = snapshot(store)
    with pytest.raises(SegmentNotMounted):
        store.put_start(f"{B}_0_k", 5, replicas=[("never-mounted", "0x3")])
    assert snapshot(store) == before
    assert store.get_node(B) is None
    assert_consistent(store)


@pytest.mark.parametrize("replicas, message", [
    ("seg", "must be a list"),
    ([("bad name", "x")], "segment name"),
    ([("seg", "")], "must not be empty"),
    ([("seg", "a\nb")], "control characters"),
    ([("seg", "x", "tape")], "medium"),
    ([("seg", "x"), ("seg", "x")], "twice"),
    ([("seg",)], "a replica must be"),
    ([("seg", str(i)) for i in range(17)], "at most 16"),
])
def test_bad_replicas_are_refused_before_anything_is_sent(index: Index, replicas: Any,
                                                          message: str) -> None:
    before = snapshot(index)
    with pytest.raises(InvalidArgument, match=message):
        index.put_start(f"{A}_0_k", 1, replicas=replicas)
    assert snapshot(index) == before


def test_put_start_with_replicas_sent_again_answers_as_the_first_time(store: Index) -> None:
    """A lost reply's re-send carries the same token, size and replicas: OK, nothing more;
    other replicas from the same writer are a conflict."""
    item = (f"{A}_0_k", 7, None, [("node-a:7000", "0x1")])
    assert store.batch_put_start([item])[0].ok
    before = snapshot(store)
    assert store.batch_put_start([item])[0].ok
    assert snapshot(store) == before
    with pytest.raises(ObjectAlreadyExists):
        store.put_start(f"{A}_0_k", 7, replicas=[("node-a:7000", "0x2")])


def test_upsert_keeps_the_old_replicas_for_lease_holders_until_their_lease_ends(
        store: Index) -> None:
    key = f"{A}_0_k"
    store.put_start(key, 100, replicas=[("node-a:7000", "0xold")])
    store.put_end(key)
    lease = store.get(key).lease_ms  # type: ignore[union-attr]  # a reader holds a lease
    store.upsert_start(key, 300, replicas=[("disk/ssd0", "/new")])
    info = store.object_info(key)
    assert info is not None and info.state == "processing" and info.size == 300
    replaced = events(store, A)[-1]
    assert replaced["type"] == "replaced"
    assert decode_replicas(replaced["replicas"], int(replaced["size"]))[0].location == "0xold"
    assert int(replaced["free_after"]) == lease  # the reader's lease, not now
    usage = store.usage()
    assert {n: s.used_bytes for n, s in usage.segments.items()} == {"node-a:7000": 0,
                                                                    "disk/ssd0": 300}
    store.upsert_end(key)
    assert store.get_replica_desc(key) == [Replica("disk/ssd0", "/new", "memory", 300)]
    assert events(store, A)[-1]["type"] == "stored"
    assert_consistent(store)


def test_upsert_of_an_absent_key_is_a_put_and_keeps_the_tree(store: Index) -> None:
    store.upsert_start(f"{A}_0_k", 1, replicas=[("disk/ssd0", "/a")])
    store.upsert_start(f"{B}_0_k", 1, parent_block_hash=A, replicas=[("disk/ssd0", "/b")])
    store.batch_upsert_end([f"{A}_0_k", f"{B}_0_k"])
    store.upsert_start(f"{B}_0_k", 2, parent_block_hash=A, replicas=[("disk/ssd0", "/b2")])
    node = store.get_node(B)
    assert node is not None and node.parent == A
    assert store.get_node(A).children == [B]  # type: ignore[union-attr]
    store.upsert_revoke(f"{B}_0_k")  # abandons the object: its node goes, with its link
    assert store.get_node(B) is None
    assert store.get_node(A).children == []  # type: ignore[union-attr]
    assert_consistent(store)


def test_upsert_refuses_another_writers_unfinished_put(store: Index,
                                                       make_index: IndexFactory) -> None:
    store.put_start(f"{A}_0_k", 1, replicas=[("disk/ssd0", "/a")])
    other = make_index(events_max_len=10_000)
    with pytest.raises(ObjectAlreadyExists, match="processing"):
        other.upsert_start(f"{A}_0_k", 2, replicas=[("disk/ssd0", "/a2")])
    with pytest.raises(ObjectNotFound):
        other.upsert_end(f"{C}_0_k")


def test_a_soft_pin_lapses_soft_pin_ttl_after_the_lease_ends(make_index: IndexFactory) -> None:
    """Deterministic on a loaded machine: first a TTL no run can outlast (the pin holds),
    then a TTL of 1 ms, and the second job runs only once Redis's own clock has passed the
    lease end plus that TTL (waiting on Redis time, not on a wall-clock window)."""
    index = make_index(lease_ttl_ms=0, soft_pin_ttl_ms=3_600_000, allow_soft_pin_eviction=False)
    index.put_start(f"{A}_0_k", 10, soft_pin=True)
    index.put_end(f"{A}_0_k")
    index.put_start(f"{B}_0_k", 10, hard_pin=True)
    index.put_end(f"{B}_0_k")
    assert index.evict(target_ratio=0).objects == 0  # pinned: not yet
    assert node_fields(index, A)
    index.set_config(soft_pin_ttl_ms=1)
    info = index.object_info(f"{A}_0_k")
    assert info is not None
    wait_for_redis_time(index, info.lease_ms + 2)
    report = index.evict(target_ratio=0)
    assert report.objects == 1 and not node_fields(index, A)
    assert node_fields(index, B)  # a hard pin never lapses
    assert_consistent(index)


def test_soft_pins_never_lapse_with_a_ttl_of_zero(make_index: IndexFactory) -> None:
    index = make_index(lease_ttl_ms=0, soft_pin_ttl_ms=0, allow_soft_pin_eviction=False)
    index.put_start(f"{A}_0_k", 10, soft_pin=True)
    index.put_end(f"{A}_0_k")
    info = index.object_info(f"{A}_0_k")
    assert info is not None
    wait_for_redis_time(index, info.lease_ms + 50)  # the lease ended a while ago
    assert index.evict(target_ratio=0).objects == 0
    assert index.object_info(f"{A}_0_k") is not None


def test_every_delete_path_announces_its_objects_with_their_replicas(store: Index) -> None:
    """put_revoke, remove, forced removal, eviction, invalidation and upsert each say which
    replicas are to be freed, in the script that made the change."""
    on = [("disk/ssd0", "/x", "disk")]
    keys = [f"{page(i)}_0_k" for i in range(5)]
    store.batch_put_start([(k, 1, None, on) for k in keys])
    store.put_revoke(keys[0])
    store.batch_put_end(keys[1:])
    store.remove(keys[1])
    store.get(keys[2])
    store.remove(keys[2], force=True)
    store.upsert_start(keys[3], 1, replicas=[("node-a:7000", "0x1")])
    store.evict(target_ratio=0)  # keys[4] (and keys[3], processing, is not evictable)
    store.unmount_segment("node-a:7000")  # keys[3]
    seen = {}
    for key in keys:
        for event in events(store, key[:64]):
            if event["type"] != "stored":
                seen.setdefault(event["type"], []).append(
                    (key, decode_replicas(event.get("replicas", ""), 1)))
    assert set(seen) == {"revoked", "removed", "replaced", "evicted", "invalidated"}
    assert seen["revoked"] == [(keys[0], (Replica("disk/ssd0", "/x", "disk", 1),))]
    assert [k for k, _ in seen["removed"]] == [keys[1], keys[2]]
    assert seen["invalidated"] == [(keys[3], ())]  # no replica left: deleted
    (invalidated,) = [e for e in events(store, keys[3][:64]) if e["type"] == "invalidated"]
    assert (invalidated["segment"], invalidated["left"]) == ("node-a:7000", "0")
    assert decode_replicas(invalidated["dropped"], 1) == (Replica("node-a:7000", "0x1",
                                                                  "memory", 1),)
    assert [k for k, _ in seen["evicted"]] == [keys[4]]
    assert store.usage().objects == 0
    assert_consistent(store)
