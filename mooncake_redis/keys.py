"""Every Redis key name mooncake-redis uses is built here and nowhere else.

The schema (v2) is a contract that redis-cli users read; tests/test_keys.py pins it:

    <ns>:{<shard>}:n:<hash>      HASH    one radix tree node and its objects:
                                         p, pe          parent hash, epoch of that link
                                         <child hash>   a child -> that link's epoch (64-hex
                                                        children; other names as c:<name>)
                                         o:<suffix>     an object (key = hash + suffix) ->
                                                        packed metadata (see values.py)
                                         nc no np ps psn nh ns b lm   counters (values.py); a shell
                                         made by one batch holds p = ?<batch id>
    <ns>:{<shard>}:leaves        ZSET    leaf node -> eviction score (no soft-pinned object)
    <ns>:{<shard>}:soft_leaves   ZSET    leaf node -> eviction score (some object soft-pinned)
    <ns>:{<shard>}:pending       ZSET    "<parent>|<child>|<epoch>" links not yet confirmed -> ms
    <ns>:{<shard>}:fences        ZSET    child hash -> highest fenced link epoch (expire by score)
    <ns>:{<shard>}:outbox        ZSET    "<child>|<parent>|<epoch>" unlinks still to do -> ms
    <ns>:{<shard>}:stats         HASH    used_bytes, objects, nodes, shells, fences, writes, limit,
                                         m:<segment> (mounted), su:<segment> (its bytes here)
    <ns>:{<shard>}:events        STREAM  stored / removed / evicted, capped
    <ns>:settings                HASH    namespace settings (settings.py)
    <ns>:segments                HASH    segment name -> "<state>,<capacity>,<mounted ms>,
                                         <heartbeat ms>,<unmount cursors>" (segments.py)
    <ns>:ingest:<pod>            STRING  last vLLM event batch a pod's ingester applied
    <ns>:tokens:<holder>         HASH    block -> token hash of the blocks a holder holds
    <ns>:eviction_lock           STRING  token of the one eviction job running (expires)
    <ns>:eviction_requested      STRING  set while an eviction job is queued (expires)

`{<shard>}` is a Redis Cluster hash tag, so a node, its objects and its shard's indexes
share one slot and one script can update them atomically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigurationError
from .prefix import V4_LAYOUT, ShardLayout, TextMemo, digest_tags, shard_finder

_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_NAMESPACE_MARKER = re.compile(
    r"([A-Za-z0-9_.-]{1,64}):(?:settings|\{[0-9a-f]{1,2}\}:stats)")

NAMESPACE_MARKER_PATTERNS = ("*:settings", "*:{?}:stats", "*:{??}:stats")
"""Globs (SCAN MATCH) for the keys that show a namespace exists: its settings, stored once
a setting is given, and its shards' stats, written by its first write."""


def namespace_of_marker(key: str) -> str | None:
    """The namespace whose settings or shard stats key this is; None for any other key."""
    found = _NAMESPACE_MARKER.fullmatch(key)
    return found.group(1) if found else None

SHARD_KEY_NAMES = ("leaves", "soft_leaves", "stats", "pending", "fences", "outbox", "events")
"""The per-shard keys, in the order every shard script receives them as KEYS[1..7]."""


@dataclass(frozen=True)
class ShardKeys:
    """The keys every shard has once."""

    leaves: str
    soft_leaves: str
    stats: str
    pending: str
    fences: str
    outbox: str
    events: str

    def as_list(self) -> list[str]:
        return [self.leaves, self.soft_leaves, self.stats, self.pending, self.fences,
                self.outbox, self.events]


class KeySchema:
    """Builds key names for one namespace."""

    def __init__(self, namespace: str, layout: ShardLayout = V4_LAYOUT):
        if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
            raise ConfigurationError(
                f"namespace {namespace!r} must be 1-64 characters of letters, digits, '_', '.', '-'"
            )
        self.namespace = namespace
        self.layout = layout
        """Where the namespace's keys live (read off its keys at open: shard_layout.py)."""
        self.shard_count = layout.shard_count
        self.tag_width = layout.tag_width
        """How many hex digits a shard's tag has (lua/_lib.lua computes a digest's tag)."""
        self.shards = layout.shards
        self.shard: Callable[[str], str] = shard_finder(layout.shard_count, layout.tag_width)
        """The shard a prefix's node lives in (prefix.shard_of in this layout)."""
        self._digest_tags = digest_tags(layout.shard_count, layout.tag_width)
        self._shards: dict[str, ShardKeys] = {}
        self.node: Callable[[str], str] = TextMemo(self._node).__getitem__
        """The node hash of a prefix: it holds the node and every object of the prefix
        (cached: an engine names the same pages' nodes request after request)."""

    def digest_shard(self, digest: str) -> str:
        """`shard` of a prefix the caller knows is a 64-hex digest: a table lookup."""
        return self._digest_tags[digest[:2]]

    def tag(self, shard: str) -> str:
        return f"{self.namespace}:{{{shard}}}"

    def shard_keys(self, shard: str) -> ShardKeys:
        keys = self._shards.get(shard)
        if keys is None:
            tag = self.tag(shard)
            keys = ShardKeys(*(f"{tag}:{name}" for name in SHARD_KEY_NAMES))
            self._shards[shard] = keys
        return keys

    def _node(self, prefix_hash: str) -> str:
        return f"{self.namespace}:{{{self.shard(prefix_hash)}}}:n:{prefix_hash}"

    def node_prefix(self, shard: str) -> str:
        """What every node key of a shard starts with (for SCAN MATCH)."""
        return f"{self.tag(shard)}:n:"

    def node_pattern(self) -> str:
        """A glob matching every node key of the namespace."""
        return f"{self.namespace}:{{{'?' * self.tag_width}}}:n:*"

    @property
    def settings(self) -> str:
        return f"{self.namespace}:settings"

    @property
    def segments(self) -> str:
        return f"{self.namespace}:segments"

    @property
    def eviction_lock(self) -> str:
        return f"{self.namespace}:eviction_lock"

    @property
    def eviction_requested(self) -> str:
        return f"{self.namespace}:eviction_requested"

    @property
    def pod_holders(self) -> str:
        """SET of the holders (pods, pod@medium, pod/g<group>) vLLM ingesters have recorded
        blocks for (mooncake_redis.engines.vllm.pods): what a query asks each node about."""
        return f"{self.namespace}:pods"

    def ingest_position(self, pod: str) -> str:
        """STRING: the sequence number of the last KV event batch the pod's ingester
        applied, so a restarted ingester asks the replay socket for what it missed."""
        return f"{self.namespace}:ingest:{pod}"

    def token_hashes(self, holder: str) -> str:
        """HASH: for each block the holder (pod, pod@medium, pod/g<group>) holds that has a
        token hash, its first 16 prefix-hash digits -> that token hash (16 hex digits), so
        the holder's BlockRemoved finds the token node to leave (ingest.pods)."""
        return f"{self.namespace}:tokens:{holder}"

    def pattern(self) -> str:
        """A glob that matches every key of the namespace (for ACLs and redis-cli --scan)."""
        return f"{self.namespace}:*"

    def hash_of_node_key(self, key: str) -> str:
        """The prefix hash a node key names (the inverse of node())."""
        return key.split(":n:", 1)[1]
