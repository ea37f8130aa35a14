"""The public API with Mooncake's names: the object store and the RFC's radix tree index on
Redis. Index checks the caller's input and composes the parts; the work is done in
registration, objects, deletion, tree, eviction and admission (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

from .capacity import admission
from .capacity.eviction import EvictionReport, Evictor
from .connection import connect
from .context import Context
from .errors import InvalidArgument, RadixTreeDisabled
from .executor import Batch
from .keys import KeySchema
from .models import (
    NodeInfo,
    NodeItem,
    ObjectInfo,
    PutItem,
    PutRow,
    Replica,
    ReplicaSpec,
    Result,
    Usage,
    raise_first,
)
from .observers import count_refusals
from .segment_registry import Segment
from .settings import DEFAULT_NAMESPACE, DEFAULT_URL, ENV_NAMESPACE, ENV_URL, Settings
from .store import objects, registration, segments, waiting
from .store.deletion import delete_objects
from .store.events import Consumer
from .tree import queries
from .tree.links import ResolverReport, resolve
from .tree.matching import compile_pattern, scan_objects
from .urls import redact
from .validation import (
    check_depth,
    check_flag,
    check_node_items,
    check_put_items,
    check_replicas,
    check_size,
    check_unique,
    check_wait_ms,
    plain_rows,
)
from .values import HARD_PIN, SOFT_PIN, pack_replicas

if TYPE_CHECKING:
    from .operations.metrics import Exporter

class Index:
    """A namespace of KV-cache objects and their radix tree, shared through Redis by any
    number of clients and workers.

    Batch calls return one Result per item (written, or refused with the error that says
    why: a refused item wrote nothing) and raise only for caller errors found before
    anything is sent. Single calls are batches of one that raise the item's error."""

    def __init__(self, client: Any, namespace: str | None = None, *, strict: bool = False,
                 read_only: bool = False, token: str | None = None, **settings: Any):
        """settings: namespace settings (settings.Settings) to fill in where none is stored
        yet, and client options (settings.ClientOptions). strict=True raises where a
        given setting differs from the stored one; read_only=True writes nothing at open."""
        namespace = namespace or os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
        self.ctx = Context.open(client, namespace, settings, strict=strict, read_only=read_only,
                                token=token)
        self.url: str | None = None
        """The URL this index was opened with; None if built from a client."""
        self.on_no_space: Callable[[Index], None] | None = _request_eviction
        """Called once per call in which put_start was refused for space."""

    @classmethod
    def from_url(cls, url: str | None = None, namespace: str | None = None,
                 **settings: Any) -> Index:
        """`redis://`, `rediss://`, `unix://`, `redis+cluster://host:port[,host:port...]`, or
        `memory://NAME` (in process; the default when no URL is given and
        MOONCAKE_REDIS_URL is unset)."""
        url = url or os.environ.get(ENV_URL) or DEFAULT_URL
        index = cls(connect(url), namespace, **settings)
        index.url = url
        return index

    def __repr__(self) -> str:
        where = redact(self.url) if self.url else "a client"
        return f"Index(namespace={self.namespace!r} at {where})"

    @property
    def namespace(self) -> str:
        return self.ctx.schema.namespace

    @property
    def client(self) -> Any:
        return self.ctx.client

    @property
    def settings(self) -> Settings:
        """The namespace's settings (re-read every settings_refresh_seconds)."""
        return self.ctx.settings

    @property
    def schema(self) -> KeySchema:
        """The namespace's key names (keys.KeySchema): the Redis key of each node, setting,
        shard stats hash and events stream, and the shard a prefix hash is in
        (`schema.shard`, `schema.shards`: as many as the namespace's shard_count)."""
        return self.ctx.schema

    def redis_time_ms(self) -> int:
        """Redis's clock (TIME) in ms: the clock of leases, eviction scores and events."""
        return self.ctx.redis_time_ms()

    def split_key(self, key: str) -> tuple[str, str]:
        """(prefix hash, suffix) of an object key under the namespace's prefix extractor;
        raises InvalidArgument for a key the namespace cannot store."""
        return self.ctx.split(key)

    def batch(self) -> Batch:
        """A batch of plain Redis commands (`command(...)`, then `execute()`: the replies in
        order, errors in place) sent the way the index sends its own: by key to the node
        that serves it, reads re-sent after a lost reply (writes only if retry_safe), the
        cleanups this client owes first. For parts that keep data of their own beside the
        namespace's (the vLLM ingester's token maps) or read it raw (a data plane)."""
        return self.ctx.batch()

    def metrics_exporter(self) -> Exporter:
        """A Prometheus exporter of this namespace's gauges (operations/metrics.py; needs the
        `metrics` extra): `count_this_process()` adds this process's counters, `serve(port)`
        serves them."""
        from .operations.metrics import Exporter

        return Exporter([self.ctx])

    def set_config(self, **changes: Any) -> Settings:
        """Change namespace settings for every client of the namespace."""
        from .operations.configuration import change_settings

        return change_settings(self.ctx, changes)

    def reset_config(self, *names: str) -> Settings:
        """Drop stored settings: every client of the namespace then reads their defaults
        (and mends a stored value that cannot be read). The rules of set_config apply."""
        from .operations.configuration import reset_settings

        return reset_settings(self.ctx, names)

    def close(self) -> None:
        """Send the cleanups this client still owes (confirmed links); optional: the
        resolver does them otherwise."""
        self.ctx.flush()

    # -- objects -------------------------------------------------------------------------

    def put_start(self, key: str, size: int, parent_block_hash: str | None = None,
                  soft_pin: bool = False, hard_pin: bool = False,
                  replicas: Sequence[ReplicaSpec] | None = None, *,
                  wait_ms: int | None = None) -> None:
        """Create an object in state processing, counted against capacity, in its prefix's
        node; with the radix tree on and a parent given, link the node to its parent.
        replicas: where the data plane put its bytes (Replica or (segment, location[,
        medium]) each, on mounted segments); each replica's bytes count against its
        segment. wait_ms: as in batch_put_start."""
        self._raise_single(self.batch_put_start([(key, size, parent_block_hash, replicas)],
                                                soft_pin=soft_pin, hard_pin=hard_pin,
                                                wait_ms=wait_ms))

    def batch_put_start(self, items: Iterable[PutItem], soft_pin: bool = False,
                        hard_pin: bool = False, *, wait_ms: int | None = None
                        ) -> list[Result[None]]:
        """put_start for many (key, size[, parent hash[, replicas]]) at once: one round trip
        on a single Redis for the whole batch, links included; one Result per item. Items
        refused for space ask for eviction (on_no_space); with wait_ms > 0 (default: the
        put_wait_ms setting) they are sent again until written or wait_ms has passed, and
        without a queue this call runs one eviction job itself (waiting.py)."""
        return self._put(items, soft_pin, hard_pin, "start", "put_start", wait_ms)

    def put(self, key: str, size: int, parent_block_hash: str | None = None,
            soft_pin: bool = False, hard_pin: bool = False,
            replicas: Sequence[ReplicaSpec] | None = None, *,
            wait_ms: int | None = None) -> None:
        """The one-phase put of a writer whose bytes are already in place (a file data
        plane, a HiCache backend, the Mooncake drop-in's byte put): put_start and put_end
        in one step, the object complete and announced (`stored`) at once; the same
        admission, links and checks as put_start."""
        self._raise_single(self.batch_put([(key, size, parent_block_hash, replicas)],
                                          soft_pin=soft_pin, hard_pin=hard_pin,
                                          wait_ms=wait_ms))

    def batch_put(self, items: Iterable[PutItem], soft_pin: bool = False,
                  hard_pin: bool = False, *, wait_ms: int | None = None
                  ) -> list[Result[None]]:
        """put for many (key, size[, parent hash[, replicas]]) at once: one script call per
        Redis node (one round trip on a single Redis), links included; one Result per item.
        A re-send of this writer's own put (same size and replicas) answers OK again."""
        return self._put(items, soft_pin, hard_pin, "put", "put", wait_ms)

    def upsert_start(self, key: str, size: int, parent_block_hash: str | None = None,
                     soft_pin: bool = False, hard_pin: bool = False,
                     replicas: Sequence[ReplicaSpec] | None = None, *,
                     wait_ms: int | None = None) -> None:
        """put_start that may replace a stored object (Mooncake's UpsertStart): a complete
        object becomes processing with the new size and replicas; its old replicas are
        announced in a `replaced` event whose free_after is the end of the old object's
        read lease, so readers holding a lease keep reading them until then. Finish with
        upsert_end (or abandon with upsert_revoke, which deletes the object)."""
        self._raise_single(self.batch_upsert_start([(key, size, parent_block_hash, replicas)],
                                                   soft_pin=soft_pin, hard_pin=hard_pin,
                                                   wait_ms=wait_ms))

    def batch_upsert_start(self, items: Iterable[PutItem], soft_pin: bool = False,
                           hard_pin: bool = False, *, wait_ms: int | None = None
                           ) -> list[Result[None]]:
        return self._put(items, soft_pin, hard_pin, "upsert_start", "upsert_start", wait_ms)

    def upsert(self, key: str, size: int, parent_block_hash: str | None = None,
               soft_pin: bool = False, hard_pin: bool = False,
               replicas: Sequence[ReplicaSpec] | None = None, *,
               wait_ms: int | None = None) -> None:
        """The one-phase put that may replace a stored object (Mooncake's Upsert): the new
        object is complete at once; the replaced one's replicas are announced in a
        `replaced` event with the time after which they may be freed."""
        self._raise_single(self.batch_upsert([(key, size, parent_block_hash, replicas)],
                                             soft_pin=soft_pin, hard_pin=hard_pin,
                                             wait_ms=wait_ms))

    def batch_upsert(self, items: Iterable[PutItem], soft_pin: bool = False,
                     hard_pin: bool = False, *, wait_ms: int | None = None
                     ) -> list[Result[None]]:
        return self._put(items, soft_pin, hard_pin, "upsert", "upsert", wait_ms)

    def upsert_end(self, key: str) -> None:
        """Complete an upsert (as put_end)."""
        self.put_end(key)

    def batch_upsert_end(self, keys: Sequence[str]) -> list[Result[None]]:
        return self.batch_put_end(keys)

    def upsert_revoke(self, key: str) -> None:
        """Abandon an upsert: the object is deleted (its old data was replaced already)."""
        self.put_revoke(key)

    def batch_upsert_revoke(self, keys: Sequence[str]) -> list[Result[None]]:
        return self.batch_put_revoke(keys)

    def _put(self, items: Iterable[PutItem], soft_pin: bool, hard_pin: bool,
             mode: str, operation: str, wait_ms: int | None) -> list[Result[None]]:
        pins = (SOFT_PIN if check_flag(soft_pin, "soft_pin") else 0) | \
            (HARD_PIN if check_flag(hard_pin, "hard_pin") else 0)
        settings = self.settings  # read (and refreshed if due) once per call
        tree_on = settings.enable_radix_tree
        max_size = settings.max_object_size
        rows = check_put_items(items, f"{operation} item")
        targets = self._split_items(rows)
        links_checked = tree_on and targets is not None and self._links_well_formed(
            rows, targets, settings.max_key_length)
        if targets is not None and (links_checked or not tree_on) and \
                plain_rows(rows, max_size):  # the engines' batch: checked at once, in C
            prepared = [(key, prefix_hash, suffix, size, parent if tree_on else None, "")
                        for (key, size, parent, _), (_, prefix_hash, suffix) in
                        zip(rows, targets)]
        else:
            prepared = self._prepared(rows, targets, tree_on, links_checked, max_size)
        check_unique([item[0] for item in prepared], "object key")
        wait_ms = settings.put_wait_ms if wait_ms is None else check_wait_ms(wait_ms)
        results = waiting.write_waiting(
            self.ctx, prepared, pins, wait_ms, mode,
            on_no_space=self.on_no_space and functools.partial(self.on_no_space, self),
            evict=None if self.ctx.options.queue_url else self.evict)
        return self._counted(operation, results)

    def _prepared(self, rows: list[PutRow], targets: list[tuple[str, str, str]] | None,
                  tree_on: bool, links_checked: bool, max_size: int
                  ) -> list[registration.Prepared]:
        """The items checked one by one, each bad value raising its own error in item
        order (a key, a size, a parent, replicas)."""
        prepared: list[registration.Prepared] = []
        parents: dict[str, str] = {}  # each parent (and each linked node) checked once a call
        linked: set[str] = set()
        for (key, size, parent, replicas), target in zip(rows, targets or repeat(None)):
            if target is None:
                prefix_hash, suffix = self.ctx.split(key)
            else:
                _, prefix_hash, suffix = target
            if size.__class__ is not int or not 0 <= size <= max_size:
                size = check_size(size, max_size)  # raises, or makes an int subclass an int
            if parent is not None and tree_on and not links_checked:
                known = parents.get(parent) if parent.__class__ is str else None
                if known is None:
                    known = self.ctx.prefix_hash(parent, "parent_block_hash")
                    if parent.__class__ is str:
                        parents[parent] = known
                parent = known
                if prefix_hash not in linked:
                    if not self.ctx.extractor.is_hash(prefix_hash):
                        raise InvalidArgument(
                            f"key {key!r} has no prefix hash under the "
                            f"{self.ctx.extractor.name!r} rule (a hash is "
                            f"{self.ctx.extractor.hash_form}), so it cannot be linked to a "
                            "parent; store it without parent_block_hash", key=key)
                    linked.add(prefix_hash)
            prepared.append((key, prefix_hash, suffix, size, parent if tree_on else None,
                             "" if replicas is None else
                             pack_replicas(check_replicas(replicas))))
        return prepared

    def _split_items(self, items: list[PutRow]) -> list[tuple[str, str, str]] | None:
        """ctx.split_all of the items' keys; None if a key is bad: the caller then splits
        each key in turn, so the first bad item raises its own error (as a bad size or
        parent before it would)."""
        try:
            return self.ctx.split_all([item[0] for item in items])
        except Exception:  # noqa: BLE001 - ctx.split raises it again, in item order
            return None

    def _links_well_formed(self, items: list[PutRow],
                           targets: list[tuple[str, str, str]], max_length: int) -> bool:
        """Whether every parent given, and every node linked to one, is a well-formed
        hash, checked at once where the extractor can check a list (Extractor.all_hashes,
        as ctx.node_hashes does); False says only "check each"."""
        all_hashes = self.ctx.extractor.all_hashes
        parents = [item[2] for item in items if item[2] is not None]
        if not parents:
            return True
        if all_hashes is None or not all_hashes(parents) or \
                max(map(len, parents)) > max_length:
            return False
        return all_hashes([target[1] for item, target in zip(items, targets)
                           if item[2] is not None])

    def put_end(self, key: str) -> None:
        """Complete a processing object (its lease starts now, so objects nobody reads are
        evicted oldest first)."""
        self._raise_single(self.batch_put_end([key]))

    def batch_put_end(self, keys: Sequence[str]) -> list[Result[None]]:
        return self._counted("put_end", objects.put_end(self.ctx, self._targets(keys)))

    def put_revoke(self, key: str) -> None:
        """Abandon this client's processing object: delete it and release its bytes."""
        self._raise_single(self.batch_put_revoke([key]))

    def batch_put_revoke(self, keys: Sequence[str]) -> list[Result[None]]:
        return self._counted("put_revoke", delete_objects(self.ctx, self._targets(keys),
                                                          "revoke"))

    def get(self, key: str) -> ObjectInfo | None:
        """The object's metadata, granting a lease of lease_ttl_ms (Redis time); None if the
        key is not stored. Raises ObjectNotReady while it is processing."""
        (result,) = self.batch_get([key])
        return result.unwrap()

    def batch_get(self, keys: Sequence[str]) -> list[Result[ObjectInfo]]:
        """get for many keys: one round trip, one Result per key (value None if absent)."""
        return self._counted("get", objects.get(self.ctx, self._targets(keys)))

    def get_replica_desc(self, key: str) -> list[Replica]:
        """Where a complete object's bytes are (Mooncake's get_replica_desc), granting a
        lease as get does; [] if the key is not stored (or was stored without replicas)."""
        info = self.get(key)
        return list(info.replicas) if info else []

    def batch_get_replica_desc(self, keys: Sequence[str]) -> list[Result[list[Replica]]]:
        return [Result(r.key, error=r.error) if r.error else
                Result(r.key, value=list(r.value.replicas) if r.value else [])
                for r in self.batch_get(keys)]

    def is_exist(self, key: str, lease: bool | None = None) -> bool:
        """Whether a complete object is stored. Grants no lease unless probe_extends_lease
        (lease=True grants one, lease=False none, whatever the setting)."""
        return self.batch_is_exist([key], lease)[0]

    def batch_is_exist(self, keys: Sequence[str], lease: bool | None = None) -> list[bool]:
        targets = self._targets(keys, unique=False)
        if self.settings.probe_extends_lease if lease is None else check_flag(lease, "lease"):
            return [r.ok and r.value is not None for r in objects.get(self.ctx, targets, True)]
        return objects.exist(self.ctx, targets)

    def object_info(self, key: str) -> ObjectInfo | None:
        """The object's metadata without granting a lease (for inspection)."""
        (target,) = self._targets([key])
        return objects.peek(self.ctx, *target)

    def remove(self, key: str, force: bool = False) -> None:
        """Delete a complete object. Refused while it is leased or processing, unless force."""
        self._raise_single(self.batch_remove([key], force))

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> list[Result[None]]:
        mode = "force" if check_flag(force, "force") else "remove"
        return self._counted("remove", delete_objects(self.ctx, self._targets(keys), mode))

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Delete every object whose key matches the regular expression (searched, RE2:
        linear time), walking the namespace's nodes with SCAN. Returns how many went."""
        matches = compile_pattern(pattern)
        return self._remove_matching(matches, force)

    def remove_all(self, force: bool = False) -> int:
        """Delete every object (leased and processing ones only with force)."""
        return self._remove_matching(lambda key: True, force)

    def _remove_matching(self, matches: Callable[[str], bool], force: bool) -> int:
        mode = "force" if check_flag(force, "force") else "remove"
        deleted = 0
        for page in scan_objects(self.ctx):
            targets = [(key, prefix_hash, suffix) for key, prefix_hash, suffix in page
                       if matches(key)]
            deleted += sum(r.ok for r in delete_objects(self.ctx, targets, mode))
        return deleted

    # -- radix tree ----------------------------------------------------------------------

    def register_radix_tree_node(self, prefix_hash: str, parent_hash: str | None = None,
                                 keys: Sequence[str] = ()) -> None:
        """Path B of the RFC: record a node's parent (filling a shell created by an earlier
        child), after checking that the given keys are stored under it."""
        self._raise_single(self.batch_register_radix_tree_node([(prefix_hash, parent_hash,
                                                                   keys)]))

    def batch_register_radix_tree_node(self, nodes: Iterable[NodeItem]
                                       ) -> list[Result[None]]:
        """register_radix_tree_node for many (prefix hash, parent hash, keys): one round
        trip on a single Redis; one Result per node."""
        self._require_tree()
        writes = []
        for prefix_hash, parent, keys in check_node_items(nodes):
            prefix_hash = self.ctx.prefix_hash(prefix_hash)
            if parent is not None:
                parent = self.ctx.prefix_hash(parent, "parent_hash")
            suffixes = []
            for key, key_hash, suffix in self._targets(_key_list(keys, prefix_hash)):
                if key_hash != prefix_hash:
                    raise InvalidArgument(f"key {key} belongs to prefix {key_hash}, not "
                                          f"{prefix_hash}", key=key, prefix_hash=prefix_hash)
                suffixes.append(suffix)
            writes.append(registration.Write(prefix_hash, prefix_hash, parent,
                                             registered=suffixes))
        check_unique([w.prefix_hash for w in writes], "prefix hash")
        return self._counted("register_radix_tree_node", registration.write(self.ctx, writes))

    def get_node(self, prefix_hash: str) -> NodeInfo | None:
        """A node's parent, children and objects; None if there is no such node."""
        return queries.get_node(self.ctx, self._hash(prefix_hash))

    def get_keys_by_prefix(self, prefix_hash: str) -> list[str]:
        """The object keys stored under one prefix hash: one command, however big the store
        (the RFC's O(1) prefix query)."""
        self._require_tree()
        return queries.keys_by_prefix(self.ctx, self._hash(prefix_hash))

    def get_subtree_keys(self, prefix_hash: str, max_depth: int | None = None) -> list[str]:
        """Keys of the node and its descendants down to max_depth levels below it (None =
        the whole subtree, bounded by the max_depth setting), breadth first."""
        self._require_tree()
        limit = self.settings.max_depth
        depth = limit if max_depth is None else min(check_depth(max_depth), limit)
        return queries.subtree_keys(self.ctx, self._hash(prefix_hash), depth)

    def match_prefix(self, hash_chain: Sequence[str]) -> int:
        """How many leading pages of the chain are usable: each has objects, all complete.
        At most two round trips (the first 32 pages, then the rest)."""
        self._require_tree()
        if isinstance(hash_chain, (str, bytes)):
            raise InvalidArgument("match_prefix takes a sequence of prefix hashes, not one "
                                  "string; wrap it in a list")
        return queries.match_prefix(self.ctx, self.ctx.node_hashes(hash_chain))

    # -- capacity ------------------------------------------------------------------------

    def usage(self) -> Usage:
        """Used bytes, objects and nodes: sums of the shards' exact counters; with
        segments, each one's capacity and used bytes."""
        return admission.usage(self.ctx)

    # -- segments ------------------------------------------------------------------------

    def mount_segment(self, name: str, capacity_bytes: int) -> Segment:
        """Register a segment of storage that replicas can be put on. While any segment is
        registered, the namespace's capacity is the sum of the mounted ones."""
        return segments.mount(self.ctx, name, capacity_bytes)

    def remount_segment(self, name: str, capacity_bytes: int) -> Segment:
        """Mount again (a data plane re-registering after a restart) or change a mounted
        segment's capacity; its replicas stay."""
        return segments.mount(self.ctx, name, capacity_bytes, remount=True)

    def unmount_segment(self, name: str, max_nodes: int | None = None
                        ) -> segments.UnmountReport:
        """Unmount a segment: puts on it are refused from now on; every replica on it is
        dropped, objects left without replicas are deleted (and unregistered from the
        tree, with cascade), each announced as `invalidated`. With max_nodes, stop after
        sweeping that many nodes (report.done False): the next call resumes."""
        return segments.unmount(self.ctx, name, max_nodes)

    def segment_heartbeat(self, name: str) -> None:
        """Tell the store the segment's owner is alive (segment_heartbeat_timeout_ms)."""
        segments.heartbeat(self.ctx, name)

    def unmount_silent_segments(
            self, on_page: Callable[[segments.UnmountReport], None] | None = None
    ) -> list[segments.UnmountReport]:
        """Unmount every mounted segment whose owner's last heartbeat is older than
        segment_heartbeat_timeout_ms by Redis TIME (0: never): what the monitor does every
        interval, and a Mooncake drop-in store's keeper every round. on_page is called
        after each page of a sweep (a keeper heartbeats its own segment there)."""
        return segments.unmount_silent(self.ctx, on_page)

    def evict(self, target_ratio: float | None = None) -> EvictionReport:
        """Run one eviction job now, in this process: down to target_ratio of capacity
        (default high_watermark - eviction_ratio). target_ratio=0 frees everything
        evictable. See mooncake_redis.capacity.eviction."""
        return Evictor(self.ctx).run(target_ratio)

    def resolve(self, grace_ms: int | None = None) -> ResolverReport:
        """Run the resolver now (every eviction job runs it too): settle pending links and
        unfinished unlinks older than grace_ms (default resolver_grace_ms)."""
        return resolve(self.ctx, grace_ms)

    # -- plumbing ------------------------------------------------------------------------

    def _targets(self, keys: Sequence[str], unique: bool = True) -> list[tuple[str, str, str]]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
            raise InvalidArgument(f"keys must be a list of object keys, got "
                                  f"{type(keys).__name__}")
        self.settings  # noqa: B018  # refresh the settings (if due) once, not per key
        targets = self.ctx.split_all(keys)
        if unique:
            check_unique(keys, "object key")
        return targets

    def _hash(self, prefix_hash: Any) -> str:
        return self.ctx.node_hash(prefix_hash)

    def _require_tree(self) -> None:
        if not self.settings.enable_radix_tree:
            raise RadixTreeDisabled(f"namespace {self.namespace!r} runs with "
                                    "enable_radix_tree=False")

    def _counted(self, operation: str, results: list[Result[Any]]) -> list[Result[Any]]:
        """The results as they are; refused items are counted for metrics (observers.py)."""
        count_refusals(self.namespace, operation, results)
        return results

    @staticmethod
    def _raise_single(results: list[Result[Any]]) -> None:
        raise_first(results)

    # -- events --------------------------------------------------------------------------

    def events(self, group: str | None = None, consumer: str | None = None, *,
               start: str = "latest", block_ms: int = 5000, count: int = 100,
               follow: bool = True) -> Consumer:
        """A reader of what changes (stored, removed, revoked, evicted objects): iterate it.
        With a group, at least once (an event is acked once the loop has run for it; a
        restarted consumer gets its unacked ones again); without, from now or from the
        oldest event kept (start="earliest"), at most once. Lost events (the streams are
        capped) come as EventsLost markers; see events.Consumer and docs/EVENTS.md."""
        return Consumer(self.ctx, group, consumer, start=start, block_ms=block_ms,
                        count=count, follow=follow)


def _key_list(keys: Any, prefix_hash: str) -> list[str]:
    if isinstance(keys, (str, bytes)) or keys is None or not isinstance(keys, Iterable):
        raise InvalidArgument(f"keys of node {prefix_hash} must be a list of object keys, got "
                              f"{type(keys).__name__}", prefix_hash=prefix_hash)
    return list(keys)


def _request_eviction(index: Index) -> None:
    """With a queue configured, ask an RQ worker to evict (at most one job queued)."""
    if index.ctx.options.queue_url:
        from .workers.jobs import request_eviction

        request_eviction(index.ctx)
