"""fsck finds every kind of corruption we can make by hand, and --repair fixes it in one run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from helpers import page

from mooncake_redis import Index
from mooncake_redis.fsck import check

A, B, C, GONE = page("A"), page("B"), page("C"), page("gone")


def build(index: Index) -> None:
    for prefix_hash, parent in ((A, None), (B, A), (C, B)):
        index.put_start(f"{prefix_hash}_0_k", 10, parent_block_hash=parent)
        index.put_end(f"{prefix_hash}_0_k")
    index.close()


def node(index: Index, prefix_hash: str) -> str:
    return index.ctx.schema.node(prefix_hash)


def shard(index: Index, prefix_hash: str):  # type: ignore[no-untyped-def]
    return index.ctx.schema.shard_keys(prefix_hash[:2])


CORRUPTIONS: dict[str, Callable[[Index], object]] = {
    # a parent listing a child that never was (with the counter that goes with it)
    "dangling_child": lambda ix: (ix.client.hset(node(ix, C), GONE, 1),
                                  ix.client.hincrby(node(ix, C), "nc", 1)),
    # the child names its parent, the parent does not list it: invariant S broken
    "parent_does_not_list_child": lambda ix: (ix.client.hdel(node(ix, A), B),
                                              ix.client.hincrby(node(ix, A), "nc", -1)),
    "node_counter": lambda ix: ix.client.hset(node(ix, B), "b", 999),
    "leaf_index": lambda ix: ix.client.zrem(shard(ix, C).leaves, C),
    "leaf_index_stale": lambda ix: ix.client.zadd(shard(ix, GONE).leaves, {GONE: 1}),
    "empty_node": lambda ix: ix.client.hset(node(ix, GONE), "nc", 0),
    "shard_stats": lambda ix: ix.client.hset(shard(ix, A).stats, "objects", 5),
    "link_epoch": lambda ix: ix.client.hset(node(ix, A), B, 12345),
    "cycle": lambda ix: (ix.client.hset(node(ix, A), mapping={"p": C, "pe": 1}),
                         ix.client.hset(node(ix, C), A, 1), ix.client.hincrby(node(ix, C), "nc", 1),
                         ix.client.zrem(shard(ix, C).leaves, C)),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_fsck_finds_and_repairs_in_one_run(index: Index, kind: str) -> None:
    build(index)
    assert check(index.ctx).clean
    CORRUPTIONS[kind](index)
    found = check(index.ctx)
    assert kind in found.counts, found.problems
    repaired = check(index.ctx, repair=True)
    assert repaired.repaired, repaired.problems
    after = check(index.ctx)
    assert after.clean, after.problems


def test_an_unreadable_object_value_is_reported_and_left_alone(index: Index) -> None:
    """A value this version cannot read may be a newer format: fsck names it, keeps it."""
    build(index)
    index.client.hset(node(index, A), "o:_9_k", "2x,unknown-format")
    found = check(index.ctx, repair=True)
    assert "object_format" in found.counts
    assert index.client.hget(node(index, A), "o:_9_k") == "2x,unknown-format"


def test_fsck_without_repair_writes_nothing(index: Index) -> None:
    build(index)
    CORRUPTIONS["node_counter"](index)
    before = {k: index.client.dump(k) for k in index.client.keys(f"{index.namespace}:*")}
    check(index.ctx)
    after = {k: index.client.dump(k) for k in index.client.keys(f"{index.namespace}:*")}
    assert before == after


def test_fsck_can_run_on_some_shards_only(index: Index) -> None:
    build(index)
    index.client.hset(node(index, B), "b", 999)
    assert check(index.ctx, shards=[A[:2]]).clean
    assert "node_counter" in check(index.ctx, shards=[B[:2]]).counts
    assert check(index.ctx, shards=[B[:2]], repair=True).repaired
    assert check(index.ctx).clean


def test_repair_settles_leftovers_of_a_crashed_writer_in_one_run(index: Index) -> None:
    """A writer that died after step 1 of a chain of links leaves shells listing children
    that never came, and pending entries: one repair run removes the whole chain."""
    build(index)
    chain = [page(f"crashed-{i}") for i in range(12)]
    links = index.ctx.calls("link", "crashed-batch")
    for child, parent in zip(chain[1:], chain):
        call = links.add(index.ctx.shard(parent), None)
        call.item(call.node(parent), parent, child, index.ctx.epoch())
    batch = index.ctx.batch()
    links.queue(batch)
    batch.execute()
    assert index.usage().nodes == 3 + 11  # the shells
    repaired = check(index.ctx, repair=True)
    assert repaired.resolver.dropped == 11, repaired.resolver
    assert index.usage().nodes == 3 and check(index.ctx).clean
