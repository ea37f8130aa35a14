"""Test backends: a real redis-server the session starts itself, a real 3-master Redis
Cluster (started only when a test needs it), and fakeredis.

Every backend-dependent test runs once per backend (pytest.param), so the in-process
default and the cluster are held to the same contract as real Redis; real Redis is the
authority.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis_cluster import LocalCluster
from redis_server import RedisServer
from script_calls import ScriptCalls

from mooncake_redis import Index

_memory_names = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(masters=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptCalls]:
    """Every script call the test's clients send to a cluster node, each checked at the
    end to have named keys of the one node it was sent to (tests/script_calls.py)."""
    recorder = ScriptCalls().install(monkeypatch)
    yield recorder
    recorder.assert_one_node_each()


@pytest.fixture
def cluster_url(redis_cluster: LocalCluster, script_calls: ScriptCalls) -> str:
    """The session's cluster, emptied on every master; every script call a test sends
    there names keys of one node (script_calls)."""
    for master in redis_cluster.masters():
        redis_cluster.client(master).flushall()
    return redis_cluster.url


IndexFactory = Callable[..., Index]


@pytest.fixture(params=["redis", "cluster", "fakeredis"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_index(backend: str, request: pytest.FixtureRequest) -> IndexFactory:
    """Builds Index objects on the test's backend; all share one fresh database."""
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
    elif backend == "cluster":
        url = request.getfixturevalue("cluster_url")
    else:
        url = f"memory://test-{next(_memory_names)}"

    def factory(namespace: str = "t", **config: Any) -> Index:
        return Index.from_url(url, namespace=namespace, **config)

    return factory


@pytest.fixture
def index(make_index: IndexFactory) -> Index:
    return make_index()
