"""Golden test: the key schema (v2, its shard tags of one hex digit since 0.2) is a
contract redis-cli users read; it changes only on purpose. Pinned twice: the names
KeySchema builds, and the keys and fields a real write leaves in Redis."""

from __future__ import annotations

import pytest
from helpers import page

from mooncake_redis import ConfigurationError, Index
from mooncake_redis.keys import SHARD_KEY_NAMES, KeySchema
from mooncake_redis.prefix import ShardLayout
from mooncake_redis.values import child_field, child_of_field, decode_object, object_field

H = "13" + "ab" * 31


def test_key_schema_is_pinned() -> None:
    schema = KeySchema("mc")
    shard = schema.shard_keys("1")
    assert schema.node(H) == f"mc:{{1}}:n:{H}"  # the first hex digit
    assert schema.node("plain-object").startswith("mc:{") and \
        schema.node("plain-object").endswith("}:n:plain-object")  # blake3 shard
    assert shard.as_list() == [f"mc:{{1}}:{name}" for name in
                               ("leaves", "soft_leaves", "stats", "pending", "fences",
                                "outbox", "events")]
    assert SHARD_KEY_NAMES == ("leaves", "soft_leaves", "stats", "pending", "fences",
                               "outbox", "events")
    assert schema.settings == "mc:settings"
    assert schema.eviction_lock == "mc:eviction_lock"
    assert schema.pod_holders == "mc:pods"
    assert schema.ingest_position("pod-1") == "mc:ingest:pod-1"
    assert schema.token_hashes("pod-1@CPU/g1") == "mc:tokens:pod-1@CPU/g1"
    assert schema.eviction_requested == "mc:eviction_requested"
    assert schema.pattern() == "mc:*"
    assert schema.node_pattern() == "mc:{?}:n:*"
    assert schema.node_prefix("1") == "mc:{1}:n:"
    assert schema.shards == tuple("0123456789abcdef")
    assert schema.hash_of_node_key(schema.node(H)) == H


def test_node_fields_are_pinned() -> None:
    """A 64-hex child is stored under its bare hash (the listpack's 64-byte limit), any
    other name as c:<name>; an object as o:<suffix>."""
    assert child_field(H) == H and child_of_field(H) == H
    assert child_field("tag:" + H) == "c:tag:" + H and child_of_field("c:tag:" + H) == "tag:" + H
    assert child_of_field("p") is None and child_of_field("o:_0_k") is None
    assert object_field("_0_k") == "o:_0_k" and object_field("") == "o:"
    stored = decode_object("1c,100,1700000000000,3,tok")
    assert stored is not None and (stored.state, stored.size, stored.time_ms, stored.pins,
                                   stored.token) == ("complete", 100, 1700000000000, 3, "tok")
    assert decode_object("2x,newer-format") is None


@pytest.mark.parametrize(("shard_count", "parent_tag", "child_tag"),
                         [(16, "1", "2"), (256, "1a", "2b")])
def test_a_write_leaves_exactly_the_pinned_keys_and_fields(
        redis_url: str, shard_count: int, parent_tag: str, child_tag: str) -> None:
    """One object under a parent in another shard: one hash per node (no object keys, no
    per-shard object index), the shard's stats and leaf index, and the events stream; in
    a new namespace's 16 shards and in 256 (asked for at creation: 0.1's layout)."""
    arguments = {} if shard_count == 16 else {"shard_count": shard_count}
    index = Index.from_url(redis_url, namespace="gold", capacity_bytes="1GiB", **arguments)
    assert index.settings.shard_count == shard_count
    parent, child = "1a" + page("p")[2:], "2b" + page("c")[2:]
    index.put_start(f"{parent}_0_k", 10)
    index.put_end(f"{parent}_0_k")
    index.put_start(f"{child}_0_k", 20, parent_block_hash=parent)
    index.put_end(f"{child}_0_k")
    index.close()  # the confirmed link's pending entry goes with the next batch
    keys = set(index.client.scan_iter(match="gold:*"))
    p, c = f"gold:{{{parent_tag}}}", f"gold:{{{child_tag}}}"
    assert keys == {"gold:settings", f"{p}:n:{parent}", f"{c}:n:{child}",
                    f"{p}:stats", f"{c}:stats", f"{c}:leaves", f"{p}:events", f"{c}:events"}
    assert index.client.hget("gold:settings", "shard_count") == str(shard_count)
    parent_fields = index.client.hgetall(f"{p}:n:{parent}")
    assert set(parent_fields) == {"o:_0_k", child, "nc", "no", "b", "lm"}
    child_fields = index.client.hgetall(f"{c}:n:{child}")
    assert set(child_fields) == {"o:_0_k", "p", "pe", "no", "b", "lm"}
    assert child_fields["p"] == parent and parent_fields[child] == child_fields["pe"]
    assert child_fields["o:_0_k"].startswith("1c,20,")
    assert child_fields["o:_0_k"].endswith(f",0,{index.ctx.token}")
    # `writes`: the put_start; a completion changes nothing fsck's recount counts
    assert index.client.hgetall(f"{c}:stats") == {"used_bytes": "20", "objects": "1",
                                                  "nodes": "1", "fences": "0",
                                                  "shells": "0", "writes": "1"}
    assert index.client.zrange(f"{c}:leaves", 0, -1) == [child]


def test_0_1_s_two_digit_layouts_take_the_first_byte_s_top_bits() -> None:
    schema = KeySchema("mc", ShardLayout(16, 2))
    assert schema.shards == tuple(f"{i:02x}" for i in range(16))
    assert schema.node(H) == f"mc:{{01}}:n:{H}"  # 0x13 -> 1
    assert schema.shard("f" + H[1:]) == "0f" and schema.shard("0" + H[1:]) == "00"
    assert KeySchema("mc", ShardLayout(1, 2)).shard(H) == "00"
    assert KeySchema("mc", ShardLayout(256, 2)).shard(H) == "13"
    assert schema.node_pattern() == "mc:{??}:n:*"
    assert schema.shard("plain-object") in schema.shards  # blake3's first byte
    assert KeySchema("mc").shard("plain-object") in KeySchema("mc").shards


@pytest.mark.parametrize("namespace", ["", "a:b", "a{b}", "x" * 65, "sp ace", 5, None])
def test_bad_namespaces_are_refused(namespace: object) -> None:
    with pytest.raises(ConfigurationError):
        KeySchema(namespace)  # type: ignore[arg-type]
