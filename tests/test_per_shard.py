"""Context.per_shard, the one per-shard round trip: each shard's replies gathered in the
order they were queued, on every backend."""

from __future__ import annotations

import pytest

from mooncake_redis import Index, MooncakeRedisError


def test_replies_are_gathered_per_shard_in_the_order_queued(index: Index) -> None:
    ctx = index.ctx
    for shard in ctx.all_shards():
        index.client.hset(ctx.schema.shard_keys(shard).stats, mapping={"a": shard, "b": 1})
    replies = ctx.per_shard(
        lambda batch, shard: batch.command("HGET", ctx.schema.shard_keys(shard).stats, "a"),
        lambda batch, shard: (batch.command("HGET", ctx.schema.shard_keys(shard).stats, "b"),
                              batch.command("HGET", ctx.schema.shard_keys(shard).stats, "c")))
    assert replies == [(shard, [shard, "1", None]) for shard in ctx.all_shards()]


def test_given_shards_are_answered_each_time_they_are_given(index: Index) -> None:
    ctx = index.ctx
    first, second = ctx.all_shards()[:2]
    index.client.hset(ctx.schema.shard_keys(second).stats, "a", "x")
    replies = ctx.per_shard(
        lambda batch, shard: batch.command("HGET", ctx.schema.shard_keys(shard).stats, "a"),
        shards=[second, first, second])
    assert replies == [(second, ["x"]), (first, [None]), (second, ["x"])]
    assert ctx.per_shard(lambda batch, shard: None, shards=[]) == []


def test_errors_stay_in_place_unless_raised(index: Index) -> None:
    ctx = index.ctx
    broken = ctx.all_shards()[1]
    index.client.set(ctx.schema.shard_keys(broken).stats, "not a hash")

    def queue(batch, shard):
        return batch.command("HGET", ctx.schema.shard_keys(shard).stats, "a")

    replies = dict(ctx.per_shard(queue))
    assert isinstance(replies[broken][0], MooncakeRedisError)
    assert all(reply == [None] for shard, reply in replies.items() if shard != broken)
    with pytest.raises(MooncakeRedisError, match="WRONGTYPE"):
        ctx.per_shard(queue, raise_errors=True)
