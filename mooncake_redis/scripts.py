"""The Lua scripts of lua/ and one typed wrapper per script.

Each wrapper is the only place that knows its script's KEYS and ARGV layout; it builds
the keys through KeySchema and queues the call on a Batch. Every wrapper passes keys of
one shard tag only (Batch refuses anything else), which is what lets the same scripts
run on Redis Cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources

from .batch import Batch, LuaScript
from .keys import KeySchema
from .prefix import shard_of

LIBRARY = "_lib"
SCRIPT_NAMES = (
    "reserve_bytes",
    "put_start",
    "put_end",
    "grant_lease",
    "delete_objects",
    "evict_leaves",
    "link_child",
    "unlink_child",
    "register_node",
    "lock_token",
    "recompute_node",
    "recount_shard",
    "set_usage",
)


def read_lua(name: str) -> str:
    return resources.files("mooncake_redis.lua").joinpath(f"{name}.lua").read_text("utf-8")


def build_script(name: str) -> LuaScript:
    source = read_lua(LIBRARY) + "\n" + read_lua(name)
    return LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())


def _flag(value: bool) -> str:
    return "1" if value else "0"


class Scripts:
    """Typed wrappers: each queues one script call on a Batch and returns its position.

    Each wrapper also says whether its call is retry_safe (run twice = run once, with an
    answer the caller accepts), which decides whether Redis Cluster retries may re-send it
    after a lost reply: link_child, unlink_child, register_node, grant_lease, lock_token
    and every dry run are; put_start, put_end, reserve_bytes, delete_objects and
    evict_leaves are not (a second run answers differently or counts twice).
    """

    def __init__(self, schema: KeySchema):
        self.schema = schema
        self.all = [build_script(name) for name in SCRIPT_NAMES]
        self._by_name = {script.name: script for script in self.all}

    def _node_keys(self, prefix_hash: str, *, with_keys: bool = True) -> list[str]:
        """node, children, [keys,] leaves, soft_leaves, nodes of the node's shard."""
        node = self.schema.node_keys(prefix_hash)
        shard = self.schema.shard_keys(shard_of(prefix_hash))
        middle = [node.keys] if with_keys else []
        return [node.node, node.children, *middle, shard.leaves, shard.soft_leaves, shard.nodes]

    def _object_keys(self, key: str, prefix_hash: str) -> list[str]:
        """obj, node, children, keys, leaves, soft_leaves, objects, stats, nodes."""
        node = self.schema.node_keys(prefix_hash)
        shard = self.schema.shard_keys(shard_of(prefix_hash))
        return [self.schema.object_key(key, prefix_hash), node.node, node.children, node.keys,
                shard.leaves, shard.soft_leaves, shard.objects, shard.stats, shard.nodes]

    def _shard_head(self, shard: str) -> list[str]:
        keys = self.schema.shard_keys(shard)
        return [keys.leaves, keys.soft_leaves, keys.objects, keys.stats, keys.nodes]

    def reserve_bytes(self, batch: Batch, size: int, capacity: int) -> int:
        return batch.call(self._by_name["reserve_bytes"], [self.schema.usage], [size, capacity])

    def lock_token(self, batch: Batch, lock_key: str, operation: str, token: str,
                   ttl_ms: int = 0) -> int:
        return batch.call(self._by_name["lock_token"], [lock_key], [operation, token, ttl_ms],
                          retry_safe=True)

    def put_start(self, batch: Batch, key: str, prefix_hash: str, size: int, parent: str | None,
                  soft_pin: bool, hard_pin: bool, register: bool, dry_run: bool) -> int:
        args = [key, prefix_hash, size, parent or "", _flag(soft_pin), _flag(hard_pin),
                _flag(register), _flag(dry_run)]
        return batch.call(self._by_name["put_start"], self._object_keys(key, prefix_hash), args,
                          read_only=dry_run)  # run twice, a put answers ALREADY_EXISTS

    def put_end(self, batch: Batch, key: str, prefix_hash: str) -> int:
        return batch.call(self._by_name["put_end"], self._object_keys(key, prefix_hash),
                          [key, prefix_hash])

    def grant_lease(self, batch: Batch, key: str, prefix_hash: str, ttl_ms: int) -> int:
        return batch.call(self._by_name["grant_lease"], self._object_keys(key, prefix_hash),
                          [key, prefix_hash, ttl_ms], retry_safe=True)

    def delete_objects(self, batch: Batch, shard: str, mode: str,
                       objects: Sequence[tuple[str, str]], soft_pins_allowed: bool = False,
                       path_breaking: bool = False) -> int:
        """objects: (key, prefix hash) pairs, all of `shard`."""
        keys = self._shard_head(shard)
        args: list[str] = [mode, _flag(soft_pins_allowed), _flag(path_breaking)]
        for key, prefix_hash in objects:
            node = self.schema.node_keys(prefix_hash)
            keys += [self.schema.object_key(key, prefix_hash), node.node, node.children, node.keys]
            args += [key, prefix_hash]
        return batch.call(self._by_name["delete_objects"], keys, args)

    def evict_leaves(self, batch: Batch, shard: str, leaves: Sequence[tuple[str, Sequence[str]]],
                     soft_pins_allowed: bool) -> int:
        """leaves: (prefix hash, the keys the caller saw registered under it), all of `shard`."""
        keys = self._shard_head(shard)
        args: list[str | int] = [_flag(soft_pins_allowed)]
        for prefix_hash, object_keys in leaves:
            node = self.schema.node_keys(prefix_hash)
            keys += [node.node, node.children, node.keys]
            keys += [self.schema.object_key(k, prefix_hash) for k in object_keys]
            args += [prefix_hash, len(object_keys), *object_keys]
        return batch.call(self._by_name["evict_leaves"], keys, args)

    def link_child(self, batch: Batch, parent: str, child: str) -> int:
        return batch.call(self._by_name["link_child"], self._node_keys(parent, with_keys=False),
                          [parent, child], retry_safe=True)

    def unlink_child(self, batch: Batch, parent: str, child: str) -> int:
        # Safe to re-run; a re-run after the first deleted the parent answers "not deleted",
        # so the cascade stops there, leaving a dangling child reference in the grandparent.
        return batch.call(self._by_name["unlink_child"], self._node_keys(parent), [parent, child],
                          retry_safe=True)

    def register_node(self, batch: Batch, prefix_hash: str, parent: str | None,
                      keys: Sequence[str], dry_run: bool) -> int:
        redis_keys = self._node_keys(prefix_hash)
        redis_keys += [self.schema.object_key(key, prefix_hash) for key in keys]
        return batch.call(self._by_name["register_node"], redis_keys,
                          [prefix_hash, parent or "", _flag(dry_run), *keys], retry_safe=True,
                          read_only=dry_run)

    def recompute_node(self, batch: Batch, prefix_hash: str, registered: Sequence[str]) -> int:
        """registered: exactly the keys now in the node's key set."""
        keys = self._node_keys(prefix_hash)
        keys += [self.schema.object_key(key, prefix_hash) for key in registered]
        return batch.call(self._by_name["recompute_node"], keys, [prefix_hash, *registered])

    def recount_shard(self, batch: Batch, shard: str,
                      objects: Sequence[tuple[str, str]]) -> int:
        """objects: (key, prefix hash) of exactly the members of the shard's object index."""
        shard_keys = self.schema.shard_keys(shard)
        keys = [shard_keys.objects, shard_keys.stats]
        keys += [self.schema.object_key(key, prefix_hash) for key, prefix_hash in objects]
        return batch.call(self._by_name["recount_shard"], keys, [key for key, _ in objects])

    def set_usage(self, batch: Batch, seen: str | None, corrected: int) -> int:
        return batch.call(self._by_name["set_usage"], [self.schema.usage],
                          [seen or "", corrected])
