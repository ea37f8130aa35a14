"""A data plane on one FileByteStore: pages' bytes in files, their metadata, prefix tree
and eviction in the Index, files deleted when the Index's events say so.

What both examples/file_data_plane.py and the SGLang HiCache backend (hicache.py) do with
pages, written once: store a chain of pages (bytes first, then the one-phase put with the
page's parent and a replica naming the file), read pages back through their
replica descriptors, and free the bytes of objects the store let go (release). Capacity
is the segment's: when usage passes the high watermark, or a put is refused for space,
the data plane runs an eviction job itself (evict_inline; with RQ workers and a monitor
running, pass evict_inline=False and leave it to them).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mooncake_redis.capacity.eviction import LOCK_HELD, ROUND_LIMIT
from mooncake_redis.errors import (
    EventsLost,
    InvalidArgument,
    NoSpace,
    ObjectAlreadyExists,
    OutcomeUnknown,
    SegmentExists,
    SegmentNotMounted,
)
from mooncake_redis.index import Index
from mooncake_redis.models import ObjectInfo, Replica, Result
from mooncake_redis.store.events import Event, ShardObject
from mooncake_redis.store.objects import object_info
from mooncake_redis.values import object_field

from .byte_store import FileByteStore, Released, digest

log = logging.getLogger(__name__)

EVENTS_PER_READ = 1000
"""Events read per shard stream per read at most."""


@dataclass(frozen=True)
class Page:
    """One object to store: its key, its bytes and its parent page's hash (None: a root,
    or a parent this writer does not know)."""

    key: str
    data: bytes | memoryview
    parent: str | None = None


class FileDataPlane:
    """Pages of one namespace whose bytes live in one directory (one segment)."""

    def __init__(self, index: Index, store: FileByteStore, capacity_bytes: int | None = None,
                 *, evict_inline: bool = True, group: str | None = None,
                 consumer: str = "data-plane", resync_min_age_s: float = 60.0,
                 sweep_interval_s: float | None = None,
                 clock: Callable[[], float] = time.time):
        """capacity_bytes: mount the store's segment with it, unless it is mounted already
        (another process of the same data plane did); None: it must be mounted.
        group, consumer: this data plane's events consumer (default group
        "files:<segment>": every process of one directory shares it, each event goes to
        one of them; a restarted process must keep its consumer name to get the events it
        had not acked). resync_min_age_s: the grace of a file no stored object names:
        younger ones are kept (a put may be under way) until a later release() finds them
        old enough. sweep_interval_s: release() also sweeps the whole store (sweep())
        first thing and then every so often; None: never. clock: the time in seconds
        files' ages are measured with (the filesystem's; tests move it on)."""
        self.index = index
        self.store = store
        self.evict_inline = evict_inline
        self.resync_min_age_s = resync_min_age_s
        self.sweep_interval_s = sweep_interval_s
        self.clock = clock
        self.next_sweep = clock()
        """When release() sweeps next (with sweep_interval_s)."""
        self.due: dict[str, float] = {}
        """Shards whose resync spared files: when the first of them is past the grace
        (release() resynchronises the shard again then)."""
        if capacity_bytes is not None:
            with contextlib.suppress(SegmentExists):
                index.mount_segment(store.segment, capacity_bytes)
        segment = index.usage().segments.get(store.segment)
        if segment is None or not segment.mounted:
            raise SegmentNotMounted(f"segment {store.segment} is not mounted: give "
                                    "capacity_bytes to mount it")
        self.events = index.events(group or f"files:{store.segment}", consumer,
                                   start="earliest", block_ms=0, count=EVENTS_PER_READ,
                                   follow=False)
        self.waiting: list[Event] = []
        """`replaced` events whose old files may not be deleted yet (acked already: a
        process that stops before their time leaves those files behind)."""
        self.deleted_files = self.deleted_bytes = 0
        """What release() deleted so far."""
        self.conflicts = 0
        """Pages put() refused because the key was stored with other bytes."""
        self.linked = 0
        """Pages leading() linked under the page before them."""

    # -- writing -------------------------------------------------------------------------

    def put(self, pages: Sequence[Page]) -> list[bool]:
        """Store pages on this plane's store (see write); per page, whether it is stored
        now: True too when it was stored already with the same size and bytes; False,
        logged and counted in `conflicts`, when the stored object has another size or
        digest (two writers that name different bytes with one key)."""
        results = self.write(pages)
        existing = [page for page, result in zip(pages, results)
                    if isinstance(result.error, ObjectAlreadyExists)]
        same = self._same_bytes(existing) if existing else {}
        return [result.ok or same.get(page.key, False)
                for page, result in zip(pages, results)]

    def write(self, pages: Sequence[Page], *,
              stores: Mapping[str, Sequence[FileByteStore]] | None = None,
              soft_pin: bool = False, hard_pin: bool = False, upsert: bool = False
              ) -> list[Result[None]]:
        """write_pages on this plane's index: each page on the stores given (default this
        plane's own), eviction jobs in this process if evict_inline."""
        return write_pages(self.index, pages,
                           stores or {page.key: [self.store] for page in pages},
                           soft_pin=soft_pin, hard_pin=hard_pin, upsert=upsert,
                           evict=self.evict if self.evict_inline else None)

    def _same_bytes(self, pages: Sequence[Page]) -> dict[str, bool]:
        """Per page stored already, whether the stored object holds what this put brought:
        its size, and the digest its file name carries (one round trip, no lease). An
        object stored without a digest (an earlier release's file) is compared by size."""
        same = {}
        mismatched = []
        for page, info in zip(pages, self.peek([page.key for page in pages])):
            theirs = [r for r in (info.replicas if info else ()) if self.store.is_ours(r)]
            digests = {self.store.digest_of(r.location) for r in theirs} - {None}
            same[page.key] = info is not None and info.size == len(page.data) and (
                not digests or digest(page.data) in digests)
            if info and not same[page.key]:
                mismatched.append(page.key)
        if mismatched:
            self.conflicts += len(mismatched)
            log.warning("refused %d pages stored already with other bytes (size or digest "
                        "differ: two writers name different data with one key), e.g. %s",
                        len(mismatched), mismatched[0])
        return same

    def peek(self, keys: Sequence[str]) -> list[ObjectInfo | None]:
        """Per key, the stored object's metadata (no lease granted); None if absent."""
        index = self.index
        batch = index.batch()
        targets = [index.split_key(key) for key in keys]
        for prefix_hash, suffix in targets:
            batch.command("HGET", index.schema.node(prefix_hash), object_field(suffix))
        found = []
        for key, (prefix_hash, _), value in zip(keys, targets, batch.execute()):
            if isinstance(value, Exception):
                raise value
            found.append(object_info(key, prefix_hash, value))
        return found

    # -- reading -------------------------------------------------------------------------

    def replicas(self, keys: Sequence[str]) -> list[Replica | None]:
        """Per key, the replica on this store of the complete object (a read lease is
        granted, as get does); None if absent, processing or not on this store."""
        found: list[Replica | None] = []
        for result in self.index.batch_get_replica_desc(keys):
            ours = [r for r in (result.value or []) if self.store.is_ours(r)]
            found.append(ours[0] if result.ok and ours else None)
        return found

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Per key, its bytes; None if not stored (or its file went meanwhile)."""
        return [self.store.read(r) if r else None for r in self.replicas(keys)]

    def leading(self, keys: Sequence[str], first_parent: str | None = None) -> int:
        """How many leading keys of a chain of pages (key i's parent is key i-1's hash, key
        0's first_parent if given) are stored and complete: one round trip for the keys,
        one for their nodes' parents. A stored page whose node records no parent (written
        by a writer that did not know it) is linked under the page before it, as the chain
        shows (counted in `linked`), so eviction then takes the chain's leaves first."""
        if not keys:
            return 0
        present = self.index.batch_is_exist(list(keys))
        run = present.index(False) if False in present else len(present)
        self._link_orphans(keys[:run], first_parent)
        return run

    def _link_orphans(self, keys: Sequence[str], first_parent: str | None) -> None:
        index = self.index
        hashes = [index.split_key(key)[0] for key in keys]
        parents = [first_parent, *hashes[:-1]]
        asked = [i for i, parent in enumerate(parents) if parent is not None]
        if not asked:
            return
        batch = index.batch()
        for i in asked:
            batch.command("HGET", index.schema.node(hashes[i]), "p")
        orphans = [i for i, recorded in zip(asked, batch.execute()) if recorded is None]
        if orphans:
            results = self.index.batch_register_radix_tree_node(
                [(hashes[i], parents[i], [keys[i]]) for i in orphans])
            self.linked += sum(result.ok for result in results)

    # -- freeing -------------------------------------------------------------------------

    def release(self) -> Released:
        """Apply the events not applied yet, each acked once its files are deleted (a
        replaced object's old file waits in memory until free_after). Where a shard's
        events were lost (the streams are capped at events_max_len), its files that no
        stored object names are deleted instead."""
        total = Released()
        now_ms = self.index.redis_time_ms()
        self._add(total, self.store.release(self.waiting, now_ms))
        self.waiting = total.waiting
        lost = set()
        for item in self.events:  # follow=False: ends once every stream is read to its end
            if isinstance(item, EventsLost):
                if item.shard is not None:
                    lost.add(item.shard)
            else:
                self._add(total, self.store.release([item], now_ms))
        self.events.close()  # ack the last one
        self.waiting = total.waiting
        lost |= {shard for shard, due in self.due.items() if due <= self.clock()}
        if lost:  # and the shards whose spared files are past the grace now
            self._add(total, self._resync(lost))
        if self.sweep_interval_s is not None and self.next_sweep <= self.clock():
            self.next_sweep = self.clock() + self.sweep_interval_s
            self._add(total, self.sweep())
        return total

    def sweep(self) -> Released:
        """Delete this store's files that no stored object names and its writes' temporary
        files, older than resync_min_age_s: what writers that died between a file and its
        put left (one listing of the whole namespace). Younger ones are counted in
        `spared`; a later sweep takes them."""
        return self.store.collect(lambda key: True, self._live(self.events.list_all()),
                                  self.resync_min_age_s, self.clock())

    def _resync(self, shards: set[str]) -> Released:
        """collect() the shards' files from their listing (one shard's, or the namespace's
        for several); shards whose young files were spared are due again once the first
        of those is past the grace."""
        listing = self.events.list_shard(next(iter(shards))) if len(shards) == 1 else \
            self.events.list_all()
        released = self.store.collect(lambda key: self._shard_of(key) in shards,
                                      self._live(listing), self.resync_min_age_s,
                                      self.clock())
        for shard in shards:
            if released.due is None:
                self.due.pop(shard, None)
            else:
                self.due[shard] = released.due
        return released

    def _live(self, listing: Iterable[ShardObject]) -> set[str]:
        """The locations of this store's replicas among a listing's stored objects."""
        return {replica.location for stored in listing
                for replica in stored.replicas if self.store.is_ours(replica)}

    def _shard_of(self, key: str) -> str | None:
        try:
            return self.index.schema.shard(self.index.split_key(key)[0])
        except InvalidArgument:
            return None

    def _add(self, total: Released, released: Released) -> None:
        total.deleted += released.deleted
        total.bytes += released.bytes
        total.waiting += released.waiting
        total.spared += released.spared
        self.deleted_files += released.deleted
        self.deleted_bytes += released.bytes

    def evict(self, target_ratio: float | None = None, max_jobs: int = 64) -> Released:
        """Run eviction jobs (see Index.evict) until the target is reached or nothing more
        can go (a job stops after max_rounds_per_job rounds, and a deep chain loses a few
        levels per round), at most max_jobs; then delete the files they freed. A job that
        found another one running (a keeper's, a worker's) waits for that one to end and
        runs again, so the caller's retry comes after a job, not beside one."""
        for _ in range(max_jobs):
            stopped = self.index.evict(target_ratio).stopped
            if stopped == LOCK_HELD and self._other_job_ended():
                continue
            if stopped != ROUND_LIMIT:
                break
        return self.release()

    def _other_job_ended(self) -> bool:
        """Wait while the namespace's eviction lock is held, at most its TTL (a holder
        that died leaves it to expire); whether it was released."""
        lock = self.index.schema.eviction_lock
        deadline = time.monotonic() + self.index.settings.eviction_lock_ttl_ms / 1000
        pause = 0.001
        while self.index.client.exists(lock):
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        return True


