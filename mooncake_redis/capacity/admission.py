"""Capacity: used bytes are the sum of the shards' exact counters, and admission is a byte
limit per shard that put_start checks inside its own script (no extra round trip, no
namespace-wide hot key).

A shard's limit is, until a keeper writes one, its even share of capacity_bytes (rounded
up). Limit only moves between shards, taken from a shard's spare before it is given to
another (lua/lend.lua), so the limits never add up to more than capacity_bytes: a put
refused for its shard's limit borrows from the shards with the most spare and is sent
again (borrowing.py), and the keeper (every eviction job, the monitor, a change of
capacity) moves limit so that each shard has its usage plus an even share of the free
space, and gives back capacity a borrower lost by dying between its two steps.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError, OutcomeUnknown
from mooncake_redis.executor import Batch, raise_first_error
from mooncake_redis.models import Usage
from mooncake_redis.segment_registry import Segment, parse_registry
from mooncake_redis.values import to_int

log = logging.getLogger(__name__)


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
    replies = ctx.per_shard(lambda batch, shard: batch.command(
        "HMGET", ctx.schema.shard_keys(shard).stats, "used_bytes", "objects", "nodes", "limit",
        "shells"))
    return [ShardUsage(shard, to_int(used), to_int(objects), to_int(nodes),
                       None if limit is None else to_int(limit), to_int(shells))
            for shard, [(used, objects, nodes, limit, shells)] in replies]


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
    replies = ctx.per_shard(lambda batch, shard: batch.command(
        "HMGET", ctx.schema.shard_keys(shard).stats, *(f"su:{n}" for n in names)),
        raise_errors=True)
    used = dict.fromkeys(names, 0)
    for _, [reply] in replies:
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


def shard_default_limit(ctx: Context) -> int:
    """What put_start and lend.lua take as a shard's limit while its stats hold none."""
    return default_shard_limit(ctx.settings.capacity_bytes, ctx.settings.shard_count)


def lend(batch: Batch, ctx: Context, shard: str, op: str, generation: str,
         amount: int = 0) -> int:
    """Queue one lua/lend.lua call on a shard's stats; returns its position. A stamp may
    be sent again (same state, same kind of answer); a take or a give may not."""
    return batch.call(ctx.scripts["lend"], [ctx.schema.shard_keys(shard).stats],
                      [op, shard_default_limit(ctx), generation, amount],
                      retry_safe=op == "stamp")


def targets(capacity: int, used: list[int]) -> list[int]:
    """Each shard's limit as the keeper wants it: its usage plus an even share of the free
    space (the remainder to the first shards), so the limits add up to capacity exactly
    (to the usage when over it)."""
    share, remainder = divmod(max(0, capacity - sum(used)), len(used))
    return [u + share + (i < remainder) for i, u in enumerate(used)]


def rebalance(ctx: Context, lock_token: str | None = None) -> list[ShardUsage]:
    """The keeper: move limit so that each shard's becomes its target (`targets`), and
    give back capacity lost by a borrower that died between its take and its give. With
    unlimited capacity the limits are removed.

    It runs under the namespace's eviction lock, so that two keepers never both give back
    the same bytes: an eviction job passes the token it holds (and reads the settings
    again first: a capacity change made during the job applies now); other callers take
    the lock, and while a job holds it they only take limit down to a lowered capacity,
    giving nothing (safe beside any keeper or borrower; the job's run at its end does the
    rest). It only moves limit
    as borrowers do (borrowing.py): first it stamps every shard with a new generation,
    reading its used bytes and limit in the same script; then it takes from the shards
    over their target, at most their spare, and only where its stamp is still there;
    then it gives what it took, plus the lost capacity (capacity minus the sum of each
    shard's larger of limit and usage, as stamped; negative when over), to the shards
    under their target, again only where its stamp is still there. A put racing the
    keeper only uses its shard's limit, so nothing it does can take the store over
    capacity; docs/ARCHITECTURE.md ("Capacity and admission") gives the argument."""
    if lock_token is None:
        token = KEEPER_TOKEN_PREFIX + secrets.token_hex(8)
        if not eviction_lock(ctx, "acquire", token):
            return _lower_to_capacity(ctx)
        try:
            return _keep(ctx)
        finally:
            eviction_lock(ctx, "release", token)
    ctx.reload_settings()
    return _keep(ctx)


