"""Shared test helpers: page hashes, snapshots of a namespace, a consistency assertion."""

from __future__ import annotations

import hashlib
from typing import Any

from mooncake_redis import Index
from mooncake_redis.fsck import check


def page(name: object) -> str:
    """A 64-hex page hash, as an engine would make one."""
    return hashlib.sha256(str(name).encode()).hexdigest()


def snapshot(index: Index) -> dict[str, Any]:
    """Every key of the namespace with its value, to prove that a refusal wrote nothing."""
    client = index.client
    state: dict[str, Any] = {}
    for key in sorted(client.scan_iter(match=index.schema.pattern(), count=1000)):
        kind = client.type(key)
        if kind == "hash":
            state[key] = client.hgetall(key)
        elif kind == "set":
            state[key] = sorted(client.smembers(key))
        elif kind == "zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = client.get(key)
    return state


def assert_consistent(index: Index) -> None:
    report = check(index)
    assert report.clean, report.problems
