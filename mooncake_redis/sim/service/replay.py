"""Serves page-chain requests on the real service (an `Index`), the way an engine does,
under one eviction mode, and counts what an engine would see.

Per request: probe the chain (`batch_is_exist`), take the usable prefix (`match_prefix`
with the radix tree; without it, the leading run of pages whose objects all exist: the
same definition), read the reused objects (`batch_get`, a short lease, so that reads
order eviction like an LRU touch without pinning everything), then store every missing
page (`batch_put_start` with its parent page, `batch_put_end`), each step in a later Redis
millisecond than the one before (`_past`), so the eviction order does not depend on the
machine's speed. Eviction runs in this
process (`index.evict()`): when a store does not fit, down to room for it, and after a
request that leaves usage above the high watermark, down to the target.

The replay knows which pages are stored: what it stored, minus what each eviction job
removed, read from the events streams (`eviction_feed.py`). Orphans are counted from
that, incrementally (`page_replay.OrphanMeter`), never by a census per job. Every probe
checks the knowledge against the store, and `take_census` reads the store once at the
end to check it again: any difference raises ReplayDiverged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mooncake_redis.errors import MooncakeRedisError, ReplayDiverged
from mooncake_redis.index import Index
from mooncake_redis.models import raise_first
from mooncake_redis.prefix import LEGACY_SHARD_COUNT
from mooncake_redis.settings import Settings
from mooncake_redis.sim.service.eviction_feed import EventFeed, events_cap
from mooncake_redis.sim.trace.kv_layout import KV_SUFFIXES
from mooncake_redis.sim.trace.page_replay import OrphanMeter, RequestCounters
from mooncake_redis.sim.trace.pages import ServicePages
from mooncake_redis.store.events import Event

MODES: dict[str, bool] = {"radix": True, "lease": False}
"""Mode name -> enable_radix_tree: leaf-first eviction, then Mooncake's lease order."""

READ_LEASE_TTL_MS = 1
"""A read pins its pages only while the engine copies them: with the default 10 s lease
everything read in a short replay would stay pinned and nothing would be evictable."""

SERVICE_CAPACITY_FACTOR = LEGACY_SHARD_COUNT
"""The service's own capacity_bytes, as a multiple of the simulated pool's. The service
admits per shard (docs/ARCHITECTURE.md, admission): a shard's limit is its share of the
free space, so a pool must hold thousands of objects before no shard refuses an object
while others have room. The simulated pools are smaller, so the replay admits against the
namespace-wide used bytes itself, as one whole-pool check, and gives the service a
capacity at which no shard ever refuses: what is compared is the eviction order, not the
admission granularity."""

EVICTIONS_PER_STORE = 8
"""Eviction jobs one request may run to make room for its pages. One is enough unless an
eviction takes pages of the request's own chain, which must then be written back too."""


@dataclass(frozen=True)
class PageLayout:
    """How a page is stored: which object keys, and each object's size."""

    object_bytes: int

    def keys(self, page_hash: str) -> list[str]:
        return [page_hash + suffix for suffix in KV_SUFFIXES]

    @property
    def page_bytes(self) -> int:
        return self.object_bytes * len(KV_SUFFIXES)


def open_namespace(url: str | None, namespace: str, mode: str, capacity_pages: int,
                   layout: PageLayout, leaves_per_round: int) -> Index:
    """A namespace emptied of an earlier run (a real Redis keeps them) and set up for one
    mode, at the default watermarks: the settings are written, not only filled in, so that
    neither an earlier run's stored values nor the environment's can change a run."""
    index = Index.from_url(url, namespace=namespace)
    index.remove_all(force=True)
    capacity_objects = capacity_pages * len(KV_SUFFIXES)
    index.set_config(
        enable_radix_tree=MODES[mode],
        capacity_bytes=capacity_pages * layout.page_bytes * SERVICE_CAPACITY_FACTOR,
        lease_ttl_ms=READ_LEASE_TTL_MS,
        leaves_per_round=leaves_per_round,
        events_max_len=events_cap(capacity_objects),
        high_watermark=Settings.high_watermark,
        eviction_ratio=Settings.eviction_ratio,
    )
    return index


@dataclass(frozen=True)
class Census:
    """The store read page by page: which pages are complete, which are orphans."""

    complete: frozenset[int]
    orphaned_pages: int
    orphaned_bytes: int


