"""fsck finds every kind of corruption we can make by hand, and --repair fixes it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from helpers import page

from mooncake_redis import Index
from mooncake_redis.fsck import check

A, B, C = page("A"), page("B"), page("C")


def build(index: Index) -> None:
    for prefix_hash, parent in ((A, None), (B, A), (C, B)):
        index.put_start(f"{prefix_hash}_0_k", 10, parent_block_hash=parent)
        index.put_end(f"{prefix_hash}_0_k")


def keys(index: Index, prefix_hash: str):  # type: ignore[no-untyped-def]
    return index.schema.node_keys(prefix_hash)


CORRUPTIONS: dict[str, Callable[[Index], None]] = {
    # a crash between link and write: the parent lists a child that never got written
    "dangling_child": lambda ix: ix.client.sadd(keys(ix, C).children, page("never")),
    "parent_does_not_list_child": lambda ix: ix.client.srem(keys(ix, A).children, B),
    "parent_missing": lambda ix: ix.client.hset(keys(ix, C).node, "parent", page("gone")) and
    ix.client.srem(keys(ix, B).children, C),
    "node_counter": lambda ix: ix.client.hset(keys(ix, B).node, "bytes", 999),
    "leaf_index": lambda ix: ix.client.zrem(ix.schema.shard_keys(C[:2]).leaves, C),
    "registered_key_missing": lambda ix: ix.client.delete(ix.schema.object_key(f"{C}_0_k", C)),
    "usage_counter": lambda ix: ix.client.incrby(ix.schema.usage, 7),
    "empty_node": lambda ix: ix.client.hset(keys(ix, page("empty")).node, "created_ms", 1) and
    ix.client.sadd(ix.schema.shard_keys(page("empty")[:2]).nodes, page("empty")),
    "object_unregistered": lambda ix: ix.client.zrem(keys(ix, A).keys, f"{A}_0_k"),
    "shard_stats": lambda ix: ix.client.hset(ix.schema.shard_keys(A[:2]).stats, "objects", 5),
    "object_score": lambda ix: ix.client.zadd(ix.schema.shard_keys(B[:2]).objects,
                                              {f"{B}_0_k": 1}),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_fsck_finds_and_repairs(index: Index, kind: str) -> None:
    build(index)
    assert check(index).clean
    CORRUPTIONS[kind](index)
    found = check(index)
    assert kind in found.counts, found.problems
    repaired = check(index, repair=True)
    assert repaired.repaired, repaired.problems
    after = check(index)
    assert after.clean, after.problems


def test_a_cycle_is_reported(index: Index) -> None:
    build(index)
    index.client.hset(keys(index, A).node, "parent", C)
    index.client.sadd(keys(index, C).children, A)
    assert "cycle" in check(index).counts


def test_fsck_can_run_on_some_shards_only(index: Index) -> None:
    build(index)
    index.client.hset(keys(index, B).node, "bytes", 999)
    assert check(index, shards=[A[:2]]).clean
    assert "node_counter" in check(index, shards=[B[:2]]).counts
    assert check(index, shards=[B[:2]], repair=True).repaired
    assert check(index).clean


def test_the_fsck_command_repairs_and_reports(redis_url: str, capsys) -> None:
    from mooncake_redis.cli import main

    index = Index.from_url(redis_url, namespace="fsck-cli")
    build(index)
    common = ["--url", redis_url, "--namespace", "fsck-cli"]
    assert main([*common, "fsck", "--quiet"]) == 0 and "clean" in capsys.readouterr().out
    index.client.sadd(keys(index, C).children, page("never"))
    assert main([*common, "fsck", "--quiet"]) == 1
    assert "dangling_child: 1" in capsys.readouterr().out
    assert main([*common, "fsck", "--quiet", "--repair"]) == 0
    assert "repaired dangling_child: 1" in capsys.readouterr().out
    assert check(index).clean
