"""Capacity: used bytes are the sum of the shards' exact counters, and admission is a byte
limit per shard that put_start checks inside its own script (no extra round trip, no
namespace-wide hot key).

A shard's limit is, until a keeper writes one, its even share of capacity_bytes (rounded
up). The keeper (every eviction job, the monitor, a change of capacity) reads every
shard's usage and gives each shard its usage plus an even share of the free space, so the
limits add up to capacity_bytes: the store never goes over capacity, and a shard that
holds more than its share (hashes are uniform; a shard is 1/shard_count of the keys) can still
grow while there is room anywhere. The cost: a put is refused when its own shard's limit
is reached although other shards have room, until the next keeper run (docs/ARCHITECTURE.md
measures how early that happens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .context import Context
from .errors import MooncakeRedisError
from .models import Usage
from .segment_registry import Segment, parse_registry
from .values import to_int


def default_shard_limit(capacity_bytes: int, shard_count: int) -> int:
    """A shard's limit before any keeper ran: its even share (0 = unlimited)."""
    return -(-capacity_bytes // shard_count) if capacity_bytes else 0


@dataclass(frozen=True)
class ShardUsage:
    shard: str
    used_bytes: int
    objects: int
    nodes: int
    limit: int | None
    shells: int = 0
    """Nodes with children and no objects."""


def read_shards(ctx: Context) -> list[ShardUsage]:
    """Every shard's counters, in one round trip (per node on a cluster)."""
    batch = ctx.batch()
    for shard in ctx.all_shards():
        batch.command("HMGET", ctx.schema.shard_keys(shard).stats, "used_bytes", "objects",
                      "nodes", "limit", "shells")
    return [ShardUsage(shard, to_int(used), to_int(objects), to_int(nodes),
                       None if limit is None else to_int(limit), to_int(shells))
            for shard, (used, objects, nodes, limit, shells)
            in zip(ctx.all_shards(), batch.execute())]


def used_bytes(ctx: Context) -> int:
    """The namespace's used bytes alone (what eviction re-reads between rounds)."""
    return sum(shard.used_bytes for shard in read_shards(ctx))


def read_segments(ctx: Context) -> dict[str, Segment]:
    return parse_registry(ctx.read("HGETALL", ctx.schema.segments))


def segment_usage(ctx: Context, segments: Mapping[str, Segment]) -> dict[str, Segment]:
    """The segments with used_bytes summed from every shard's su:<segment> (one round
    trip, per node on a cluster)."""
    if not segments:
        return {}
    names = sorted(segments)
    batch = ctx.batch()
    for shard in ctx.all_shards():
        batch.command("HMGET", ctx.schema.shard_keys(shard).stats, *(f"su:{n}" for n in names))
    used = dict.fromkeys(names, 0)
    for reply in batch.execute():
        if isinstance(reply, MooncakeRedisError):
            raise reply
        for name, value in zip(names, reply):
            used[name] += int(value or 0)
    return {name: Segment(s.name, s.capacity_bytes, s.state, s.mounted_ms, s.heartbeat_ms,
                          used[name]) for name, s in segments.items()}


def usage(ctx: Context) -> Usage:
    shards = read_shards(ctx)
    segments = segment_usage(ctx, read_segments(ctx))
    return Usage(used_bytes=sum(s.used_bytes for s in shards),
                 capacity_bytes=ctx.settings.capacity_bytes,
                 objects=sum(s.objects for s in shards), nodes=sum(s.nodes for s in shards),
                 segments=segments)


def rebalance(ctx: Context) -> list[ShardUsage]:
    """The keeper: each shard's limit becomes its usage plus an even share of the free
    space (none when over capacity); with unlimited capacity the limits are removed."""
    shards = read_shards(ctx)
    capacity = ctx.settings.capacity_bytes
    batch = ctx.batch()
    if not capacity:
        for shard in shards:
            if shard.limit is not None:
                batch.command("HDEL", ctx.schema.shard_keys(shard.shard).stats, "limit",
                              retry_safe=True)
    else:
        free = max(0, capacity - sum(s.used_bytes for s in shards))
        share = free // len(shards)
        for shard in shards:
            batch.command("HSET", ctx.schema.shard_keys(shard.shard).stats, "limit",
                          shard.used_bytes + share, retry_safe=True)
    batch.execute()
    return shards
