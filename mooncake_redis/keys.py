"""Every Redis key name mooncake-redis uses is built here and nowhere else.

The schema is a contract that redis-cli users read (tests/test_keys.py pins it):

    <ns>:{<shard>}:obj:<key>        HASH  size, state, lease_ms, soft_pin, hard_pin,
                                          created_ms, prefix
    <ns>:{<shard>}:node:<hash>      HASH  parent (absent = unknown), key_count, bytes,
                                          processing, soft_pins, created_ms
    <ns>:{<shard>}:children:<hash>  SET   child prefix hashes
    <ns>:{<shard>}:keys:<hash>      ZSET  registered object key -> eviction score
    <ns>:{<shard>}:leaves           ZSET  leaf node hash -> eviction score (no soft-pinned key)
    <ns>:{<shard>}:soft_leaves      ZSET  leaf node hash -> eviction score (some key soft-pinned)
    <ns>:{<shard>}:objects          ZSET  object key -> eviction score (lease-ordered fallback)
    <ns>:{<shard>}:stats            HASH  used_bytes, objects
    <ns>:{<shard>}:nodes            SET   every node hash of the shard (fsck reads it, no SCAN)
    <ns>:config                     HASH  configuration shared by every client
    <ns>:usage                      STRING bytes reserved against capacity (admission)
    <ns>:eviction_lock              STRING token of the one eviction job running (expires)
    <ns>:eviction_requested         STRING set while an eviction job is queued (expires)

`{<shard>}` is a Redis Cluster hash tag, so an object, its node and the node's sets
share one slot and one script can update them atomically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ConfigurationError
from .prefix import shard_of

_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class NodeKeys:
    """The three keys of one radix tree node."""

    node: str
    children: str
    keys: str


@dataclass(frozen=True)
class ShardKeys:
    """The per-shard indexes every shard has once."""

    leaves: str
    soft_leaves: str
    objects: str
    stats: str
    nodes: str


class KeySchema:
    """Builds key names for one namespace."""

    def __init__(self, namespace: str):
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError(
                f"namespace {namespace!r} must be 1-64 characters of letters, digits, '_', '.', '-'"
            )
        self.namespace = namespace

    def tag(self, shard: str) -> str:
        return f"{self.namespace}:{{{shard}}}"

    def shard_keys(self, shard: str) -> ShardKeys:
        tag = self.tag(shard)
        return ShardKeys(leaves=f"{tag}:leaves", soft_leaves=f"{tag}:soft_leaves",
                         objects=f"{tag}:objects", stats=f"{tag}:stats", nodes=f"{tag}:nodes")

    def node_keys(self, prefix_hash: str) -> NodeKeys:
        tag = self.tag(shard_of(prefix_hash))
        return NodeKeys(
            node=f"{tag}:node:{prefix_hash}",
            children=f"{tag}:children:{prefix_hash}",
            keys=f"{tag}:keys:{prefix_hash}",
        )

    def object_key(self, key: str, prefix_hash: str) -> str:
        """An object lives in the shard of its prefix, beside its node."""
        return f"{self.tag(shard_of(prefix_hash))}:obj:{key}"

    @property
    def config(self) -> str:
        return f"{self.namespace}:config"

    @property
    def usage(self) -> str:
        return f"{self.namespace}:usage"

    @property
    def eviction_lock(self) -> str:
        return f"{self.namespace}:eviction_lock"

    @property
    def eviction_requested(self) -> str:
        return f"{self.namespace}:eviction_requested"

    def pattern(self) -> str:
        """A glob that matches every key of the namespace (for ACLs and redis-cli --scan)."""
        return f"{self.namespace}:*"
