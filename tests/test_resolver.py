"""The resolver over entries a namespace writer planted: every malformed or misplaced pending
or outbox entry is dropped from the key it was read from and counted, and every run is
bounded in time as well as in entries."""

from __future__ import annotations

import pytest
from helpers import assert_consistent, build_small_tree, default_shard, other_shard, page
from interleaving import invariant_s

from mooncake_redis import Index
from mooncake_redis.operations.fsck import check
from mooncake_redis.tree.links import outbox_member, pending_member, resolve

A, B = page("resolver-a"), page("resolver-b")


def planted(index: Index) -> dict[str, list[str]]:
    """Entries that cannot stand for a link where they are: key -> members."""
    schema = index.ctx.schema
    non_hex = "not-a-digest"
    here = schema.shard_keys(default_shard(A))
    return {
        # well-formed, in another shard's set than its owner's (the child of an unlink
        # intent, the parent of a pending link)
        schema.shard_keys(other_shard(A)).outbox: [outbox_member(A, B, 5)],
        schema.shard_keys(other_shard(B)).pending: [pending_member(B, A, 5)],
        # a child that is not a digest, in a shard its blake3 is not
        schema.shard_keys(other_shard(non_hex)).outbox: [outbox_member(non_hex, B, 7)],
        # malformed: not three parts, empty parts, epochs that are no epoch
        here.outbox: [f"{A}|{B}", f"{A}||5", f"{A}|{B}|abc", f"{A}|{B}|1e999",
                      f"{A}|{B}|{'9' * 400}", f"{A}|{B}|-5", "|||"],
        here.pending: [f"{A}|{B}|{'9' * 30}", f"{A}|{B}|1.5", f"{A}|{B}|\u0663", "x"],
    }


def test_planted_entries_are_dropped_from_where_they_were_read_and_counted(
        index: Index) -> None:
    build_small_tree(index)
    entries = planted(index)
    for key, members in entries.items():
        index.client.zadd(key, dict.fromkeys(members, 1))
    # a budget a livelocked resolver spends in a few passes, where a correct one needs one
    report = resolve(index.ctx, grace_ms=0, budget=200)
    for key in entries:
        assert index.client.zrange(key, 0, -1) == [], key
    assert report.malformed == sum(len(m) for m in entries.values()), report
    assert not report.unfinished and not report.kept and not report.dropped
    assert_consistent(index)


def test_a_pending_epoch_past_any_clock_never_reaches_a_node(index: Index) -> None:
    """A 400-digit epoch is inf to Lua: kept, it would set the child's pe to inf."""
    index.put_start(f"{A}_0_k", 1)
    index.put_start(f"{B}_0_k", 1, parent_block_hash=A)
    key = index.ctx.schema.shard_keys(default_shard(A)).pending
    index.client.zadd(key, {pending_member(A, B, "9" * 400): 1})
    report = resolve(index.ctx, grace_ms=0, budget=200)
    assert report.malformed == 1
    assert index.client.hget(index.ctx.schema.node(B), "pe") != "inf"
    assert_consistent(index)


@pytest.mark.parametrize("backend", ["redis"])
def test_every_run_is_bounded_in_time(index: Index, backend: str) -> None:
    """With no time left after the first pass, a run stops there and says so; the next
    run finishes the work. (Time limit 0: the bound is hit after one pass, whatever the
    machine's speed.)"""
    index.put_start(f"{A}_0_k", 1)
    links = {pending_member(A, page(f"never-{i}"), 10 + i): 1
             for i in range(3 * 64)}  # more than one pass reads from one shard
    index.client.zadd(index.ctx.schema.shard_keys(default_shard(A)).pending, links)
    first = resolve(index.ctx, grace_ms=0, time_limit_s=0)
    assert first.unfinished and 0 < first.dropped < len(links), first
    second = resolve(index.ctx, grace_ms=0)
    assert not second.unfinished and first.dropped + second.dropped == len(links), second
    assert_consistent(index)


def test_a_planted_unlink_intent_for_a_live_link_is_dropped_not_run(index: Index) -> None:
    """A well-formed outbox intent "child|parent|epoch" at the link's own epoch, though no
    deleter wrote it: the child lives and names the parent, so the resolver drops the
    entry and leaves the link (it used to unlink the parent's side: invariant S broken)."""
    index.put(f"{A}_0_k", 1)
    index.put(f"{B}_0_k", 1, parent_block_hash=A)
    index.resolve(grace_ms=0)
    epoch = index.client.hget(index.ctx.schema.node(B), "pe")
    outbox = index.ctx.schema.shard_keys(index.ctx.shard(B)).outbox
    index.client.zadd(outbox, {outbox_member(B, A, epoch): 1})
    report = resolve(index.ctx, grace_ms=0)
    index.ctx.flush()
    assert invariant_s(index) == []
    assert report.intents == 0 and report.malformed == 1, report
    assert index.get_node(A).children == [B]  # type: ignore[union-attr]
    assert index.client.zcard(outbox) == 0
    assert check(index.ctx).clean
