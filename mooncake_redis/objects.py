"""Objects after put_start: put_end, get (leases), existence probes, and their batch
forms; one script call (or one command) per shard group, one result per item."""

from __future__ import annotations

from collections.abc import Sequence

from .context import Context
from .deletion import item_result
from .errors import MooncakeRedisError, from_script_error
from .models import ObjectInfo, Result
from .values import (
    COMPLETE_PREFIX,
    HARD_PIN,
    OBJECT_PREFIX,
    SOFT_PIN,
    decode_object,
    object_field,
)

Target = tuple[str, str, str]
"""(key, prefix hash, suffix)"""


def put_end(ctx: Context, targets: Sequence[Target]) -> list[Result[None]]:
    """One call per shard, its items one per node: the node's suffixes, each once (a key
    named twice gets one reply, given to both)."""
    calls = ctx.calls("put_end", ctx.token)
    nodes: dict[str, dict[str, str]] = {}
    for key, prefix_hash, suffix in targets:
        named = nodes.get(prefix_hash)
        if named is None:
            named = nodes[prefix_hash] = {}
        named[suffix] = key
    for prefix_hash, named in nodes.items():
        call = calls.add(ctx.shard(prefix_hash), *named.values())
        call.item(call.node(prefix_hash), prefix_hash, len(named), *named)
    batch = ctx.batch()
    calls.queue(batch)
    outcome = {key: item_result(key, reply) for key, reply in calls.per_item(batch.execute())}
    return [outcome[key] for key, _, _ in targets]


def get(ctx: Context, targets: Sequence[Target], probe: bool = False
        ) -> list[Result[ObjectInfo]]:
    """Grant leases and return the objects (value None for an absent key). With probe,
    a processing object reads as absent instead of NOT_READY."""
    calls = ctx.calls("grant_lease", ctx.settings.lease_ttl_ms, "1" if probe else "0")
    for key, prefix_hash, suffix in targets:
        call = calls.add(ctx.shard(prefix_hash), (key, prefix_hash))
        call.item(call.node(prefix_hash), prefix_hash, suffix)
    batch = ctx.batch()
    calls.queue(batch)
    outcome: dict[str, Result[ObjectInfo]] = {}
    for (key, prefix_hash), reply in calls.per_item(batch.execute()):
        if isinstance(reply, MooncakeRedisError):
            outcome[key] = Result(key, error=reply)
        elif str(reply).startswith("MCERR_"):
            outcome[key] = Result(key, error=from_script_error(str(reply), key=key))
        else:
            outcome[key] = Result(key, value=object_info(key, prefix_hash, reply) or None)
    return [outcome[key] for key, _, _ in targets]


def exist(ctx: Context, targets: Sequence[Target]) -> list[bool]:
    """Whether each object is stored and complete: one HMGET per node, no script. Each
    target remembers its place in its node's field list, so each reply is read once."""
    fields: dict[str, list[str]] = {}
    places: list[int] = []
    for _, prefix_hash, suffix in targets:
        named = fields.get(prefix_hash)
        if named is None:
            named = fields[prefix_hash] = []
        places.append(len(named))
        named.append(OBJECT_PREFIX + suffix)
    node = ctx.schema.node
    batch = ctx.batch()
    batch.reads([("HMGET", node(prefix_hash), *named) for prefix_hash, named in fields.items()])
    values: dict[str, list[str | None]] = dict(zip(fields, batch.execute()))
    for reply in values.values():
        if isinstance(reply, MooncakeRedisError):
            raise reply
    return [value is not None and value.startswith(COMPLETE_PREFIX)
            for value in [values[prefix_hash][place]
                          for (_, prefix_hash, _), place in zip(targets, places)]]


def object_info(key: str, prefix_hash: str, value: str | None) -> ObjectInfo | None:
    """ObjectInfo from a packed value (None for no value or a format this version cannot
    read)."""
    stored = decode_object(value) if value else None
    if stored is None:
        return None
    return ObjectInfo(key=key, prefix_hash=prefix_hash, size=stored.size, state=stored.state,
                      lease_ms=stored.time_ms if stored.complete else 0,
                      started_ms=None if stored.complete else stored.time_ms,
                      soft_pin=bool(stored.pins & SOFT_PIN), hard_pin=bool(stored.pins & HARD_PIN),
                      token=stored.token, replicas=stored.replicas)


def peek(ctx: Context, key: str, prefix_hash: str, suffix: str) -> ObjectInfo | None:
    """An object's metadata without a lease (inspection)."""
    return object_info(key, prefix_hash,
                       ctx.read("HGET", ctx.schema.node(prefix_hash), object_field(suffix)))
