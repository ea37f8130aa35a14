"""Objects after put_start: put_end, get (leases), existence probes, and their batch
forms; one script call (or one command) per shard group, one result per item."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from mooncake_redis.context import Context, Target, node_runs
from mooncake_redis.errors import SCRIPT_ERROR_PREFIX, MooncakeRedisError, from_script_error
from mooncake_redis.models import ObjectInfo, Result
from mooncake_redis.values import (
    COMPLETE_PREFIX,
    HARD_PIN,
    OBJECT_PREFIX,
    SOFT_PIN,
    STATE_NAMES,
    decode_replicas,
    object_field,
    unpack_value,
)

from .deletion import item_result


def put_end(ctx: Context, targets: Sequence[Target]) -> list[Result[None]]:
    """One call per Redis node, its items one per node of the tree: the node's suffixes,
    each once (a key named twice gets one reply, given to both)."""
    calls = ctx.calls("put_end", ctx.token)
    nodes: dict[str, dict[str, str]] = {}
    for key, prefix_hash, suffix in targets:
        named = nodes.get(prefix_hash)
        if named is None:
            named = nodes[prefix_hash] = {}
        named[suffix] = key
    shard_of = ctx.shard
    for prefix_hash, named in nodes.items():
        calls.items(shard_of(prefix_hash), list(named.values()), prefix_hash, len(named),
                    *named)
    batch = ctx.batch()
    calls.queue(batch)
    outcome = {key: item_result(key, reply) for key, reply in calls.per_item(batch.execute())}
    return [outcome[key] for key, _, _ in targets]


def get(ctx: Context, targets: Sequence[Target], probe: bool = False
        ) -> list[Result[ObjectInfo]]:
    """Grant leases and return the objects (value None for an absent key). With probe,
    a processing object reads as absent instead of NOT_READY. One call per Redis node,
    one item per run of targets of one node of the tree (a node named again later is a
    second item, which reads what the first wrote), each target tagged with its position."""
    calls = ctx.calls("grant_lease", ctx.settings.lease_ttl_ms, 1 if probe else 0)
    shard_of = ctx.shard
    for prefix_hash, positions, suffixes in node_runs(targets):
        calls.items(shard_of(prefix_hash), positions, prefix_hash, len(suffixes), *suffixes)
    batch = ctx.batch()
    calls.queue(batch)
    results: list[Result[ObjectInfo]] = [None] * len(targets)  # type: ignore[list-item]
    for position, reply in calls.per_item(batch.execute()):
        key, prefix_hash, _ = targets[position]
        if reply.__class__ is str and not reply.startswith(SCRIPT_ERROR_PREFIX):
            results[position] = Result(key, value=object_info(key, prefix_hash, reply))
        elif isinstance(reply, MooncakeRedisError):
            results[position] = Result(key, error=reply)
        else:
            results[position] = Result(key, error=from_script_error(str(reply), key=key))
    return results


def exist(ctx: Context, targets: Sequence[Target]) -> list[bool]:
    """Whether each object is stored and complete: one HMGET per run of targets of one
    node, no script. The replies, read in order, hold the values in the targets' order
    (a node named again later gets a second HMGET: a read, so nothing to keep in step).
    The engines' probe of a whole chain: one pass over the targets, no per-key object."""
    node = ctx.schema.node
    runs: list[list[str]] = []
    current = None
    for _, prefix_hash, suffix in targets:
        if prefix_hash != current:
            current = prefix_hash
            run = ["HMGET", node(prefix_hash)]
            runs.append(run)
        run.append(OBJECT_PREFIX + suffix)
    replies = ctx.reads(list(map(tuple, runs)))  # tuples: what hiredis packs
    for reply in replies:
        if reply.__class__ is not list:
            raise reply if isinstance(reply, MooncakeRedisError) else \
                AssertionError(f"HMGET answered {reply!r}")
    return [value is not None and value.startswith(COMPLETE_PREFIX)
            for value in chain.from_iterable(replies)]


def object_info(key: str, prefix_hash: str, value: str | None) -> ObjectInfo | None:
    """ObjectInfo from a packed value (None for no value or a format this version cannot
    read), straight from the value's parts: a batch_get makes one per key."""
    parts = unpack_value(value) if value else None
    if parts is None:
        return None
    state, size, time_ms, pins, token, replicas = parts
    complete = state == "c"
    return ObjectInfo(key, prefix_hash, size, STATE_NAMES[state],
                      time_ms if complete else 0, None if complete else time_ms,
                      bool(pins & SOFT_PIN), bool(pins & HARD_PIN), token,
                      decode_replicas(replicas, size) if replicas else ())


def peek(ctx: Context, key: str, prefix_hash: str, suffix: str) -> ObjectInfo | None:
    """An object's metadata without a lease (inspection)."""
    return object_info(key, prefix_hash,
                       ctx.read("HGET", ctx.schema.node(prefix_hash), object_field(suffix)))
