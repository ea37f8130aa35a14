"""Objects after put_start: put_end, get (leases), existence probes, and their batch
forms; one script call (or one command) per shard group, one result per item."""

from __future__ import annotations

from collections.abc import Sequence

from .context import Context
from .deletion import item_result
from .errors import MooncakeRedisError, from_script_error
from .models import ObjectInfo, Result
from .values import HARD_PIN, SOFT_PIN, decode_object, is_complete_value, object_field

Target = tuple[str, str, str]
"""(key, prefix hash, suffix)"""


def put_end(ctx: Context, targets: Sequence[Target]) -> list[Result[None]]:
    calls = ctx.calls("put_end")
    for key, prefix_hash, suffix in targets:
        call = calls.add(ctx.shard(prefix_hash), key)
        call.item(call.node(prefix_hash), prefix_hash, suffix, ctx.token)
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
    """Whether each object is stored and complete: one HMGET per node, no script."""
    fields: dict[str, list[str]] = {}
    for _, prefix_hash, suffix in targets:
        fields.setdefault(prefix_hash, []).append(object_field(suffix))
    batch = ctx.batch()
    nodes = list(fields)
    for prefix_hash in nodes:
        batch.command("HMGET", ctx.schema.node(prefix_hash), *fields[prefix_hash])
    values: dict[tuple[str, str], str | None] = {}
    for prefix_hash, reply in zip(nodes, batch.execute()):
        if isinstance(reply, MooncakeRedisError):
            raise reply
        values.update(zip(((prefix_hash, f) for f in fields[prefix_hash]), reply))
    return [is_complete_value(values[prefix_hash, object_field(suffix)])
            for _, prefix_hash, suffix in targets]


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