def write_pages(index: Index, pages: Sequence[Page],
                stores: Mapping[str, Sequence[FileByteStore]], *, soft_pin: bool = False,
                hard_pin: bool = False, upsert: bool = False,
                evict: Callable[[float | None], object] | None = None,
                watermark: bool = True) -> list[Result[None]]:
    """Store pages: each page's bytes into a new file on each of its stores (a replica
    each), then one batch_put (batch_upsert with upsert): the one-phase put, one round
    trip, the pages complete and announced at once. Per page its Result: ok, or the error
    that refused it; a refused page leaves no file (ObjectAlreadyExists: stored already, by
    this or another writer). With evict (an eviction job to a target ratio; None: the
    usual one), a page refused for space gets one retry after a job that leaves room for
    it, and, with watermark, a job runs first when these pages would take usage above the
    high watermark (one usage() read per call): the pages, complete at once, are never
    what the job evicts to make room for them."""
    if evict is not None and watermark and _would_pass_watermark(index, pages):
        evict(room_for(index, pages))
    replicas: dict[str, list[Replica]] = {}
    try:
        for page in pages:
            replicas[page.key] = []
            for store in stores[page.key]:
                replicas[page.key].append(store.write(page.key, page.data))
        results = _put(index, pages, replicas, soft_pin, hard_pin, upsert)
    except OutcomeUnknown:
        raise  # the objects may be stored, naming these files: keep them
    except BaseException:
        _delete(stores, replicas, replicas)
        raise
    full = [page for page in pages if isinstance(results[page.key].error, NoSpace)]
    if full and evict is not None:
        evict(room_for(index, full))
        results.update(_put(index, full, replicas, soft_pin, hard_pin, upsert))
    _delete(stores, replicas, [key for key, result in results.items() if not result.ok])
    return [results[page.key] for page in pages]


