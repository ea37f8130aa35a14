"""Errors name what really failed: a single Redis that stops answering is RedisUnavailable,
naming the server and the cause, never ClusterUnavailable."""

from __future__ import annotations

import pytest
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
