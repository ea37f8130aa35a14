"""Errors name what really failed: a single Redis that stops answering is RedisUnavailable,
naming the server and the cause, never ClusterUnavailable."""

from __future__ import annotations

import pytest
import redis
from helpers import page
from redis_server import RedisServer

from mooncake_redis import ClusterUnavailable, Index, RedisUnavailable


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
