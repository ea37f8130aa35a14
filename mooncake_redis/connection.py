"""Turns a URL into a Redis client: redis://, rediss://, redis+cluster://, or the
in-process memory://."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from .errors import ConfigurationError
from .urls import database_problem, password_of, redact

SUPPORTED_SCHEMES = ("memory", "redis", "redis+cluster", "rediss", "unix")

_memory_servers: dict[str, Any] = {}
_memory_lock = threading.Lock()


def connect(url: str, decode_responses: bool = True) -> redis.Redis:
    """A client (decoding replies to str unless told not to: RQ wants bytes).
    `memory://NAME` gives an in-process fakeredis server (with Lua) shared by every
    client of the same NAME in this process; `redis+cluster://[user:password@]host:port
    [,host:port...]` a Redis Cluster client seeded from those nodes."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"Redis URL {redact(url)!r} must look like redis://host:port/db")
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return _memory_client(urlsplit(url).netloc or "default", decode_responses)
    if scheme == "redis+cluster":
        return _cluster_client(url, decode_responses)
    if scheme not in SUPPORTED_SCHEMES:
        raise ConfigurationError(
            f"unknown URL scheme {scheme!r} in {redact(url)!r}; use one of "
            + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)
        )
    problem = database_problem(url)
    if problem:
        raise ConfigurationError(problem)
    try:
        return redis.Redis.from_url(url, decode_responses=decode_responses)
    except ValueError as error:
        # redis-py's message may quote a piece of a password it took for a host or port
        detail = PASSWORD_HINT if password_of(url) else str(error)
        raise ConfigurationError(f"invalid Redis URL {redact(url)!r}: {detail}") from None


def _cluster_client(url: str, decode_responses: bool) -> redis.Redis:
    netloc = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    credentials, _, hosts = netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    seeds = []
    for host_port in hosts.split(","):
        host, _, port = host_port.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"Redis Cluster URL {redact(url)!r} must list seed nodes as "
                                     "host:port[,host:port...]")
        seeds.append(ClusterNode(host, int(port)))
    try:
        # RedisCluster is typed apart from Redis but answers the same commands.
        return RedisCluster(startup_nodes=seeds, decode_responses=decode_responses,  # type: ignore[return-value]
                            username=unquote(username) or None,
                            password=unquote(password) or None)
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as error:
        raise ConfigurationError(f"no Redis Cluster node of {redact(url)!r} answered: {error}") \
            from None


def _memory_client(name: str, decode_responses: bool) -> redis.Redis:
    import fakeredis  # imported lazily: only the in-process default needs it

    with _memory_lock:
        server = _memory_servers.setdefault(name, fakeredis.FakeServer())
    return fakeredis.FakeRedis(server=server, decode_responses=decode_responses)


def is_in_process(client: Any) -> bool:
    """Whether a client is the in-process fakeredis of memory:// URLs."""
    return type(client).__module__.startswith("fakeredis")


PASSWORD_HINT = ("it does not parse; percent-encode any of : / ? # @ % and spaces in the "
                 "password (urllib.parse.quote(password, safe=''))")
