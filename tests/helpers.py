"""Shared test helpers: page hashes, snapshots of a namespace, a consistency assertion."""

from __future__ import annotations

import hashlib
from typing import Any

from mooncake_redis import Index
from mooncake_redis.operations.fsck import check
from mooncake_redis.prefix import V4_LAYOUT, shard_of
from mooncake_redis.store.events import Event, events_of

BOOKKEEPING = ("fences", "events")
"""Per-shard keys a refused call may still touch: a fence records that a link attempt was
made and refuses older epochs (it expires after link_epoch_horizon_ms); the events stream
only ever grows. Neither is data."""


def default_shard(prefix_hash: str) -> str:
    """The hash's shard in a namespace created with the default layout (the tests')."""
    return shard_of(prefix_hash, V4_LAYOUT.shard_count, V4_LAYOUT.tag_width)


def other_shard(prefix_hash: str) -> str:
    """A shard tag other than the hash's own, in such a namespace."""
    return "0" if default_shard(prefix_hash) != "0" else "1"


def page(name: object) -> str:
    """A 64-hex page hash, as an engine would make one."""
    return hashlib.sha256(str(name).encode()).hexdigest()


A, B, C = page("a"), page("b"), page("c")


def build_small_tree(index: Index) -> None:
    """A <- B (complete), A <- C (processing, soft-pinned): an interior node and two leaves."""
    index.put_start(f"{A}_0_k", 2048)
    index.put_end(f"{A}_0_k")
    index.put_start(f"{B}_0_k", 1024, parent_block_hash=A)
    index.put_end(f"{B}_0_k")
    index.put_start(f"{C}_0_k", 512, parent_block_hash=A, soft_pin=True)


def snapshot(index: Index) -> dict[str, Any]:
    """Every key of the namespace with its value, to prove that a refusal wrote nothing.
    Fences (and their count), events and the shards' write counters are protocol
    bookkeeping, left out."""
    client = index.client
    state: dict[str, Any] = {}
    for key in sorted(client.scan_iter(match=index.ctx.schema.pattern(), count=1000)):
        if key.rsplit(":", 1)[-1] in BOOKKEEPING:
            continue
        kind = client.type(key)
        if kind == "hash":
            value = client.hgetall(key)
            if key.endswith(":stats"):
                value.pop("writes", None)
                value.pop("fences", None)
                value = {name: v for name, v in value.items() if v != "0"}
                if not value:
                    continue
            state[key] = value
        elif kind == "zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = client.get(key)
    return state


def assert_consistent(index: Index) -> None:
    """Every invariant holds (fsck finds nothing), links settled first as a quiescent
    namespace would have them."""
    index.close()
    index.resolve(grace_ms=0)
    report = check(index.ctx)
    assert report.clean, report.problems


def node_fields(index: Index, prefix_hash: str) -> dict[str, str]:
    return index.client.hgetall(index.ctx.schema.node(prefix_hash))


def stream_events(index: Index, shard: str) -> list[Event]:
    """The events a shard's stream holds, read straight from Redis (XRANGE), oldest first:
    one per object of each entry (store/events.py events_of)."""
    stream = index.ctx.schema.shard_keys(shard).events
    return [event for entry_id, fields in index.client.xrange(stream)
            for event in events_of(shard, entry_id, fields)]
