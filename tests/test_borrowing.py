"""Admission by borrowing (mooncake_redis/capacity/borrowing.py, lua/lend.lua) on every backend: a
put that fits the namespace's free capacity is admitted whatever its shard's share, a put
that does not is refused and moves nothing, and the keeper gives back limit lost between
a borrower's two steps but never the same bytes twice. Concurrency: the borrowing
scenario of tests/test_interleavings.py."""

from __future__ import annotations

import pytest
from helpers import assert_consistent, page

from mooncake_redis import Index, NoSpace
from mooncake_redis.capacity.admission import lend, read_shards, rebalance

CAPACITY = 10_000
"""The RFC's example: a 10 KB store of 1 KB objects (16 shards: 625 bytes each at first)."""
KB = 1000


def limits(index: Index) -> dict[str, int]:
    share = -(-index.settings.capacity_bytes // index.settings.shard_count)
    return {s.shard: share if s.limit is None else s.limit for s in read_shards(index.ctx)}


def key(name: str) -> str:
    return f"{page(name)}_0_k"


def test_the_rfc_example_admits_until_full_then_eviction_makes_room(make_index) -> None:
    index: Index = make_index(capacity_bytes=CAPACITY, lease_ttl_ms=1)
    chain = [page(f"block {i}") for i in range(6)]  # six 1 KB objects, one chain
    for i, block in enumerate(chain):
        index.put_start(f"{block}_0_k", KB, parent_block_hash=chain[i - 1] if i else None)
        index.put_end(f"{block}_0_k")
    assert index.usage().used_bytes == 6 * KB
    for i in range(4):  # and until full
        index.put_start(key(f"more {i}"), KB)
        index.put_end(key(f"more {i}"))
    assert index.usage().used_bytes == CAPACITY
    assert sum(limits(index).values()) == CAPACITY  # limit moved, never made
    with pytest.raises(NoSpace):
        index.put_start(key("one too many"), KB)
    report = index.evict()  # down to 85%: two objects, leaves first
    assert report.objects == 2 and index.usage().used_bytes == CAPACITY - 2 * KB
    assert index.get_node(chain[0]) is not None  # the chain's root is no leaf: it stays
    index.put_start(key("one too many"), KB)
    assert index.usage().used_bytes == CAPACITY - KB
    assert_consistent(index)


def test_a_put_bigger_than_the_free_capacity_is_refused_and_moves_no_limit(
        make_index) -> None:
    index: Index = make_index(capacity_bytes=CAPACITY)
    index.put_start(key("a"), 4 * KB)
    before = limits(index)
    with pytest.raises(NoSpace):
        index.put_start(key("b"), CAPACITY - 4 * KB + 1)
    assert limits(index) == before and index.usage().used_bytes == 4 * KB
    index.put_start(key("b"), CAPACITY - 4 * KB)  # exactly what is free: admitted
    assert index.usage().used_bytes == CAPACITY


def test_a_borrower_asks_for_every_replica(make_index) -> None:
    index: Index = make_index()
    index.mount_segment("s1", CAPACITY // 2)  # the capacity: the segments' sum
    index.mount_segment("s2", CAPACITY // 2)
    index.put_start(key("twice"), 2 * KB, replicas=[("s1", "a"), ("s2", "b")])
    assert index.usage().used_bytes == 4 * KB  # 2 KB once per replica, borrowed


def take(index: Index, shard: str, amount: int, generation: str = "") -> tuple[int, str]:
    """A borrower's first step alone (as if it died before its give)."""
    batch = index.ctx.batch()
    lend(batch, index.ctx, shard, "take", generation, amount)
    (reply,) = batch.execute()
    return int(reply[0]), str(reply[1])


def give(index: Index, shard: str, amount: int, generation: str) -> int:
    batch = index.ctx.batch()
    lend(batch, index.ctx, shard, "give", generation, amount)
    (reply,) = batch.execute()
    return int(reply)


def test_limit_a_borrower_took_and_never_gave_comes_back_with_the_keeper(
        make_index) -> None:
    index: Index = make_index(capacity_bytes=CAPACITY)
    donor, receiver = index.ctx.all_shards()[:2]
    assert take(index, donor, 10 * KB) == (625, "")  # no more than its spare
    assert sum(limits(index).values()) == CAPACITY - 625  # unused until the keeper
    rebalance(index.ctx)
    assert sum(limits(index).values()) == CAPACITY
    assert set(limits(index).values()) == {625}


def test_a_give_after_a_keeper_read_the_donor_is_refused(make_index) -> None:
    """The keeper counted the taken bytes as lost and gave them back: the borrower's give
    must not add them a second time."""
    index: Index = make_index(capacity_bytes=CAPACITY)
    donor, receiver = index.ctx.all_shards()[:2]
    taken, generation = take(index, donor, 500)
    rebalance(index.ctx)
    assert sum(limits(index).values()) == CAPACITY
    assert give(index, receiver, taken, generation) == 0
    assert sum(limits(index).values()) == CAPACITY
    taken, generation = take(index, donor, 500)  # after the keeper: its generation
    assert give(index, receiver, taken, generation) == 500
    assert sum(limits(index).values()) == CAPACITY


def test_without_the_lock_the_keeper_only_takes_down_to_a_lowered_capacity(
        make_index) -> None:
    index: Index = make_index(capacity_bytes=CAPACITY)
    take(index, index.ctx.all_shards()[0], 100)  # lost by a borrower
    index.client.set(index.ctx.schema.eviction_lock, "another job")
    rebalance(index.ctx)
    assert sum(limits(index).values()) == CAPACITY - 100  # the job's own run gives it back
    index.set_config(capacity_bytes=CAPACITY // 2)  # lowered: applies at once
    assert sum(limits(index).values()) == CAPACITY // 2
    index.client.delete(index.ctx.schema.eviction_lock)
    rebalance(index.ctx)
    assert sum(limits(index).values()) == CAPACITY // 2
    assert set(limits(index).values()) == {CAPACITY // 2 // 16, CAPACITY // 2 // 16 + 1}
