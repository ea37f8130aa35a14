"""The executor's lean reply reading (executor.LeanReader): on real Redis, over RESP2 and
RESP3, a batch mixing plain reads, commands with redis-py callbacks, scripts and error
replies answers exactly what redis-py's own parse_response path answers; the read paths
built on it answer the same with it and without it; fakeredis keeps parse_response."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from helpers import page

from mooncake_redis import Index, executor
from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError


def context(url: str, protocol: int) -> Context:
    client = redis.Redis.from_url(url, decode_responses=True, protocol=protocol)
    return Context.open(client, "lean")


def mixed_batch(ctx: Context) -> list[Any]:
    node = ctx.schema.node(page("lean-a"))
    batch = ctx.batch()
    batch.command("HMGET", node, "no", "np", "absent")
    batch.reads([("HMGET", node, "no"), ("HKEYS", node), ("EXISTS", node)])
    batch.command("HGETALL", node)  # a response callback on RESP2
    batch.command("TIME")  # a callback on both
    batch.reads([("HMGET", "lean:junk", "x")])  # WRONGTYPE: an error reply kept in place
    batch.command("ZSCORE", "lean:zset", "m")
    return batch.execute()


def shape(replies: list[Any]) -> list[Any]:
    """Replies with TIME's (changing) value replaced by its type, errors by their text."""
    shaped: list[Any] = []
    for position, reply in enumerate(replies):
        if position == 5:
            shaped.append(type(reply))
        elif isinstance(reply, Exception):
            shaped.append((type(reply), str(reply)))
        else:
            shaped.append(reply)
    return shaped


@pytest.mark.parametrize("protocol", [2, 3])
def test_lean_replies_equal_redis_py_replies(redis_url: str, protocol: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(redis_url, protocol)
    ctx.client.hset(ctx.schema.node(page("lean-a")), mapping={"no": "2", "o:_0_k": "1c,1,2,0,t"})
    ctx.client.set("lean:junk", "not a hash")
    ctx.client.zadd("lean:zset", {"m": 1.5})
    connection = ctx.client.connection_pool.get_connection()
    try:
        assert executor.LeanReader.of(connection) is not None  # the lean path runs here
    finally:
        ctx.client.connection_pool.release(connection)
    lean = mixed_batch(ctx)
    assert isinstance(lean[6], MooncakeRedisError) and "WRONGTYPE" in str(lean[6])
    monkeypatch.setattr(executor.LeanReader, "of", classmethod(lambda cls, connection: None))
    assert shape(lean) == shape(mixed_batch(ctx))


def test_read_paths_answer_the_same_without_the_lean_reader(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index.from_url(redis_url, namespace="lean-paths")
    chain = [page(f"lean-{n}") for n in range(40)]
    items = [(f"{h}_0_k", 10, chain[n - 1] if n else None) for n, h in enumerate(chain)]
    assert all(r.ok for r in index.batch_put_start(items))
    assert all(r.ok for r in index.batch_put_end([key for key, _, _ in items[:35]]))
    keys = [key for key, _, _ in items] + [f"{chain[0]}_9_v", items[3][0]]

    def answers() -> tuple[Any, ...]:
        return (index.match_prefix(chain), index.match_prefix(chain[:20]),
                index.batch_is_exist(keys), index.get_keys_by_prefix(chain[2]),
                [(r.key, r.error and type(r.error), r.value and r.value.size)
                 for r in index.batch_get(keys[:38])])

    lean = answers()
    assert lean[:2] == (35, 20) and lean[2] == [True] * 35 + [False] * 6 + [True]
    monkeypatch.setattr(executor.LeanReader, "of", classmethod(lambda cls, connection: None))
    assert answers() == lean


def test_the_in_process_store_reads_through_redis_py() -> None:
    index = Index.from_url("memory://lean-reads", namespace="lean")
    connection = index.client.connection_pool.get_connection()
    try:
        assert executor.LeanReader.of(connection) is None
    finally:
        index.client.connection_pool.release(connection)
    index.put_start(f"{page('lean-m')}_0_k", 1)
    index.put_end(f"{page('lean-m')}_0_k")
    assert index.match_prefix([page("lean-m")]) == 1
    assert index.batch_is_exist([f"{page('lean-m')}_0_k"]) == [True]
