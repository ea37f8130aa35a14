"""fsck finds every kind of corruption we can make by hand, and --repair fixes it in one run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from helpers import other_shard, page

from mooncake_redis import Index
from mooncake_redis.operations.fsck import check
from mooncake_redis.tree.links import add_link

A, B, C, GONE = page("A"), page("B"), page("C"), page("gone")


def build(index: Index) -> None:
    for prefix_hash, parent in ((A, None), (B, A), (C, B)):
        index.put_start(f"{prefix_hash}_0_k", 10, parent_block_hash=parent)
        index.put_end(f"{prefix_hash}_0_k")
    index.close()


def node(index: Index, prefix_hash: str) -> str:
    return index.ctx.schema.node(prefix_hash)


def shard(index: Index, prefix_hash: str):  # type: ignore[no-untyped-def]
    return index.ctx.schema.shard_keys(index.ctx.shard(prefix_hash))


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


def plant_node(ix: Index, key: str, fields: dict[str, object]) -> None:
    ix.client.hset(key, mapping=fields)


def replaced(ix: Index, key: str, write: Callable[[str], object]) -> None:
    ix.client.delete(key)
    write(key)


Plant = Callable[[Index], object]
D = page("D")
PLANTED: dict[str, tuple[str, Plant]] = {
    # another type at a node key: every script of its shard would fail on it
    "a string at a node key": ("key_type", lambda ix: ix.client.set(node(ix, D), "x")),
    "a list at a node key": ("key_type", lambda ix: ix.client.rpush(node(ix, D), "x")),
    "a set at a node key": ("key_type", lambda ix: ix.client.sadd(node(ix, D), "x")),
    "a zset at a node key": ("key_type", lambda ix: ix.client.zadd(node(ix, D), {"x": 1})),
    "a stream at a node key": ("key_type", lambda ix: ix.client.xadd(node(ix, D), {"x": 1})),
    "a string in place of a node of the tree": (
        "key_type", lambda ix: replaced(ix, node(ix, C), lambda k: ix.client.set(k, "x"))),
    # the same for the shard's own keys
    **{f"a string at a shard's {name}": (
        "key_type", lambda ix, name=name: replaced(ix, getattr(shard(ix, C), name),
                                                   lambda k: ix.client.set(k, "x")))
       for name in ("stats", "leaves", "soft_leaves", "pending", "fences", "outbox", "events")},
    # a node hash under another shard's tag: no client can reach it
    "a node under another shard's tag": ("node_misplaced", lambda ix: plant_node(
        ix, f"{ix.namespace}:{{{other_shard(D)}}}:n:{D}", {"o:_0_k": "1c,10,0,0,tok", "no": 1})),
    "a copy of a node under another shard's tag": ("node_misplaced", lambda ix: plant_node(
        ix, f"{ix.namespace}:{{{other_shard(C)}}}:n:{C}", ix.client.hgetall(node(ix, C)))),
    # object values no version writes
    "a 400-digit object size": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", f"1c,{'9' * 400},0,0,tok")),
    "a size that is no number": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", "1c,abc,0,0,tok")),
    "a 400-digit time": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", f"1c,5,{'9' * 400},0,tok")),
    "pins past hard and soft": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", "1c,5,0,9,tok")),
    "an escaped segment name": ("node_counter", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", "1c,5,0,0,tok|seg%2Cx,loc,m")),
    "a replica without a medium": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", "1c,5,0,0,tok|seg,loc")),
    "a value that is no object": ("object_value", lambda ix: ix.client.hset(
        node(ix, C), "o:_1_k", "garbage")),
    # link epochs no script writes (Lua reads 1e999 and 400 digits as inf)
    "a child epoch abc": ("epoch_format", lambda ix: ix.client.hset(node(ix, A), B, "abc")),
    "a child epoch 1e999": ("epoch_format", lambda ix: ix.client.hset(node(ix, A), B, "1e999")),
    "a 400-digit child epoch": ("epoch_format",
                                lambda ix: ix.client.hset(node(ix, A), B, "9" * 400)),
    "pe=1e308": ("epoch_format", lambda ix: ix.client.hset(node(ix, B), "pe", "1e308")),
    "pe=abc": ("epoch_format", lambda ix: ix.client.hset(node(ix, B), "pe", "abc")),
    # parents that are not so
    "a node its own parent": ("cycle", lambda ix: ix.client.hset(node(ix, B), "p", B)),
    "a parent with a | in it": ("parent_does_not_list_child",
                                lambda ix: ix.client.hset(node(ix, B), "p", "x|y")),
    "an empty parent": ("dangling_child", lambda ix: ix.client.hset(node(ix, B), "p", "")),
    "a shell's batch marker on a filled node": (
        "dangling_child", lambda ix: ix.client.hset(node(ix, B), "p", "?batch")),
    # counters that lie or are no numbers
    "counters that are no numbers": ("node_counter", lambda ix: ix.client.hset(
        node(ix, B), mapping={"nc": "x", "no": "y", "b": "1e999", "lm": "-inf"})),
    "shard stats that are no numbers": ("shard_stats", lambda ix: ix.client.hset(
        shard(ix, A).stats, mapping={"used_bytes": "x", "nodes": "1e999"})),
    "a write counter that is no number": ("shard_stats", lambda ix: ix.client.hset(
        shard(ix, A).stats, "writes", "q")),
    "a link counter that is no number": ("shard_stats", lambda ix: ix.client.hset(
        shard(ix, A).stats, "links", "q")),
    "bytes on a segment that are no number": ("shard_stats", lambda ix: ix.client.hset(
        shard(ix, A).stats, "su:ssd", "q")),
    "a fence nobody raised": ("shard_stats",
                              lambda ix: ix.client.zadd(shard(ix, B).fences, {"junk": 1e300})),
    "a leaf index entry that is no node": (
        "leaf_index_stale", lambda ix: ix.client.zadd(shard(ix, A).leaves, {"junk": 1})),
    "a leaf scored -inf": ("leaf_index",
                           lambda ix: ix.client.zadd(shard(ix, C).leaves, {C: float("-inf")})),
    "a dangling child that is no digest": ("dangling_child", lambda ix: (
        ix.client.hset(node(ix, C), "c:weird", 1), ix.client.hincrby(node(ix, C), "nc", 1))),
    # link entries that cannot stand for a link
    "a pending entry that is no link": (
        "link_entry", lambda ix: ix.client.zadd(shard(ix, A).pending, {"junk": 0})),
    "an unlink intent in another shard's outbox": (
        "link_entry", lambda ix: ix.client.zadd(
            f"{ix.namespace}:{{{other_shard(C)}}}:outbox", {f"{C}|{B}|5": 0})),
}


ON_EVERY_BACKEND = ("a string at a node key", "a string at a shard's stats",
                    "a node under another shard's tag", "a 400-digit object size",
                    "a child epoch 1e999")
"""Cases whose repair routes by key (DEL, TYPE, scrub): on the cluster and fakeredis too;
the rest on real Redis, the authority, to keep the suite short."""


@pytest.mark.parametrize("backend, case", [
    *(("redis", case) for case in sorted(PLANTED)),
    *((backend, case) for backend in ("cluster", "fakeredis") for case in ON_EVERY_BACKEND)])
def test_fsck_finds_what_a_namespace_writer_plants_and_one_repair_mends_it(
        index: Index, backend: str, case: str) -> None:
    kind, plant = PLANTED[case]
    build(index)
    assert check(index.ctx).clean
    plant(index)
    found = check(index.ctx)
    assert kind in found.counts, found.problems
    repaired = check(index.ctx, repair=True)
    assert repaired.repaired or repaired.resolver.malformed, repaired.problems
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
    assert check(index.ctx, shards=[index.ctx.shard(A)]).clean
    assert "node_counter" in check(index.ctx, shards=[index.ctx.shard(B)]).counts
    assert check(index.ctx, shards=[index.ctx.shard(B)], repair=True).repaired
    assert check(index.ctx).clean


def test_repair_settles_leftovers_of_a_crashed_writer_in_one_run(index: Index) -> None:
    """A writer that died after step 1 of a chain of links leaves shells listing children
    that never came, and pending entries: one repair run removes the whole chain."""
    build(index)
    chain = [page(f"crashed-{i}") for i in range(12)]
    links = index.ctx.calls("link", "crashed-batch")
    for child, parent in zip(chain[1:], chain):
        add_link(links, index.ctx, parent, child, index.ctx.epoch())
    batch = index.ctx.batch()
    links.queue(batch)
    batch.execute()
    assert index.usage().nodes == 3 + 11  # the shells
    repaired = check(index.ctx, repair=True)
    assert repaired.resolver.dropped == 11, repaired.resolver
    assert index.usage().nodes == 3 and check(index.ctx).clean


def test_junk_in_a_shards_stats_never_stops_a_write_half_way(index: Index) -> None:
    """Scripts are not rolled back: a HINCRBY on a junk stats value used to fail after the
    script's node writes (an eviction evicted, then failed). Stats are derived (fsck
    recounts them), so the scripts take junk as a wrong count instead; fsck reports it and
    one repair mends it, node junk and all."""
    build(index)
    stats = shard(index, C).stats
    index.client.hset(stats, mapping={"writes": "q", "links": "?"})
    index.client.hset(node(index, B), "nc", "y")  # node junk too
    report = index.evict(target_ratio=0)
    assert report.objects == 3, report
    assert all(index.object_info(f"{h}_0_k") is None for h in (A, B, C))
    found = check(index.ctx)
    assert "shard_stats" in found.counts, found.problems
    repaired = check(index.ctx, repair=True)  # neither raises nor leaves junk
    assert repaired.repaired, repaired.problems
    after = check(index.ctx)
    assert after.clean, after.problems
    values = index.client.hgetall(stats)
    assert all(v.lstrip("-").isdigit() for f, v in values.items() if f != "gen"), values


def test_the_first_repair_mends_stats_and_node_junk_together(index: Index) -> None:
    """Junk stats beside node damage in the same shard (a dangling child, whose mending
    unlinks it there, and counters that are no numbers): one repair leaves it clean."""
    build(index)
    index.client.hset(shard(index, C).stats, "writes", "q")
    CORRUPTIONS["dangling_child"](index)  # C lists a child that does not exist
    index.client.hset(node(index, B), mapping={"nc": "x", "b": "y"})
    repaired = check(index.ctx, repair=True)
    assert repaired.repaired, repaired.problems
    after = check(index.ctx)
    assert after.clean, after.problems