def _would_pass_watermark(index: Index, pages: Sequence[Page]) -> bool:
    """Whether storing the pages (a replica each on its stores) would take usage above
    the high watermark."""
    usage = index.usage()
    need = sum(len(page.data) for page in pages)
    return bool(usage.capacity_bytes) and \
        usage.used_bytes + need > index.settings.high_watermark * usage.capacity_bytes


def _put(index: Index, pages: Sequence[Page], replicas: Mapping[str, Sequence[Replica]],
         soft_pin: bool, hard_pin: bool, upsert: bool) -> dict[str, Result[None]]:
    put = index.batch_upsert if upsert else index.batch_put
    results = put([(page.key, len(page.data), page.parent, replicas[page.key])
                   for page in pages], soft_pin=soft_pin, hard_pin=hard_pin)
    return {result.key: result for result in results}


def _delete(stores: Mapping[str, Sequence[FileByteStore]],
            replicas: Mapping[str, Sequence[Replica]], keys: Iterable[str]) -> None:
    """Delete the files written for pages nobody stored (a refused page's files are this
    writer's alone)."""
    for key in keys:
        for store, replica in zip(stores[key], replicas[key]):
            store.delete(replica.location)


def room_for(index: Index, pages: Sequence[Page]) -> float:
    """The eviction target that leaves room for these pages (admission lets a page take
    any free space: a refused shard borrows limit, borrowing.py): with a capacity of a few
    hundred pages, the usual target (high_watermark - eviction_ratio) may leave less."""
    return room_for_bytes(index, sum(len(page.data) for page in pages))


def room_for_bytes(index: Index, need: int) -> float:
    """room_for of pages that hold `need` bytes together."""
    settings = index.settings
    if not settings.capacity_bytes:
        return settings.eviction_target_ratio
    room = 1 - need / settings.capacity_bytes - settings.eviction_ratio
    return max(0.0, min(settings.eviction_target_ratio, room))
