"""The Lua scripts of lua/ and one typed wrapper per script.

Each wrapper is the only place that knows its script's KEYS and ARGV layout; it builds
the keys through KeySchema and queues the call on a Batch. Every wrapper passes keys of
one shard tag only (Batch refuses anything else), which is what lets the same scripts
run on Redis Cluster.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Sequence

from .batch import Batch, LuaScript
from .keys import KeySchema, NodeKeys
from .prefix import shard_of

LIBRARY = "_lib"
SCRIPT_NAMES = (
    "reserve_bytes",
    "put_start",
    "put_end",
    "grant_lease",
    "delete_objects",
    "link_child",
    "unlink_child",
    "register_node",
)


def read_lua(name: str) -> str:
    return resources.files("mooncake_redis.lua").joinpath(f"{name}.lua").read_text("utf-8")


def build_script(name: str) -> LuaScript:
    source = read_lua(LIBRARY) + "\n" + read_lua(name)
    return LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())


def _flag(value: bool) -> str:
    return "1" if value else "0"


class Scripts:
    """Typed wrappers: each queues one script call on a Batch and returns its position."""

    def __init__(self, schema: KeySchema):
        self.schema = schema
        self.all = [build_script(name) for name in SCRIPT_NAMES]
        self._by_name = {script.name: script for script in self.all}

    def _node_and_shard(self, prefix_hash: str) -> tuple[NodeKeys, str]:
        return self.schema.node_keys(prefix_hash), shard_of(prefix_hash)

    def _object_keys(self, key: str, prefix_hash: str) -> list[str]:
        """obj, node, children, keys, leaves, objects: the layout of the per-object scripts."""
        node, shard = self._node_and_shard(prefix_hash)
        shard_keys = self.schema.shard_keys(shard)
        return [self.schema.object_key(key, prefix_hash), node.node, node.children, node.keys,
                shard_keys.leaves, shard_keys.objects]

    def reserve_bytes(self, batch: Batch, size: int, capacity: int) -> int:
        return batch.call(self._by_name["reserve_bytes"], [self.schema.usage], [size, capacity])

    def put_start(self, batch: Batch, key: str, prefix_hash: str, size: int, parent: str | None,
                  soft_pin: bool, hard_pin: bool, register: bool, dry_run: bool) -> int:
        keys = self._object_keys(key, prefix_hash)
        keys.append(self.schema.shard_keys(shard_of(prefix_hash)).stats)
        args = [key, prefix_hash, size, parent or "", _flag(soft_pin), _flag(hard_pin),
                _flag(register), _flag(dry_run)]
        return batch.call(self._by_name["put_start"], keys, args)

    def put_end(self, batch: Batch, key: str, prefix_hash: str) -> int:
        return batch.call(self._by_name["put_end"], self._object_keys(key, prefix_hash),
                          [key, prefix_hash])

    def grant_lease(self, batch: Batch, key: str, prefix_hash: str, ttl_ms: int) -> int:
        return batch.call(self._by_name["grant_lease"], self._object_keys(key, prefix_hash),
                          [key, prefix_hash, ttl_ms])

    def delete_objects(self, batch: Batch, shard: str, mode: str,
                       objects: Sequence[tuple[str, str]]) -> int:
        """objects: (key, prefix hash) pairs, all of `shard`."""
        shard_keys = self.schema.shard_keys(shard)
        keys = [shard_keys.leaves, shard_keys.objects, shard_keys.stats]
        args: list[str] = [mode]
        for key, prefix_hash in objects:
            node = self.schema.node_keys(prefix_hash)
            keys += [self.schema.object_key(key, prefix_hash), node.node, node.children, node.keys]
            args += [key, prefix_hash]
        return batch.call(self._by_name["delete_objects"], keys, args)

    def link_child(self, batch: Batch, parent: str, child: str) -> int:
        node, shard = self._node_and_shard(parent)
        shard_keys = self.schema.shard_keys(shard)
        return batch.call(self._by_name["link_child"],
                          [node.node, node.children, shard_keys.leaves, shard_keys.stats],
                          [parent, child])

    def unlink_child(self, batch: Batch, parent: str, child: str) -> int:
        node, shard = self._node_and_shard(parent)
        shard_keys = self.schema.shard_keys(shard)
        return batch.call(self._by_name["unlink_child"],
                          [node.node, node.children, node.keys, shard_keys.leaves, shard_keys.stats],
                          [parent, child])

    def register_node(self, batch: Batch, prefix_hash: str, parent: str | None,
                      keys: Sequence[str], dry_run: bool) -> int:
        node, shard = self._node_and_shard(prefix_hash)
        shard_keys = self.schema.shard_keys(shard)
        redis_keys = [node.node, node.children, node.keys, shard_keys.leaves, shard_keys.stats]
        redis_keys += [self.schema.object_key(key, prefix_hash) for key in keys]
        return batch.call(self._by_name["register_node"], redis_keys,
                          [prefix_hash, parent or "", _flag(dry_run), *keys])
