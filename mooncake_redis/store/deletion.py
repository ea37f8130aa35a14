"""The one deletion path for objects taken out by a caller: remove, put_revoke, forced
removal, remove_by_regex and remove_all all run lua/delete.lua, which deletes each object,
announces it, and deletes a node left empty, unlinking it from its parent in the same call
(and so on up the tree) while the parents are served by the same Redis node; the unlinks
of parents served elsewhere come back as intents, and the cascade there (links.cascade)
follows. Eviction deletes whole nodes through lua/evict.lua the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mooncake_redis.context import Context, Target, node_runs
from mooncake_redis.errors import MooncakeRedisError, from_script_error
from mooncake_redis.models import Result
from mooncake_redis.scripts import NodeCalls
from mooncake_redis.tree.links import Intent, cascade, triples

CHUNK = 1024
"""Objects per batch: keeps one script's run (and Redis's pause) short."""

MODES = ("remove", "revoke", "reclaim", "force")

def delete_objects(ctx: Context, targets: Sequence[Target], mode: str) -> list[Result[None]]:
    """Delete objects (mode as in lua/delete.lua); one result per target."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    results: list[Result[None]] = []
    for start in range(0, len(targets), CHUNK):
        results += _delete_chunk(ctx, targets[start:start + CHUNK], mode)
    return results


def _delete_chunk(ctx: Context, targets: Sequence[Target], mode: str) -> list[Result[None]]:
    calls: NodeCalls[int] = ctx.calls("delete", mode)
    token = ctx.token
    for prefix_hash, positions, suffixes in node_runs(targets):  # a page's shard found once
        shard = ctx.shard(prefix_hash)
        for position, suffix in zip(positions, suffixes):
            calls.item(shard, position, prefix_hash, suffix, token)
    batch = ctx.batch()
    calls.queue(batch)
    replies = batch.execute()
    results: list[Any] = [None] * len(targets)  # each filled by its item's reply
    for position, reply in calls.per_item(replies, part=0):
        key = targets[position][0]
        results[position] = item_result(key, reply)
    intents: list[Intent] = []
    for _, reply in calls.replies(replies):
        if not isinstance(reply, MooncakeRedisError):
            intents += triples(reply[1])
    cascade(ctx, intents)
    return results


def item_result(key: str, reply: object) -> Result[None]:
    """A script's reply for one item: 'OK' or a refusal."""
    if reply == "OK":  # the usual reply first (an error never equals it)
        return Result(key)
    if isinstance(reply, MooncakeRedisError):
        return Result(key, error=reply)
    return Result(key, error=from_script_error(str(reply), key=key))
