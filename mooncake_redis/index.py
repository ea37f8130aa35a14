"""The public API: Mooncake's object store and the RFC's radix tree index on Redis."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from .batch import Batch, BatchPolicy, raise_first_error
from .config import DEFAULT_URL, ENV_URL, Config, env_overrides
from .connection import connect
from .errors import (
    CycleDetected,
    InvalidArgument,
    InvalidObjectState,
    MooncakeRedisError,
    NoSpace,
    ObjectLeased,
    ObjectNotFound,
    ParentConflict,
    RadixTreeDisabled,
)
from .keys import KeySchema
from .models import NodeInfo, ObjectInfo, Usage
from .prefix import PrefixExtractor, all_shards, load_extractor, shard_of
from .scripts import Scripts
from .tree_links import Link, TreeLinks, find_cycle_in_memory
from .validation import check_flag, check_size, check_text, check_unique

if TYPE_CHECKING:
    from .eviction import EvictionReport

NodeRegistration = tuple[str, "str | None", Sequence[str]]
"""(prefix hash, parent hash or None, object keys registered under it)"""

DELETE_CHUNK = 256
"""Objects per delete script call: keeps one script's run time (and Redis's pause) short."""

SCAN_COUNT = 1000

MATCH_PREFIX_PROBE = 32
"""match_prefix reads this many leading pages before reading the rest of the chain."""


class Index:
    """A namespace of KV-cache objects and their radix tree, shared through Redis by any
    number of clients and workers."""

    def __init__(self, client: redis.Redis, namespace: str = "mc", **config: Any):
        # Any, not redis.Redis: replies are str (decode_responses=True), which redis-py's
        # stubs cannot express.
        self.client: Any = client
        self.schema = KeySchema(namespace)
        self.scripts = Scripts(self.schema)
        self._config = self._load_config(config)
        self._config_read_at = time.monotonic()
        self._extractor: PrefixExtractor = load_extractor(self._config.prefix_extractor)
        self.links = TreeLinks(self.schema, self.scripts, self.batch,
                               lambda: self.config.max_depth)
        self.url: str | None = None
        """The URL this index was opened with (workers reopen it); None if built from a client."""
        self.on_no_space: Callable[[], None] | None = self._request_eviction
        """Called when put_start is refused for space."""

    @classmethod
    def from_url(cls, url: str | None = None, namespace: str = "mc", **config: Any) -> Index:
        """`redis://`, `rediss://`, `redis+cluster://host:port[,host:port...]`, or
        `memory://` (the in-process default, used when no URL is given and
        MOONCAKE_REDIS_URL is unset)."""
        import os

        url = url or os.environ.get(ENV_URL) or DEFAULT_URL
        index = cls(connect(url), namespace, **config)
        index.url = url
        return index

    # -- configuration -------------------------------------------------------------------

    def _load_config(self, overrides: Mapping[str, Any]) -> Config:
        stored = self.client.hgetall(self.schema.config)
        config = Config.from_redis(stored).replace(**env_overrides()).replace(**overrides)
        if config.to_redis() != stored:
            self.client.hset(self.schema.config, mapping=config.to_redis())
        return config

    @property
    def config(self) -> Config:
        """The namespace's configuration, re-read from Redis every config_refresh_seconds."""
        if time.monotonic() - self._config_read_at > self._config.config_refresh_seconds:
            stored = self.client.hgetall(self.schema.config)
            if stored:
                self._config = Config.from_redis(stored)
                self._extractor = load_extractor(self._config.prefix_extractor)
            self._config_read_at = time.monotonic()
        return self._config

    def set_config(self, **changes: Any) -> Config:
        """Change options for every client of the namespace."""
        self._config = self.config.replace(**changes)
        self.client.hset(self.schema.config, mapping=self._config.to_redis())
        self._extractor = load_extractor(self._config.prefix_extractor)
        return self._config

    # -- plumbing ------------------------------------------------------------------------

    def batch(self) -> Batch:
        config = self.config
        return Batch(self.client, self.scripts.all, BatchPolicy(
            config.cluster_retries, config.cluster_retry_backoff_ms, config.wait_replicas,
            config.wait_timeout_ms))

    def prefix_of(self, key: str) -> str:
        """The prefix hash an object key belongs to (the configured extractor)."""
        key = self._key(key)
        prefix_hash = self._extractor(key)
        return check_text(prefix_hash, f"prefix hash of {key!r}", self.config.max_key_length)

    def _key(self, key: Any) -> str:
        return check_text(key, "object key", self.config.max_key_length)

    def _hash(self, prefix_hash: Any, what: str = "prefix hash") -> str:
        return check_text(prefix_hash, what, self.config.max_key_length)

    def _require_tree(self) -> None:
        if not self.config.enable_radix_tree:
            raise RadixTreeDisabled("this namespace runs with enable_radix_tree=False")

    def _run_one(self, queue: Callable[[Batch], Any], key: str | None = None,
                 prefix_hash: str | None = None) -> Any:
        batch = self.batch()
        queue(batch)
        (result,) = batch.execute()
        if isinstance(result, MooncakeRedisError):
            result.key, result.prefix_hash = key, prefix_hash
            raise result
        return result

    # -- objects -------------------------------------------------------------------------

    def put_start(self, key: str, size: int, parent_block_hash: str | None = None,
                  soft_pin: bool = False, hard_pin: bool = False) -> None:
        """Create an object in state processing, counted against capacity; with the radix
        tree on, register it under its prefix node and link that node to its parent."""
        self.batch_put_start([(key, size, parent_block_hash)], soft_pin=soft_pin,
                             hard_pin=hard_pin)

    def batch_put_start(self, items: Iterable[tuple[str, int, str | None]],
                        soft_pin: bool = False, hard_pin: bool = False) -> None:
        """put_start for many (key, size, parent hash) at once: all are checked before any is
        written, so a refusal writes nothing; then a few round trips for the whole batch."""
        soft_pin, hard_pin = check_flag(soft_pin, "soft_pin"), check_flag(hard_pin, "hard_pin")
        register = self.config.enable_radix_tree
        puts = []
        for key, size, parent in items:
            key = self._key(key)
            size = check_size(size, self.config.max_object_size)
            prefix_hash = self.prefix_of(key)
            if parent is not None:
                parent = self._hash(parent, "parent_block_hash")
                if register and parent == prefix_hash:
                    raise CycleDetected(f"object {key} names its own prefix {parent} as parent",
                                        key=key, prefix_hash=prefix_hash)
            puts.append((key, size, prefix_hash, parent if register else None))
        check_unique([key for key, *_ in puts], "object key")
        self._check_parents_agree([(h, p) for _, _, h, p in puts])

        def queue_put(batch: Batch, put: tuple[str, int, str, str | None], dry_run: bool) -> int:
            key, size, prefix_hash, parent = put
            return self.scripts.put_start(batch, key, prefix_hash, size, parent, soft_pin,
                                          hard_pin, register, dry_run)

        checks = self._dry_run(puts, queue_put, key_of=lambda put: put[0])
        links = list(dict.fromkeys((h, p) for _, _, h, p in puts if p))
        self._check_cycles(links, {put[2]: bool(check[1]) for put, check in zip(puts, checks)})
        self._reserve(sum(size for _, size, _, _ in puts))

        batch = self.batch()
        self.links.queue_links(batch, links)
        batch.barrier()  # on Cluster the links must land before the children are written
        positions = [queue_put(batch, put, False) for put in puts]
        batch.barrier()
        self.links.queue_links(batch, links)
        results = batch.execute()
        refused = [(put, results[i]) for put, i in zip(puts, positions)
                   if isinstance(results[i], MooncakeRedisError)]
        if refused:  # only a concurrent writer gets here: the dry run passed
            self.release_bytes(sum(put[1] for put, _ in refused))
            put, error = refused[0]
            error.key = put[0]
            raise error
        raise_first_error(results)

    def _dry_run(self, items: Sequence[Any], queue: Callable[[Batch, Any, bool], int],
                 key_of: Callable[[Any], str | None]) -> list[Any]:
        """Run each item's write script in check-only mode and raise the first refusal, so
        a refused batch writes nothing."""
        batch = self.batch()
        for item in items:
            queue(batch, item, True)
        results = batch.execute()
        for item, result in zip(items, results):
            if isinstance(result, MooncakeRedisError):
                result.key = key_of(item) if result.key is None else result.key
                raise result
        return results

    def _check_parents_agree(self, links: Iterable[tuple[str, str | None]]) -> None:
        """Within one batch, a node named twice must name one parent."""
        parents: dict[str, str] = {}
        for prefix_hash, parent in links:
            if parent is None:
                continue
            if parents.setdefault(prefix_hash, parent) != parent:
                raise ParentConflict(
                    f"node {prefix_hash} is given parents {parents[prefix_hash]} and {parent} "
                    "in one batch", prefix_hash=prefix_hash)

    def _check_cycles(self, links: Sequence[Link], has_children: Mapping[str, bool]) -> None:
        """A cycle either lies wholly within this batch's links (found in memory), or passes
        through a child that already has children in Redis; only those links are walked
        up through Redis."""
        batch_parents = dict(links)
        find_cycle_in_memory(batch_parents)
        risky = [(child, parent) for child, parent in links if has_children.get(child)]
        if risky:
            self.links.check_no_cycles(risky, batch_parents)

    def _request_eviction(self) -> None:
        """With a queue configured, ask an RQ worker to evict (at most one job queued)."""
        if self.config.queue_url and self.url is not None:
            from .workers.jobs import request_eviction

            request_eviction(self)

    def _reserve(self, size: int) -> None:
        batch = self.batch()
        self.scripts.reserve_bytes(batch, size, self.config.capacity_bytes)
        (result,) = batch.execute()
        if isinstance(result, NoSpace):
            if self.on_no_space is not None:
                self.on_no_space()
            raise result
        raise_first_error([result])

    def put_end(self, key: str) -> None:
        """Mark a processing object complete (its lease starts now, so unread objects are
        evicted oldest first)."""
        self.batch_put_end([key])

    def batch_put_end(self, keys: Sequence[str]) -> None:
        """put_end for many keys in one round trip; raises the first refusal (the other
        keys are completed all the same: each put_end stands alone)."""
        keys = [self._key(k) for k in keys]
        batch = self.batch()
        for key in keys:
            self.scripts.put_end(batch, key, self.prefix_of(key))
        for key, result in zip(keys, batch.execute()):
            if isinstance(result, MooncakeRedisError):
                result.key = key
                raise result

    def put_revoke(self, key: str) -> None:
        """Abandon a processing object: delete it and release its bytes."""
        self._delete_one(key, "revoke")

    def get(self, key: str) -> ObjectInfo | None:
        """The object's metadata, granting a lease of lease_ttl_ms from Redis time; None if
        the key is not stored. Raises ObjectNotReady while it is processing."""
        key = self._key(key)
        prefix_hash = self.prefix_of(key)
        fields = self._run_one(
            lambda b: self.scripts.grant_lease(b, key, prefix_hash, self.config.lease_ttl_ms),
            key, prefix_hash)
        if fields is None:
            return None
        return _object_info(key, dict(zip(OBJECT_FIELDS, fields)))

    def is_exist(self, key: str) -> bool:
        """Whether a complete object is stored. Grants no lease unless probe_extends_lease."""
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys: Sequence[str]) -> list[bool]:
        """is_exist for many keys in one round trip."""
        keys = [self._key(k) for k in keys]
        prefixes = [self.prefix_of(k) for k in keys]
        extend = self.config.probe_extends_lease
        batch = self.batch()
        for key, prefix_hash in zip(keys, prefixes):
            if extend:
                self.scripts.grant_lease(batch, key, prefix_hash, self.config.lease_ttl_ms)
            else:
                batch.command("HGET", self.schema.object_key(key, prefix_hash), "state")
        results = batch.execute()
        if extend:  # a processing object answers NOT_READY: it does not exist yet for readers
            return [r is not None and not isinstance(r, MooncakeRedisError) for r in results]
        raise_first_error(results)
        return [state == "complete" for state in results]

    def object_info(self, key: str) -> ObjectInfo | None:
        """The object's metadata without granting a lease (for inspection)."""
        key = self._key(key)
        stored = self.client.hgetall(self.schema.object_key(key, self.prefix_of(key)))
        return _object_info(key, stored) if stored else None

    def remove(self, key: str, force: bool = False) -> None:
        """Delete a complete object. Refused while it is leased or processing, unless force."""
        self._delete_one(key, _delete_mode(force))

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> dict[str, str]:
        """remove for many keys; returns each key's outcome: "deleted", or why it stayed
        ("missing", "leased", "processing")."""
        keys = [self._key(k) for k in keys]
        check_unique(keys, "object key")
        pairs = [(k, self.prefix_of(k)) for k in keys]
        return self.delete_objects(pairs, _delete_mode(force)).statuses

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Delete every object whose key matches the regular expression (re.search), walking
        the shards' object indexes (no KEYS command). Returns how many were deleted."""
        if not isinstance(pattern, str):
            raise InvalidArgument(f"pattern must be a str, got {type(pattern).__name__}")
        try:
            regex = re.compile(pattern)
        except re.error as error:
            raise InvalidArgument(f"pattern {pattern!r} does not compile: {error}") from None
        return self._remove_matching(regex.search, force)

    def remove_all(self, force: bool = False) -> int:
        """Delete every object (leased and processing ones only with force)."""
        return self._remove_matching(lambda key: True, force)

    def _remove_matching(self, matches: Callable[[str], Any], force: bool) -> int:
        mode = _delete_mode(force)
        deleted = 0
        for shard in all_shards():
            for page in self._scan_shard_objects(shard):
                pairs = [(k, self.prefix_of(k)) for k in page if matches(k)]
                deleted += self.delete_objects(pairs, mode).deleted
        return deleted

    def _scan_shard_objects(self, shard: str) -> Iterator[list[str]]:
        objects_key = self.schema.shard_keys(shard).objects
        cursor = 0
        while True:
            cursor, page = self.client.zscan(objects_key, cursor, count=SCAN_COUNT)
            if page:
                yield [key for key, _ in page]
            if cursor == 0:
                return

    def _delete_one(self, key: str, mode: str) -> None:
        key = self._key(key)
        status = self.delete_objects([(key, self.prefix_of(key))], mode).statuses[key]
        if status == "deleted":
            return
        if status == "missing":
            raise ObjectNotFound(f"no object {key}", key=key)
        if status == "leased":
            raise ObjectLeased(f"object {key} is leased by a reader; retry after the lease "
                               "or pass force=True", key=key)
        advice = "use put_revoke" if status == "processing" else "put_revoke only abandons " \
            "processing objects; use remove"
        raise InvalidObjectState(f"object {key} is {status}; {advice}", key=key)

    def delete_objects(self, pairs: Sequence[tuple[str, str]], mode: str,
                       soft_pins_allowed: bool = False,
                       path_breaking: bool = False) -> Deletion:
        """The one way single objects leave the store (removal, revocation and the
        lease-ordered eviction fallback): delete_objects.lua per shard (which unregisters
        them from their nodes), then release bytes, then cascade up the tree. pairs are
        (key, prefix hash); mode and flags as in lua/delete_objects.lua."""
        by_shard: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for pair in pairs:
            by_shard[shard_of(pair[1])].append(pair)
        batch = self.batch()
        chunks = []
        for shard, shard_pairs in by_shard.items():
            for start in range(0, len(shard_pairs), DELETE_CHUNK):
                chunk = shard_pairs[start:start + DELETE_CHUNK]
                self.scripts.delete_objects(batch, shard, mode, chunk, soft_pins_allowed,
                                            path_breaking)
                chunks.append(chunk)
        results = batch.execute()
        raise_first_error(results)
        outcome: dict[str, str] = {}
        freed = 0
        emptied: list[Link] = []
        for chunk, (chunk_freed, statuses, emptied_flat) in zip(chunks, results):
            freed += int(chunk_freed)
            outcome.update((key, status) for (key, _), status in zip(chunk, statuses))
            emptied += list(zip(emptied_flat[0::2], emptied_flat[1::2]))
        self.release_bytes(freed)
        self.links.cascade(emptied)
        return Deletion(outcome, freed)

    def release_bytes(self, freed: int) -> None:
        """Give deleted objects' bytes back to the admission counter (after the deletion,
        so a crash in between only over-counts)."""
        if freed:
            self.client.decrby(self.schema.usage, freed)

    # -- radix tree ----------------------------------------------------------------------

    def register_radix_tree_node(self, prefix_hash: str, parent_hash: str | None = None,
                                 keys: Sequence[str] = ()) -> None:
        """Path B of the RFC: record a node's parent (filling a shell created by an earlier
        child) and register stored objects of this prefix under it."""
        self.batch_register_radix_tree_node([(prefix_hash, parent_hash, keys)])

    def batch_register_radix_tree_node(self, nodes: Iterable[NodeRegistration]) -> None:
        """register_radix_tree_node for many (prefix hash, parent hash, keys): all checked
        first, then written in a few round trips."""
        self._require_tree()
        registrations = [self._registration(*node) for node in nodes]
        check_unique([h for h, _, _ in registrations], "prefix hash")

        def queue_register(batch: Batch, item: NodeRegistration, dry_run: bool) -> int:
            prefix_hash, parent, keys = item
            return self.scripts.register_node(batch, prefix_hash, parent, keys, dry_run)

        checks = self._dry_run(registrations, queue_register, key_of=lambda item: None)
        links = [(h, p) for h, p, _ in registrations if p]
        self._check_cycles(links, {h: bool(c[1]) for (h, _, _), c in zip(registrations, checks)})

        batch = self.batch()
        self.links.queue_links(batch, links)
        batch.barrier()
        for registration in registrations:
            queue_register(batch, registration, False)
        batch.barrier()
        self.links.queue_links(batch, links)
        raise_first_error(batch.execute())

    def _registration(self, prefix_hash: Any, parent: Any, keys: Any) -> NodeRegistration:
        prefix_hash = self._hash(prefix_hash)
        if parent is not None:
            parent = self._hash(parent, "parent_hash")
            if parent == prefix_hash:
                raise CycleDetected(f"node {prefix_hash} cannot be its own parent",
                                    prefix_hash=prefix_hash)
        if isinstance(keys, str):
            raise InvalidArgument(f"keys of node {prefix_hash} must be a list of keys, not a str")
        keys = [self._key(k) for k in keys]
        check_unique(keys, "object key")
        for key in keys:
            if self.prefix_of(key) != prefix_hash:
                raise InvalidArgument(
                    f"key {key} belongs to prefix {self.prefix_of(key)}, not {prefix_hash}",
                    key=key, prefix_hash=prefix_hash)
        return prefix_hash, parent, keys

    def get_node(self, prefix_hash: str) -> NodeInfo | None:
        """A node's parent, children and registered keys; None if there is no such node."""
        prefix_hash = self._hash(prefix_hash)
        node = self.schema.node_keys(prefix_hash)
        batch = self.batch()
        batch.command("HGETALL", node.node)
        batch.command("SMEMBERS", node.children)
        batch.command("ZRANGE", node.keys, 0, -1)
        shard = self.schema.shard_keys(shard_of(prefix_hash))
        batch.command("ZSCORE", shard.leaves, prefix_hash)
        batch.command("ZSCORE", shard.soft_leaves, prefix_hash)
        fields, children, keys, score, soft_score = batch.execute()
        score = score if score is not None else soft_score
        if not fields:
            return None
        return NodeInfo(prefix_hash=prefix_hash, parent=fields.get("parent"),
                        children=sorted(children), keys=sorted(keys),
                        bytes=int(fields.get("bytes", 0)),
                        processing=int(fields.get("processing", 0)),
                        soft_pins=int(fields.get("soft_pins", 0)),
                        eviction_score=None if score is None else float(score))

    def get_keys_by_prefix(self, prefix_hash: str) -> list[str]:
        """The object keys registered under one prefix hash: one command, however big the
        store (the RFC's O(1) prefix query)."""
        self._require_tree()
        node = self.schema.node_keys(self._hash(prefix_hash))
        return sorted(self.client.zrange(node.keys, 0, -1))

    def get_subtree_keys(self, prefix_hash: str, max_depth: int | None = None) -> list[str]:
        """Keys registered under the node and its descendants down to max_depth levels below
        it (None = the whole subtree), breadth first; one round trip per level."""
        self._require_tree()
        prefix_hash = self._hash(prefix_hash)
        if max_depth is not None and (isinstance(max_depth, bool)
                                      or not isinstance(max_depth, int) or max_depth < 0):
            raise InvalidArgument(f"max_depth must be None or an int >= 0, got {max_depth!r}")
        limit = self.config.max_depth if max_depth is None else min(max_depth,
                                                                    self.config.max_depth)
        keys: list[str] = []
        seen = {prefix_hash}
        level = [prefix_hash]
        for _ in range(limit + 1):
            batch = self.batch()
            for node_hash in level:
                node = self.schema.node_keys(node_hash)
                batch.command("ZRANGE", node.keys, 0, -1)
                batch.command("SMEMBERS", node.children)
            results = batch.execute()
            level = []
            for node_keys, children in zip(results[0::2], results[1::2]):
                keys += sorted(node_keys)
                fresh = sorted(set(children) - seen)
                seen.update(fresh)
                level += fresh
            if not level:
                break
        return keys

    def match_prefix(self, hash_chain: Sequence[str]) -> int:
        """How many leading pages of the chain are usable: each has registered keys and all
        of them complete. One command per page; the first MATCH_PREFIX_PROBE pages go in
        one round trip and the rest in a second only if they all matched, so a miss near
        the start stays cheap."""
        self._require_tree()
        chain = [self._hash(h) for h in hash_chain]
        matched = 0
        for start, end in ((0, MATCH_PREFIX_PROBE), (MATCH_PREFIX_PROBE, len(chain))):
            batch = self.batch()
            for prefix_hash in chain[start:end]:
                batch.command("HMGET", self.schema.node_keys(prefix_hash).node, "key_count",
                              "processing")
            for key_count, processing in batch.execute():
                if not int(key_count or 0) or int(processing or 0):
                    return matched
                matched += 1
        return matched

    # -- capacity ------------------------------------------------------------------------

    def evict(self, target_ratio: float | None = None) -> EvictionReport:
        """Run one eviction job now, in this process: down to target_ratio of capacity
        (default high_watermark - eviction_ratio). target_ratio=0 frees everything
        evictable. See mooncake_redis.eviction."""
        from .eviction import Evictor

        return Evictor(self).run(target_ratio)

    def usage(self) -> Usage:
        """Bytes reserved against capacity, and object and node counts summed over shards."""
        batch = self.batch()
        batch.command("GET", self.schema.usage)
        for shard in all_shards():
            keys = self.schema.shard_keys(shard)
            batch.command("HGET", keys.stats, "objects")
            batch.command("SCARD", keys.nodes)
        used, *per_shard = batch.execute()
        return Usage(used_bytes=int(used or 0), capacity_bytes=self.config.capacity_bytes,
                     objects=sum(int(o or 0) for o in per_shard[0::2]),
                     nodes=sum(int(n) for n in per_shard[1::2]))


@dataclass(frozen=True)
class Deletion:
    """What one delete_objects call did."""

    statuses: dict[str, str]
    """Each key's outcome: "deleted", or why it stayed (see lua/delete_objects.lua)."""
    freed_bytes: int

    @property
    def deleted(self) -> int:
        return sum(1 for status in self.statuses.values() if status == "deleted")


OBJECT_FIELDS = ("size", "state", "lease_ms", "soft_pin", "hard_pin", "created_ms", "prefix")


def _object_info(key: str, fields: Mapping[str, str]) -> ObjectInfo:
    return ObjectInfo(key=key, size=int(fields["size"]), state=fields["state"],
                      lease_ms=int(float(fields["lease_ms"])), soft_pin=fields["soft_pin"] == "1",
                      hard_pin=fields["hard_pin"] == "1", created_ms=int(fields["created_ms"]),
                      prefix_hash=fields["prefix"])


def _delete_mode(force: bool) -> str:
    return "force" if check_flag(force, "force") else "remove"
