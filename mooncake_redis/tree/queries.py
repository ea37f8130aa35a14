"""Read-only queries of the radix tree: nodes, keys by prefix, subtrees, match_prefix.
None of them writes, so they work for a read-only Redis user."""

from __future__ import annotations

from collections.abc import Sequence

from mooncake_redis.context import Context
from mooncake_redis.models import NodeInfo
from mooncake_redis.values import split_node, to_int

MATCH_PREFIX_PROBE = 32
"""match_prefix reads this many leading pages first, and the rest of the chain only if all
of them matched, so a miss near the start stays cheap."""


def get_node(ctx: Context, prefix_hash: str) -> NodeInfo | None:
    shard = ctx.schema.shard_keys(ctx.shard(prefix_hash))
    batch = ctx.batch()
    batch.command("HGETALL", ctx.schema.node(prefix_hash))
    batch.command("ZSCORE", shard.leaves, prefix_hash)
    batch.command("ZSCORE", shard.soft_leaves, prefix_hash)
    fields, score, soft_score = batch.execute()
    if not fields:
        return None
    node = split_node(fields)
    score = score if score is not None else soft_score
    parent_epoch = node.attributes.get("pe")
    return NodeInfo(prefix_hash=prefix_hash, parent=node.parent,
                    parent_epoch=None if parent_epoch is None else to_int(parent_epoch),
                    children=sorted(node.children),
                    keys=sorted(prefix_hash + suffix for suffix in node.objects),
                    bytes=node.counter("b"), processing=node.counter("np"),
                    soft_pins=node.counter("ns"), hard_pins=node.counter("nh"),
                    eviction_score=None if score is None else float(score))


def keys_by_prefix(ctx: Context, prefix_hash: str) -> list[str]:
    """The object keys of one prefix: one HKEYS of its node, however big the store."""
    fields = ctx.read("HKEYS", ctx.schema.node(prefix_hash))
    return sorted(prefix_hash + f[2:] for f in fields if f.startswith("o:"))


def subtree_keys(ctx: Context, prefix_hash: str, max_depth: int) -> list[str]:
    """Keys of the node and its descendants down to max_depth levels below it, breadth
    first; one round trip per level."""
    keys: list[str] = []
    seen = {prefix_hash}
    level = [prefix_hash]
    for _ in range(max_depth + 1):
        batch = ctx.batch()
        for node_hash in level:
            batch.command("HGETALL", ctx.schema.node(node_hash))
        next_level: list[str] = []
        for node_hash, fields in zip(level, batch.execute()):
            node = split_node(fields)
            keys += sorted(node_hash + suffix for suffix in node.objects)
            fresh = sorted(set(node.children) - seen)
            seen.update(fresh)
            next_level += fresh
        level = next_level
        if not level:
            break
    return keys


def match_prefix(ctx: Context, chain: Sequence[str]) -> int:
    """How many leading pages of the chain are usable: each has objects and none of them
    is processing. One HMGET per page; the first MATCH_PREFIX_PROBE pages in one round
    trip, the rest in a second only if they all matched."""
    node = ctx.schema.node
    matched = 0
    for start, end in ((0, MATCH_PREFIX_PROBE), (MATCH_PREFIX_PROBE, len(chain))):
        if start >= end:
            break
        for objects, processing in ctx.reads([("HMGET", node(prefix_hash), "no", "np")
                                              for prefix_hash in chain[start:end]]):
            if not objects or processing:
                return matched
            matched += 1
    return matched
