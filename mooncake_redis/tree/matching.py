"""Walking every object of a namespace (remove_all, remove_by_regex, fsck) without KEYS:
SCAN over node keys on every primary, then the nodes' object fields; and key patterns run
by RE2, whose matching time is linear in the key (no catastrophic backtracking)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import re2
from redis.cluster import RedisCluster

from mooncake_redis.context import Context
from mooncake_redis.errors import InvalidArgument

SCAN_COUNT = 1000


def compile_pattern(pattern: Any) -> Callable[[str], bool]:
    """A search function for a non-empty RE2 pattern."""
    if not isinstance(pattern, str):
        raise InvalidArgument(f"pattern must be a str, got {type(pattern).__name__}")
    if not pattern:
        raise InvalidArgument("an empty pattern matches every key; use remove_all to mean that")
    options = re2.Options()
    options.log_errors = False  # the error goes to the caller, not to stderr
    try:
        regex = re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) \
            else str(error)
        raise InvalidArgument(f"pattern {pattern!r} is not a valid RE2 expression: {reason}") \
            from None
    return lambda key: regex.search(key) is not None


def primaries(client: Any) -> list[Any]:
    """The clients to SCAN: the client itself, or each primary of a cluster."""
    if isinstance(client, RedisCluster):
        return [node.redis_connection for node in client.get_primaries()]
    return [client]


def scan_node_keys(ctx: Context, shard: str | None = None, start: str = "",
                   any_layout: bool = False) -> Iterator[list[str]]:
    """Pages of node keys of the namespace, or of one shard (SCAN MATCH on every primary);
    with a shard, only the nodes whose hash begins with start (no glob characters); with
    any_layout, node keys under any tag (fsck: another layout's too)."""
    if any_layout:
        pattern = f"{ctx.schema.namespace}:{{*}}:n:*"
    elif shard is None:
        pattern = ctx.schema.node_pattern()
    else:
        pattern = ctx.schema.node_prefix(shard) + start + "*"
    for client in primaries(ctx.client):
        cursor = 0
        while True:
            cursor, keys = client.scan(cursor, match=pattern, count=SCAN_COUNT)
            if keys:
                yield keys
            if cursor == 0:
                break


def scan_objects(ctx: Context) -> Iterator[list[tuple[str, str, str]]]:
    """Pages of (key, prefix hash, suffix) of every object."""
    for page in scan_node_keys(ctx):
        batch = ctx.batch()
        for node_key in page:
            batch.command("HKEYS", node_key)
        found = []
        for node_key, fields in zip(page, batch.execute()):
            prefix_hash = ctx.schema.hash_of_node_key(node_key)
            found += [(prefix_hash + f[2:], prefix_hash, f[2:]) for f in fields
                      if f.startswith("o:")]
        yield found
