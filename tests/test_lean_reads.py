"""The executor's lean reply reading (executor.LeanReader): on real Redis, over RESP2 and
RESP3, a batch mixing plain reads, commands with redis-py callbacks, scripts and error
replies answers exactly what redis-py's own parse_response path answers; the read paths
built on it answer the same with it and without it; fakeredis keeps parse_response."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import redis
from helpers import page
from lossy_proxy import LossyProxy
from redis_server import RedisServer

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


def test_lean_reads_answer_what_a_batch_answers_and_fall_back_on_an_error_reply(
        redis_url: str) -> None:
    ctx = context(redis_url, 2)
    node = ctx.schema.node(page("lean-r"))
    ctx.client.hset(node, mapping={"no": "1", "o:_0_k": "1c,1,2,0,t"})
    ctx.client.set("lean:junk-r", "not a hash")
    clean = [("HMGET", node, "no", "np"), ("HKEYS", node), ("HMGET", node, "o:_0_k")]
    batch = ctx.batch()
    batch.reads(clean)
    assert ctx.reads(clean) == batch.execute() == [["1", None], ["no", "o:_0_k"], ["1c,1,2,0,t"]]
    with_error = [clean[0], ("HMGET", "lean:junk-r", "x"), clean[2]]
    replies = ctx.reads(with_error)  # not clean: sent again through a batch, error in place
    assert replies[0] == ["1", None] and replies[2] == ["1c,1,2,0,t"]
    assert isinstance(replies[1], MooncakeRedisError) and "WRONGTYPE" in str(replies[1])


def test_lean_reads_are_sent_again_when_their_reply_is_lost(redis_server: RedisServer) -> None:
    proxy = LossyProxy(redis_server.port)
    try:
        ctx = context(proxy.url, 2)
        node = ctx.schema.node(page("lean-lost"))
        ctx.client.hset(node, mapping={"no": "2"})
        proxy.lose_reply(0)
        assert ctx.reads([("HMGET", node, "no")] * 3) == [["2"]] * 3
        assert proxy.disarm()  # the reply was lost, and the reads were sent again
    finally:
        proxy.close()


def test_lean_reads_carry_deferred_cleanups_out_first(redis_url: str) -> None:
    ctx = context(redis_url, 2)
    ctx.client.set("lean:deferred", "x")
    ctx.defer("DEL", "lean:deferred")
    node = ctx.schema.node(page("lean-d"))
    assert ctx.reads([("EXISTS", node)]) == [0]
    assert ctx.client.exists("lean:deferred") == 0


def test_a_batch_get_naming_a_node_twice_leases_every_object_once(make_index: Any) -> None:
    index = make_index(probe_extends_lease=True)
    a, b = page("lean-twice-a"), page("lean-twice-b")
    keys = [f"{a}_0_k", f"{b}_0_k", f"{a}_0_v"]  # a's two objects apart: two items of a
    assert all(r.ok for r in index.batch_put_start([(key, 5, None) for key in keys]))
    assert all(r.ok for r in index.batch_put_end(keys))
    infos = [r.unwrap() for r in index.batch_get(keys)]
    assert [info.key for info in infos if info] == keys
    leaves = index.ctx.schema.shard_keys(index.ctx.shard(a)).leaves
    assert index.client.zscore(leaves, a) == max(infos[0].lease_ms, infos[2].lease_ms)
    assert index.batch_is_exist([keys[0], keys[1], keys[0], f"{a}_9_v"]) == [True, True, True,
                                                                            False]


def client_id(client: redis.Redis) -> int:
    """The server's id of the connection the executor's pipelines use now."""
    (reply,) = executor.Pipeline.start(client, [("CLIENT", "ID")]).finish()
    return int(reply)


def test_pipelines_keep_their_connection_instead_of_the_pools_round_trip(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context(redis_url, 2)
    node = ctx.schema.node(page("lean-kept"))
    taken = []
    pool = ctx.client.connection_pool
    real_get = pool.get_connection
    monkeypatch.setattr(pool, "get_connection", lambda: taken.append(1) or real_get())
    for _ in range(5):
        assert ctx.reads([("EXISTS", node)]) == [0]
    assert len(taken) == 1 and client_id(ctx.client) == client_id(ctx.client)


def test_a_kept_connection_the_server_closed_is_replaced_before_a_write_is_sent(
        redis_url: str) -> None:
    """`delete` may not be sent twice (not retry-safe): sent on a connection the server
    had closed, its reply would be lost and the outcome unknown; the check before use
    reconnects first, so the removal runs once and is answered."""
    index = Index.from_url(redis_url, namespace="lean-closed")
    key = f"{page('lean-closed')}_0_k"
    index.put_start(key, 10)
    index.put_end(key)
    before = client_id(index.client)
    killer = redis.Redis.from_url(redis_url)
    assert killer.client_kill_filter(_id=before) == 1
    index.remove(key, force=True)
    assert index.batch_is_exist([key]) == [False]
    assert client_id(index.client) != before


PARENT_CTX: Context
"""The parent's context, which a forked child inherits with its kept connection."""


def _reads_in_a_child(node: str, answers: Any) -> None:
    answers.put((client_id(PARENT_CTX.client), PARENT_CTX.reads([("HMGET", node, "no")])))


def test_a_forked_child_never_uses_its_parents_kept_connection(redis_url: str) -> None:
    global PARENT_CTX
    PARENT_CTX = context(redis_url, 2)
    node = PARENT_CTX.schema.node(page("lean-fork"))
    PARENT_CTX.client.hset(node, "no", "3")
    assert PARENT_CTX.reads([("HMGET", node, "no")]) == [["3"]]
    parents = client_id(PARENT_CTX.client)
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    child = fork.Process(target=_reads_in_a_child, args=(node, answers))
    child.start()
    childs, replies = answers.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and replies == [["3"]] and childs != parents
    assert client_id(PARENT_CTX.client) == parents  # the parent's is untouched
    assert PARENT_CTX.reads([("HMGET", node, "no")]) == [["3"]]