def _keep(ctx: Context) -> list[ShardUsage]:
    capacity = ctx.settings.capacity_bytes
    generation = secrets.token_hex(8)
    shards = ctx.all_shards()
    replies = ctx.per_shard(  # every stamp first: the keeper's first step, then the reads
        lambda batch, shard: lend(batch, ctx, shard, "stamp", generation),
        lambda batch, shard: batch.command("HMGET", ctx.schema.shard_keys(shard).stats,
                                           "objects", "nodes", "shells"),
        raise_errors=True)
    stamped = [(to_int(used), to_int(limit)) for _, [(used, limit), _] in replies]
    usages = [ShardUsage(shard, used, to_int(objects), to_int(nodes), limit, to_int(shells))
              for (shard, [_, (objects, nodes, shells)]), (used, limit) in zip(replies, stamped)]
    if not capacity:
        return _remove_limits(ctx, usages)
    wanted = targets(capacity, [used for used, _ in stamped])
    lost = capacity - sum(max(used, limit) for used, limit in stamped)
    try:
        budget = lost + _take_over_target(ctx, shards, stamped, wanted, generation)
        _give_under_target(ctx, shards, stamped, wanted, generation, budget)
    except OutcomeUnknown as error:  # a lost take or give leaves limit unused, never extra
        log.warning("keeper: %s; the next run gives back what was lost", error)
    return usages


def _lower_to_capacity(ctx: Context) -> list[ShardUsage]:
    """The keeper without the lock: when the limits allow more than capacity (it was
    lowered), take the excess from the shards over their target; never give (a give
    could repeat what the keeper holding the lock gives back)."""
    shards = read_shards(ctx)
    capacity = ctx.settings.capacity_bytes
    if not capacity:
        return _remove_limits(ctx, shards)
    default = shard_default_limit(ctx)
    limits = [default if s.limit is None else s.limit for s in shards]
    excess = sum(max(s.used_bytes, limit) for s, limit in zip(shards, limits)) - capacity
    batch = ctx.batch()
    for s, limit, target in zip(shards, limits, targets(capacity, [s.used_bytes for s in shards])):
        if excess > 0 and limit > target:
            lend(batch, ctx, s.shard, "take", "", min(limit - target, excess))
            excess -= min(limit - target, excess)
    try:
        raise_first_error(batch.execute())
    except OutcomeUnknown as error:
        log.warning("keeper: %s", error)
    return shards


def _remove_limits(ctx: Context, shards: list[ShardUsage]) -> list[ShardUsage]:
    """Unlimited capacity: no shard has a limit."""
    ctx.per_shard(lambda batch, shard: batch.command(
        "HDEL", ctx.schema.shard_keys(shard).stats, "limit", retry_safe=True),
        shards=[shard.shard for shard in shards])
    return shards


def _take_over_target(ctx: Context, shards: Sequence[str], stamped: list[tuple[int, int]],
                      wanted: list[int], generation: str) -> int:
    batch = ctx.batch()
    for shard, (_, limit), target in zip(shards, stamped, wanted):
        if limit > target:
            lend(batch, ctx, shard, "take", generation, limit - target)
    replies = batch.execute()
    raise_first_error(replies)
    return sum(to_int(taken) for taken, _ in replies)


def _give_under_target(ctx: Context, shards: Sequence[str], stamped: list[tuple[int, int]],
                       wanted: list[int], generation: str, budget: int) -> None:
    batch = ctx.batch()
    for shard, (_, limit), target in zip(shards, stamped, wanted):
        if budget <= 0:
            break
        if limit < target:
            amount = min(budget, target - limit)
            lend(batch, ctx, shard, "give", generation, amount)
            budget -= amount
    raise_first_error(batch.execute())


KEEPER_TOKEN_PREFIX = "keeper:"
"""What the eviction lock holds while a keeper outside a job (the monitor, set_config)
runs: milliseconds, so an eviction job that finds it waits instead of giving up."""

KEEPER_WAIT_S = 5.0
"""How long an eviction job waits for keepers to release the lock (a hang guard: a keeper
run takes milliseconds; a keeper that died leaves the lock to expire, and the job then
gives up as it does for another job)."""


def eviction_lock(ctx: Context, operation: str, token: str) -> bool:
    """Take, renew or release the namespace's eviction lock (lua/lock_token.lua: safe to
    re-send, so a lost reply cannot make its owner think another one holds it)."""
    batch = ctx.batch()
    batch.call(ctx.scripts["lock_token"], [ctx.schema.eviction_lock],
               [operation, token, ctx.settings.eviction_lock_ttl_ms], retry_safe=True)
    (result,) = batch.execute()
    if isinstance(result, MooncakeRedisError):
        raise result
    return bool(int(result))


def take_eviction_lock(ctx: Context, token: str) -> bool:
    """Take the eviction lock for a job, waiting while a keeper holds it (not while
    another job does)."""
    deadline = time.monotonic() + KEEPER_WAIT_S
    while not eviction_lock(ctx, "acquire", token):
        holder = ctx.read("GET", ctx.schema.eviction_lock)
        if holder is not None and not str(holder).startswith(KEEPER_TOKEN_PREFIX):
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
