"""Redis at maxmemory with noeviction: writes that grow the store are refused whole
(StoreFull, nothing half-written), and the scripts that free memory (eviction, removal,
unlink, the resolver) still run, so the store can free itself and take puts again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from helpers import assert_consistent, page
from redis_server import RedisServer

from mooncake_redis import Index, StoreFull
from mooncake_redis.fsck import check


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    server = RedisServer("--maxmemory-policy", "noeviction")
    client = redis.Redis(port=server.port)
    client.config_set("maxmemory", client.info("memory")["used_memory"] + 3 * 1024 * 1024)
    yield server
    server.stop()


def fill(index: Index, start: int) -> int:
    """put_start/put_end chains until Redis refuses; returns the next page number."""
    number = start
    while True:
        parent = page(number - 1) if number % 50 else None
        items = [(f"{page(number)}_{rank}_k", 1 << 20, parent) for rank in range(2)]
        results = index.batch_put_start(items)
        if any(isinstance(r.error, StoreFull) for r in results):
            assert not any(r.ok for r in results), "a batch was half admitted at maxmemory"
            return number
        assert all(r.ok for r in results), results
        index.batch_put_end([key for key, _, _ in items])
        number += 1


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
