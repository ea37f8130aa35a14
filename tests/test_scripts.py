"""Script rules: one shard tag per call (checked with Redis Cluster's own slot function),
documented headers, and Batch's guard against cross-slot calls."""

from __future__ import annotations

import re

import pytest
from helpers import page
from redis.crc import key_slot

from mooncake_redis import Index
from mooncake_redis.batch import Batch, CrossSlotCall
from mooncake_redis.fsck import check
from mooncake_redis.scripts import SCRIPT_NAMES, read_lua


def record_script_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []
    original = Batch.call

    def recording_call(self, script, keys, args, **options):  # type: ignore[no-untyped-def]
        calls.append((script.name, list(keys)))
        return original(self, script, keys, args, **options)

    monkeypatch.setattr(Batch, "call", recording_call)
    return calls


def exercise_every_script(index: Index) -> None:
    a, b, c = page("a"), page("b"), page("c")
    index.put_start(f"{a}_0_k", 10)
    index.put_end(f"{a}_0_k")
    index.put_start(f"{b}_0_k", 10, parent_block_hash=a)
    index.put_start(f"{c}_0_k", 10, parent_block_hash=b)
    index.batch_put_start([(f"{b}_1_k", 1, a), (f"{c}_1_k", 1, b), ("plain", 1, None)])
    index.register_radix_tree_node(c, b, [f"{c}_0_k"])
    index.put_end(f"{b}_0_k")
    index.get(f"{b}_0_k")
    index.put_revoke(f"{c}_0_k")
    index.remove(f"{b}_0_k", force=True)
    index.batch_remove([f"{a}_0_k", "plain"], force=True)
    index.set_config(lease_ttl_ms=0)
    index.put_end(f"{c}_1_k")
    index.put_end(f"{b}_1_k")
    index.evict(target_ratio=0)  # evict_leaves, lock_token
    index.set_config(enable_radix_tree=False)
    index.put_start("outside-the-tree", 1)
    index.put_end("outside-the-tree")
    index.evict(target_ratio=0)  # delete_objects in evict mode
    index.set_config(enable_radix_tree=True)
    index.put_start(f"{a}_2_k", 5)
    index.client.hset(index.schema.node_keys(a).node, "bytes", 1)
    index.client.hset(index.schema.shard_keys(a[:2]).stats, "objects", 9)
    index.client.incrby(index.schema.usage, 3)
    assert check(index, repair=True).repaired  # recompute_node, recount_shard, set_usage
    index.remove_all(force=True)


def test_every_script_call_touches_one_cluster_slot(index: Index, monkeypatch) -> None:
    calls = record_script_calls(monkeypatch)
    exercise_every_script(index)
    assert {name for name, _ in calls} == set(SCRIPT_NAMES)
    for name, keys in calls:
        slots = {key_slot(k.encode()) for k in keys}
        assert len(slots) == 1, f"{name} touches slots {slots} with keys {keys}"


def test_a_call_with_keys_of_two_tags_is_refused_before_sending(index: Index) -> None:
    batch = index.batch()
    with pytest.raises(CrossSlotCall):
        batch.call(index.scripts.all[0], ["t:{00}:x", "t:{01}:y"], [])
    assert len(batch) == 0


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_documents_its_interface(name: str) -> None:
    header = read_lua(name).split("\n\n")[0]
    for part in ("KEYS:", "ARGV:", "Returns:"):
        assert part in header, f"{name}.lua header lacks {part}"
    body = read_lua(name)
    assert not re.search(r"redis\.call\([^)]*\.\.", body), f"{name} builds a key name"
