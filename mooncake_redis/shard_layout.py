"""Which shard layout a namespace's keys were written in, read off the keys themselves (DESIGN
v4, item 5): no stored value, lost, planted or changed, can make a client read or write a
namespace under another layout than its keys have.

One-digit tags ("0".."f") are this release's 16 shards; two-digit tags ("00".."ff") are
0.1's, 256 shards before `shard_count` existed and 16 ("00".."0f") after, or any power of
two a caller asked for. The two kinds never name the same key, so the tags of the shards'
stats keys (every shard that was ever written has one) tell which kind a namespace has.
Among two-digit layouts the highest tag bounds the count from below, and every node is in
the shard its hash gives under the true count only: a leaf or two of each shard tell it.
A namespace whose keys fit more than one layout (two-digit tags, so few nodes that none
tells, or keys of both kinds) is opened for reading only, with the stored `shard_count`
breaking the tie where the keys allow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .keys import KeySchema
from .prefix import SHARD_COUNTS, V4_LAYOUT, ShardLayout, layout_for, shard_of

TWO_DIGITS = ShardLayout(256, 2)
"""Every two-digit tag a 0.1 namespace can have (its shard count is at most 256)."""


@dataclass(frozen=True)
class Found:
    """The layout a namespace's keys have, and why writes are refused where they cannot
    tell it ('' when they can)."""

    layout: ShardLayout
    unknown: str = ""


def find_layout(client: Any, namespace: str, stored_count: int | None,
                new_count: int) -> Found:
    """The layout of `namespace`'s keys: one pipeline of EXISTS for the stats key of every
    shard of both kinds, then, for two-digit tags, one of ZRANGE for a leaf of each shard
    found. A namespace with no shard key is new: `new_count` (the stored count, if one
    was set before the first write, else the caller's) makes it."""
    one, two = KeySchema(namespace, V4_LAYOUT), KeySchema(namespace, TWO_DIGITS)
    pipe = client.pipeline(transaction=False)
    for schema in (one, two):
        for shard in schema.shards:
            pipe.exists(schema.shard_keys(shard).stats)
    present = pipe.execute()
    ones = [shard for shard, there in zip(one.shards, present) if there]
    twos = [shard for shard, there in zip(two.shards, present[len(one.shards):]) if there]
    if not ones and not twos:
        return Found(layout_for(stored_count or new_count))
    if ones and not twos:
        return Found(V4_LAYOUT)
    if ones:
        return Found(V4_LAYOUT, unknown=(
            f"namespace {namespace!r} holds keys of two shard layouts (shards {ones[:3]}... "
            f"and {twos[:3]}...): reading follows this release's, writing is refused; keep "
            "one layout (remove_all, or move the nodes of the other), then open it again"))
    counts = two_digit_counts(client, two, twos)
    if len(counts) == 1:
        return Found(ShardLayout(counts[0], 2))
    if stored_count in counts:
        return Found(ShardLayout(stored_count, 2))
    guess = ShardLayout(max(counts) if counts else 256, 2)
    return Found(guess, unknown=(
        f"namespace {namespace!r} has keys of 0.1's two-digit shard layout that fit "
        f"{len(counts)} shard counts ({', '.join(map(str, counts)) or 'none'}): reading "
        f"assumes {guess.shard_count}, writing is refused. Tell it the count it was created "
        f"with (16 since shard_count exists, 256 before): redis-cli HSET "
        f"{two.settings} shard_count N"))


def two_digit_counts(client: Any, schema: KeySchema, shards: Sequence[str]) -> list[int]:
    """The shard counts a 0.1 namespace's keys fit: above its highest tag, and under which
    every leaf sampled (the first of each shard's leaf indexes) is in the shard it sits."""
    top = max(int(shard, 16) for shard in shards)
    counts = [count for count in SHARD_COUNTS if count > top]
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        keys = schema.shard_keys(shard)
        pipe.zrange(keys.leaves, 0, 0)
        pipe.zrange(keys.soft_leaves, 0, 0)
    replies = pipe.execute()
    for position, shard in enumerate(shards):
        for member in (*replies[2 * position], *replies[2 * position + 1]):
            counts = [count for count in counts if shard_of(member, count) == shard]
    return counts
