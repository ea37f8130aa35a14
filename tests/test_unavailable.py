"""Errors name what really failed: a single Redis that stops answering is RedisUnavailable,
naming the server and the cause, never ClusterUnavailable."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import redis
from clock import joined
from helpers import page
from redis_server import RedisServer

from mooncake_redis import ClusterUnavailable, Index, MooncakeRedisError, RedisUnavailable


def test_a_single_redis_that_is_gone_is_named_as_such() -> None:
    server = RedisServer()
    index = Index.from_url(server.url, namespace="gone", cluster_retries=1,
                           cluster_retry_backoff_ms=1)
    index.put_start(f"{page('before')}_0_k", 1)
    server.stop()
    with pytest.raises(RedisUnavailable) as raised:
        index.put_start(f"{page('after')}_0_k", 1)
    assert not isinstance(raised.value, ClusterUnavailable)
    message = str(raised.value)
    assert f"127.0.0.1:{server.port}" in message and "Cluster" not in message, message
    assert "ConnectionError" in message, message  # the cause, as redis-py gave it


def test_a_connection_lost_while_reloading_scripts_after_noscript_is_a_library_error(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripts were flushed (NOSCRIPT) and the connection drops just as the executor
    loads them again: the NOSCRIPT calls did not run, so they are sent again (after the
    pause) and succeed; if the loads keep failing the call is RedisUnavailable, never
    redis-py's own ConnectionError."""
    index = Index.from_url(redis_url, namespace="reload", cluster_retries=2,
                           cluster_retry_backoff_ms=1)
    index.put(f"{page('before')}_0_k", 1)
    failures = [1]
    load = redis.client.Pipeline.execute

    def dropped(self: redis.client.Pipeline, *args: object, **kwargs: object) -> object:
        if failures[0]:  # the connection goes between the NOSCRIPT reply and the reload
            failures[0] -= 1
            self.connection_pool.disconnect()
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return load(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", dropped)
    index.client.script_flush()
    key = f"{page('after')}_0_k"
    index.put(key, 1)
    info = index.object_info(key)
    assert info is not None and info.state == "complete"
    index.client.script_flush()
    failures[0] = 100  # every reload fails
    with pytest.raises(RedisUnavailable, match="ConnectionError"):
        index.put(f"{page('never')}_0_k", 1)
    assert index.object_info(f"{page('never')}_0_k") is None


def test_scripts_flushed_and_connections_killed_from_another_client_give_only_library_errors(
        redis_url: str) -> None:
    """For each of 300 puts, another client pairs SCRIPT FLUSH with CLIENT KILL of every
    other connection while the put runs (wherever it is by then): each put succeeds or
    raises a library error; redis-py's own errors never come through (issue 34 measured
    199 of 648 calls before)."""
    index = Index.from_url(redis_url, namespace="flushkill", cluster_retry_backoff_ms=1)
    admin = redis.Redis.from_url(redis_url, socket_timeout=5)
    go, stop = threading.Semaphore(0), threading.Event()

    def chaos() -> None:
        while not stop.is_set():
            if go.acquire(timeout=0.1):
                admin.script_flush()
                admin.client_kill_filter(_type="normal", skipme=True)

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    outcomes: Counter[str] = Counter()
    try:
        for i in range(300):
            go.release()
            try:
                index.put(f"{page(('flushkill', i))}_0_k", 1)
                outcomes["ok"] += 1
            except MooncakeRedisError as error:
                outcomes[type(error).__name__] += 1
            except redis.exceptions.RedisError as error:
                outcomes[f"raw {type(error).__name__}"] += 1
    finally:
        stop.set()
        joined(thread, "the flushing and killing client")
    print(f"\n300 puts under SCRIPT FLUSH + CLIENT KILL: {dict(outcomes)}")
    assert not [kind for kind in outcomes if kind.startswith("raw")], outcomes