def take_census(index: Index, layout: PageLayout, pages: ServicePages) -> Census:
    """Every distinct page probed in the store (once, at the end: it costs a probe of every
    page). An orphan is a page with objects present whose parent page is not complete: no
    prefix match can reach it, yet it holds capacity."""
    per_page = len(KV_SUFFIXES)
    keys = [key for page_hash in pages.hashes for key in layout.keys(page_hash)]
    exists = index.batch_is_exist(keys)
    present = [exists[i:i + per_page] for i in range(0, len(exists), per_page)]
    complete = frozenset(page for page, objects in enumerate(present) if all(objects))
    parents = pages.trace.parents
    orphans = [page for page, objects in enumerate(present)
               if any(objects) and parents[page] >= 0 and parents[page] not in complete]
    infos = [index.object_info(key) for page in orphans
             for key, there in zip(layout.keys(pages.hashes[page]), present[page]) if there]
    return Census(complete, len(orphans), sum(info.size for info in infos if info is not None))


@dataclass
class ServiceCounters(RequestCounters):
    """What one replay counted, request by request and job by job (peak orphans: after
    any request or eviction job)."""

    eviction_jobs: int = 0
    evicted_objects: int = 0
    evicted_bytes: int = 0


@dataclass
class ServiceReplay:
    """One namespace, one mode: serves requests and keeps what it knows of the store."""

    index: Index
    layout: PageLayout
    pages: ServicePages
    capacity_pages: int
    counters: ServiceCounters = field(default_factory=ServiceCounters)
    stored: set[int] = field(default_factory=set)
    """Pages stored whole, as the replay knows it (checked against every probe)."""

    def __post_init__(self) -> None:
        self.capacity_bytes = self.capacity_pages * self.layout.page_bytes
        self.used_bytes = 0
        """Tracked here (this replay is the namespace's only writer), so the watermark check
        needs no usage() round trip over every shard per request."""
        self.orphans = OrphanMeter(self.pages.trace.parents, self.stored)
        self.feed = EventFeed(self.index)
        self.feed.skip_history()
        self._page_of = {page_hash: page for page, page_hash in enumerate(self.pages.hashes)}
        self._tree = self.index.settings.enable_radix_tree

    def serve(self, chain: Sequence[int]) -> None:
        counters = self.counters
        present = self._probe(chain)
        usable = self._usable_prefix(chain, present)
        read = [key for page in chain[:usable] for key in self._keys(page)]
        if read:  # the engine loads the reused KV: a read takes a lease
            results = self.index.batch_get(read)
            raise_first(results)
            self._past(max(result.value.lease_ms for result in results if result.value))
        self._store(chain)
        self._past(self.index.redis_time_ms())  # this request's stamps: all earlier
        if self.used_bytes > self.index.settings.high_watermark * self.capacity_bytes:
            self._evict(need_bytes=0)
        counters.requests += 1
        counters.requested_pages += len(chain)
        counters.hits += sum(present)
        counters.usable_hits += usable
        counters.orphaned_page_requests += self.orphans.orphans
        self._note_peak()

    def _past(self, ms: int) -> None:
        """Wait until Redis time is past `ms`: past the leases a request was granted
        before it stores its new pages (every page it read is evictable again and older
        than every page it stores), and past its stores before the next request (whose
        stamps are then all later), whatever the machine's speed. Without it the order of
        leaves stamped in one millisecond (a tie, broken by hash) changed from run to run
        with the load. Costs a millisecond or two a request."""
        while self.index.redis_time_ms() <= ms:
            time.sleep(0.0002)

    def _keys(self, page: int) -> list[str]:
        return self.layout.keys(self.pages.hashes[page])

    def _probe(self, chain: Sequence[int]) -> list[bool]:
        """Which pages of the chain are stored whole, from the store; a page stored in
        part, or otherwise than the replay knows, raises ReplayDiverged."""
        per_page = len(KV_SUFFIXES)
        exists = self.index.batch_is_exist([key for page in chain for key in self._keys(page)])
        present = []
        for position, page in enumerate(chain):
            objects = exists[position * per_page:(position + 1) * per_page]
            if any(objects) != all(objects) or all(objects) != (page in self.stored):
                raise ReplayDiverged(
                    f"page {self.pages.hashes[page]} has {sum(objects)} of {per_page} objects "
                    f"in the store; the replay knows it as "
                    f"{'stored' if page in self.stored else 'absent'}")
            present.append(all(objects))
        return present

    def _usable_prefix(self, chain: Sequence[int], present: list[bool]) -> int:
        """With the tree, match_prefix (checked against the probe); without it (where
        match_prefix is refused) the leading run of stored pages."""
        leading = present.index(False) if False in present else len(chain)
        if self._tree:
            matched = self.index.match_prefix([self.pages.hashes[page] for page in chain])
            if matched != leading:
                raise ReplayDiverged(f"match_prefix found {matched} pages, the probe {leading}")
        return leading

    def _store(self, chain: Sequence[int]) -> None:
        """Store the chain's missing pages (parent first, each with its parent page),
        evicting room for them: up to EVICTIONS_PER_STORE jobs, then they count as not
        stored. A chain longer than the pool stores its first pages only, as the in-memory
        replay does."""
        jobs = 0
        while True:
            # Again after each job: it may have taken pages of this very chain (reused
            # pages whose read lease ran out, or, without the tree, old pages past a gap);
            # the engine holds their KV and writes them back, so that no page is stored
            # under a dead parent.
            missing = [page for page in chain if page not in self.stored]
            storing = missing[:self.capacity_pages]
            if not storing or self._fits(storing):
                break
            if jobs == EVICTIONS_PER_STORE or not self._evict(len(storing) *
                                                                self.layout.page_bytes):
                storing = []
                break
            jobs += 1
        if storing:
            self._put(storing)
        self.counters.pages_not_stored += len(missing) - len(storing)

    def _fits(self, pages: list[int]) -> bool:
        return self.used_bytes + len(pages) * self.layout.page_bytes <= self.capacity_bytes

    def _put(self, pages: list[int]) -> None:
        """put_start every object of the pages and put_end them. The service has room for
        them (its capacity is SERVICE_CAPACITY_FACTOR times the pool's), so any refusal
        is a bug of the replay and raises."""
        size = self.layout.object_bytes
        items = [(key, size, self.pages.parent_hash(page)) for page in pages
                 for key in self._keys(page)]
        results = self.index.batch_put_start(items)
        refused = [result for result in results if result.error is not None]
        if refused:
            raise MooncakeRedisError(f"{len(refused)} of {len(items)} put_start refused, "
                                     f"first: {refused[0].error}")
        raise_first(self.index.batch_put_end([key for key, _, _ in items]))
        self.feed.expect_stored(len(items))
        self.used_bytes += len(items) * size
        for page in pages:  # parent first, as the in-memory replay inserts them
            self.stored.add(page)
            self.orphans.stored(page)
        self.counters.pages_stored += len(pages)

    def _evict(self, need_bytes: int) -> int:
        """One eviction job (and its follow-ups while it stops at its round limit), down to
        the usual target or lower when a store needs more room; then what it evicted is
        read from the events streams. Returns the objects evicted."""
        capacity = self.capacity_bytes
        target_bytes = min(self.index.settings.eviction_target_ratio * capacity,
                           max(0, capacity - need_bytes))
        target_ratio = target_bytes / (capacity * SERVICE_CAPACITY_FACTOR)
        evicted = 0
        while True:
            report = self.index.evict(target_ratio)
            self.counters.eviction_jobs += 1
            self.counters.evicted_objects += report.objects
            self.counters.evicted_bytes += report.bytes
            self.used_bytes = report.used_bytes
            self._forget(self.feed.read(evicted_objects=report.objects))
            evicted += report.objects
            if not report.more_work:
                return evicted

    def _forget(self, events: Sequence[Event]) -> None:
        """Take the evicted pages out of what the replay knows, one by one: each removal
        keeps the orphan count exact for the pages still stored."""
        evicted_pages = dict.fromkeys(self._page_of.get(event.hash, -1)
                                      for event in events)
        for page in evicted_pages:
            if page not in self.stored:
                raise ReplayDiverged(f"eviction took page {page} (-1: not of this trace), "
                                     "which the replay does not know as stored")
            self.stored.discard(page)
            self.orphans.evicted(page)
        self.counters.evicted_pages += len(evicted_pages)
        self._note_peak()

    def _note_peak(self) -> None:
        counters = self.counters
        counters.peak_orphaned_pages = max(counters.peak_orphaned_pages, self.orphans.orphans)

    def check(self, census: Census) -> None:
        """The end census against what the replay knows; ReplayDiverged if they differ."""
        if census.complete != self.stored or census.orphaned_pages != self.orphans.orphans:
            raise ReplayDiverged(
                f"the store holds {len(census.complete)} pages ({census.orphaned_pages} "
                f"orphaned); the replay knows {len(self.stored)} ({self.orphans.orphans} "
                "orphaned)")
