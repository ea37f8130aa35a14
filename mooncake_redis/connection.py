"""Turns a URL into a Redis client: redis://, rediss://, or the in-process memory://."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit, urlunsplit

import redis

from .errors import ConfigurationError

SUPPORTED_SCHEMES = ("memory", "redis", "rediss", "unix")

_memory_servers: dict[str, object] = {}
_memory_lock = threading.Lock()


def connect(url: str, decode_responses: bool = True) -> redis.Redis:
    """A client (decoding replies to str unless told not to: RQ wants bytes).
    `memory://NAME` gives an in-process fakeredis server (with Lua) shared by every
    client of the same NAME in this process."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"Redis URL {redact(url)!r} must look like redis://host:port/db")
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return _memory_client(urlsplit(url).netloc or "default", decode_responses)
    if scheme == "redis+cluster":
        raise ConfigurationError(
            "redis+cluster:// is not supported yet (Redis Cluster support is its own issue); "
            "use redis:// or rediss://"
        )
    if scheme not in SUPPORTED_SCHEMES:
        raise ConfigurationError(
            f"unknown URL scheme {scheme!r} in {redact(url)!r}; use one of "
            + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)
        )
    try:
        return redis.Redis.from_url(url, decode_responses=decode_responses)
    except ValueError as error:
        raise ConfigurationError(f"invalid Redis URL {redact(url)!r}: {error}") from None


def _memory_client(name: str, decode_responses: bool) -> redis.Redis:
    import fakeredis  # imported lazily: only the in-process default needs it

    with _memory_lock:
        server = _memory_servers.setdefault(name, fakeredis.FakeServer())
    return fakeredis.FakeRedis(server=server, decode_responses=decode_responses)


def redact(url: object) -> str:
    """The URL with any password replaced, safe for error messages and logs."""
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return text
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
