"""Redis at maxmemory with noeviction: each call that grows the store is refused whole
(StoreFull, nothing half-written; a batch over several shards is admitted call by call,
its results say which items), the scripts that free memory (eviction, removal, unlink, the
resolver) still run, and free: at maxmemory they drop the events streams' older entries
before adding theirs, so the store can free itself and take puts again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from helpers import assert_consistent, page
from redis_server import RedisServer

from mooncake_redis import Index, StoreFull
from mooncake_redis.operations.fsck import check


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    server = RedisServer("--maxmemory-policy", "noeviction")
    client = redis.Redis(port=server.port)
    client.config_set("maxmemory", client.info("memory")["used_memory"] + 3 * 1024 * 1024)
    yield server
    server.stop()


def fill(index: Index, start: int, pages: int = 1) -> int:
    """put_start/put_end chains (`pages` of them side by side, in different shards, two
    objects each) until Redis refuses; returns the next page number. Each shard's call is
    admitted or refused whole: both objects of a page share their fate."""
    number = start
    while True:
        items = [(f"{page((number, chain))}_{rank}_k", 1 << 20,
                  page((number - 1, chain)) if number % 50 else None)
                 for chain in range(pages) for rank in range(2)]
        results = index.batch_put_start(items)
        assert all(r.ok or isinstance(r.error, StoreFull) for r in results), results
        for first, second in zip(results[::2], results[1::2]):
            assert first.ok == second.ok, "a call was half admitted at maxmemory"
        admitted = [r.key for r in results if r.ok]
        if admitted:
            index.batch_put_end(admitted)
        if len(admitted) < len(items):
            refused = [r.key for r in results if not r.ok]
            assert not any(index.batch_is_exist(refused)), "a refused item was written"
            return number
        number += 1


def at_maxmemory(server: RedisServer) -> bool:
    memory = redis.Redis(port=server.port).info("memory")
    return memory["used_memory"] >= memory["maxmemory"]


def test_the_store_fills_frees_itself_and_takes_puts_again(full_redis: RedisServer) -> None:
    # A short events stream: its entries (kept, up to events_max_len per shard, for the data
    # plane) would otherwise take most of this test's small memory budget.
    index = Index.from_url(full_redis.url, namespace="full", lease_ttl_ms=0, events_max_len=10)
    stopped_at = fill(index, 0)
    assert stopped_at > 100
    index.close()
    assert check(index.ctx).clean  # the refusal left nothing half-written
    used_before = index.usage().used_bytes
    report = index.evict(target_ratio=0)  # eviction runs at maxmemory
    assert report.objects > 0 and index.usage().used_bytes < used_before
    index.remove_all(force=True)  # so does removal
    assert index.usage().objects == 0
    assert fill(index, stopped_at + 1) > stopped_at + 100  # and puts are admitted again
    assert_consistent(index)


@pytest.mark.parametrize("freeing", ["removals by the refused writer", "another's eviction job"])
def test_freeing_at_maxmemory_makes_room_for_a_small_put(full_redis: RedisServer,
                                                         freeing: str) -> None:
    """With events on at their default cap (the streams can hold more than the store
    frees), removals made Redis grow: their events filled the streams faster than the
    nodes they deleted shrank (removing all 4,674 objects left no room for a 10-byte put).
    At maxmemory every freeing call now drops its stream's older entries first."""
    index = Index.from_url(full_redis.url, namespace="full", lease_ttl_ms=0,
                           capacity_bytes=1 << 50)
    stopped_at = fill(index, 0, pages=4)
    assert stopped_at > 100
    padding = 0  # a refused call may leave a little room: use it up with tiny puts
    while index.batch_put_start([(f"{page(('pad', padding))}_0_k", 1, None)])[0].ok:
        padding += 1
    small = f"{page('small')}_0_k"
    with pytest.raises(StoreFull, match="maxmemory"):
        index.put_start(small, 10)
    if freeing == "another's eviction job":  # a process that never saw a refusal
        other = Index.from_url(full_redis.url, namespace="full")
        assert other.evict(target_ratio=0).objects > 0
    else:  # the tails of two of the four chains: 404 objects of about 9,000
        index.batch_remove([f"{page((number, chain))}_{rank}_k"
                            for number in range(stopped_at - 100, stopped_at + 1)
                            for chain in range(2) for rank in range(2)], force=True)
    index.put_start(small, 10)
    assert_consistent(index)


def test_set_config_at_maxmemory_raises_store_full(full_redis: RedisServer) -> None:
    index = Index.from_url(full_redis.url, namespace="full")
    index.put_start(f"{page(0)}_0_k", 1)
    client = redis.Redis(port=full_redis.port)
    client.config_set("maxmemory", 1)  # below what Redis holds: every growing write refused
    try:
        with pytest.raises(StoreFull, match=r"(?s)refused to store settings .*high_watermark"
                           r".*raise Redis's maxmemory"):
            index.set_config(high_watermark=0.8)
    finally:
        client.config_set("maxmemory", 0)
    assert index.set_config(high_watermark=0.8).high_watermark == 0.8
