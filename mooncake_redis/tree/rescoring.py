"""Recomputing nodes from their own fields: fsck's node repair, and leaf scores written
under an older put_start_release_timeout_ms.

A leaf's score is computed by the script that writes the node (the latest lease end, or a
processing object's start plus the release timeout of the writer's settings). Lowering
the timeout therefore leaves scores too late: eviction would reclaim a dead writer's
objects only after the old timeout. A change of the timeout rescores every leaf at once,
and every eviction job rescores the leaves scored later than any score the current
settings can give (writers whose settings were not refreshed yet)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError
from mooncake_redis.executor import Batch

from .links import Intent, cascade, triples

REPAIRS_PER_BATCH = 1000


def repair_nodes(ctx: Context, nodes: Mapping[str, Iterable[str]]) -> int:
    """Run repair_node on each node (shard -> prefix hashes): counters recomputed, the
    node put in exactly the leaf index it belongs to, with the score the current settings
    give, an empty node deleted and unlinked. Returns how many nodes were repaired."""
    calls = [(shard, prefix_hash) for shard, hashes in nodes.items() for prefix_hash in hashes]
    repaired = 0
    for start in range(0, len(calls), REPAIRS_PER_BATCH):
        batch = ctx.batch()
        for shard, prefix_hash in calls[start:start + REPAIRS_PER_BATCH]:
            ctx.shard_call("repair_node", shard, prefix_hash).queue(batch)
        intents: list[Intent] = []
        for reply in batch.execute():
            if isinstance(reply, MooncakeRedisError):
                raise reply
            if reply[0] == "repaired":
                repaired += 1
                intents += triples(reply[1])
        cascade(ctx, intents)
    return repaired


def rescore_leaves(ctx: Context, scored_above_ms: float | None = None) -> int:
    """Repair every leaf (plain or soft-pinned) whose score is finite and above
    `scored_above_ms` (None: every leaf with a finite score; hard pins stay at +inf).
    One round trip to find them, then one per REPAIRS_PER_BATCH leaves."""
    low = "-inf" if scored_above_ms is None else f"({scored_above_ms}"

    def queue(batch: Batch, shard: str) -> None:
        keys = ctx.schema.shard_keys(shard)
        batch.command("ZRANGEBYSCORE", keys.leaves, low, "(+inf")
        batch.command("ZRANGEBYSCORE", keys.soft_leaves, low, "(+inf")

    stale = {shard: sorted({*plain, *soft})
             for shard, (plain, soft) in ctx.per_shard(queue) if plain or soft}
    return repair_nodes(ctx, stale)


def latest_possible_score(ctx: Context, now_ms: int) -> int:
    """No leaf written under the current settings scores later than this."""
    settings = ctx.settings
    return now_ms + max(settings.lease_ttl_ms, settings.put_start_release_timeout_ms)
