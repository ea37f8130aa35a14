"""`sim --backend redis`: replay the workload's page chains on the service, with the radix
tree (leaf-first eviction) and without it (Mooncake's lease-ordered eviction)."""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm import tqdm

from mooncake_redis.connection import redact
from mooncake_redis.errors import NoSpace
from mooncake_redis.index import Index
from mooncake_redis.models import raise_first
from mooncake_redis.prefix import SHARD_COUNT
from mooncake_redis.settings import DEFAULT_URL, ENV_URL
from mooncake_redis.sim.kv_layout import KV_SUFFIXES, kv_object_bytes
from mooncake_redis.sim.report import format_table, write_results
from mooncake_redis.sim.workload import SpanKind, Workload, page_chains

CSV_NAME = "redis_results.csv"
JSON_NAME = "redis_results.json"

DEFAULT_CAPACITY_FRACTION = 0.3
"""Capacity as a fraction of the bytes the whole workload would store."""

MODES: tuple[tuple[str, bool], ...] = (("radix", True), ("lease", False))
"""(mode name, enable_radix_tree): leaf-first eviction, then the Mooncake baseline."""

READ_LEASE_TTL_MS = 1
"""A read pins its pages only while the engine copies them: with the default 10 s lease
everything read in a short replay would stay pinned and nothing would be evictable."""

SERVICE_CAPACITY_FACTOR = SHARD_COUNT
"""The service's own capacity_bytes, as a multiple of the simulated pool's. The service
admits per shard (docs/ARCHITECTURE.md, admission): a shard's limit is its share of the
free space, so a pool must hold thousands of objects before no shard refuses an object
while others have room. The simulated pools are far smaller (hundreds of pages, to replay
in seconds), so the replay admits against the namespace-wide used bytes itself, as one
whole-pool check, and gives the service a capacity at which no shard ever refuses first:
what is compared is the eviction order, not the admission granularity."""

EVICTIONS_PER_STORE = 8
"""Eviction jobs one request may run to make room for its pages. One is enough unless an
eviction takes objects of the request's own chain, which must then be written back too."""

_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mode", "{}"),
    ("hit_rate", "{:.2%}"),
    ("reused_pages", "{:,}"),
    ("requested_pages", "{:,}"),
    ("pages_stored", "{:,}"),
    ("pages_not_stored", "{:,}"),
    ("eviction_jobs", "{:,}"),
    ("evicted_objects", "{:,}"),
    ("orphaned_pages", "{:,}"),
    ("orphaned_bytes", "{:,}"),
    ("peak_orphaned_bytes", "{:,}"),
    ("seconds", "{:.2f}"),
)


@dataclass(frozen=True)
class PageLayout:
    """How a page is stored: which object keys, and each object's size."""

    object_bytes: int

    def keys(self, page_hash: str) -> list[str]:
        return [page_hash + suffix for suffix in KV_SUFFIXES]

    @property
    def page_bytes(self) -> int:
        return self.object_bytes * len(KV_SUFFIXES)


def page_layout(workload: Workload, page_tokens: int) -> PageLayout:
    """fp16 K (or V) of every layer and head for the page's tokens, as one object."""
    config = workload.config
    return PageLayout(kv_object_bytes(page_tokens, config.layers, config.heads))


@dataclass(frozen=True)
class ServiceRunMetrics:
    """One row of the redis backend's table: one eviction mode over the whole workload."""

    mode: str
    enable_radix_tree: bool
    namespace: str
    capacity_bytes: int
    requests: int
    requested_pages: int
    reused_pages: int
    hit_rate: float
    """Reused pages over requested pages: the leading run of pages usable as a prefix."""
    pages_stored: int
    pages_not_stored: int
    """Pages refused for space even after an eviction (the request is served uncached)."""
    eviction_jobs: int
    evicted_objects: int
    evicted_bytes: int
    orphaned_pages: int
    """At the end: pages with stored objects whose parent page is not fully stored."""
    orphaned_bytes: int
    peak_orphaned_bytes: int
    """The most orphaned bytes seen right after any eviction job, or at the end."""
    seconds: float


def requests_in_arrival_order(
    workload: Workload, chains: Sequence[Sequence[Sequence[str]]]
) -> Iterator[list[str]]:
    """The page chains in the order the workload's turns arrive: sessions interleave, as
    users of one server do, so sessions compete for the cache as they would there."""
    turns_served = [0] * len(chains)
    for span in workload.spans:
        if span.kind is SpanKind.QUESTION_ASKED:
            session = span.sequence - 1
            yield list(chains[session][turns_served[session]])
            turns_served[session] += 1


def distinct_pages(chains: Sequence[Sequence[Sequence[str]]]) -> dict[str, str | None]:
    """Every page the workload stores at least once -> its parent page (None for a first page)."""
    parents: dict[str, str | None] = {}
    for session in chains:
        for chain in session:
            for position, page in enumerate(chain):
                parents.setdefault(page, chain[position - 1] if position else None)
    return parents


@dataclass(frozen=True)
class OrphanCensus:
    pages: int
    bytes: int


def count_orphans(index: Index, layout: PageLayout,
                  parents: Mapping[str, str | None]) -> OrphanCensus:
    """Pages with objects in the store whose parent page is not fully there: no prefix match
    can ever reach them, yet they hold capacity. Read from the store, not from the replay's
    own bookkeeping."""
    pages = list(parents)
    keys = [key for page in pages for key in layout.keys(page)]
    per_page = len(KV_SUFFIXES)
    exists = index.batch_is_exist(keys)
    stored_keys = {
        page: [key for key, there in zip(keys[i * per_page:(i + 1) * per_page],
                                         exists[i * per_page:(i + 1) * per_page]) if there]
        for i, page in enumerate(pages)
    }
    complete = {page for page, present in stored_keys.items() if len(present) == per_page}
    orphans = [page for page in pages
               if stored_keys[page] and parents[page] is not None and parents[page] not in complete]
    sizes = [index.object_info(key) for page in orphans for key in stored_keys[page]]
    return OrphanCensus(len(orphans), sum(info.size for info in sizes if info is not None))


@dataclass
class _Counters:
    requests: int = 0
    requested_pages: int = 0
    reused_pages: int = 0
    pages_stored: int = 0
    pages_not_stored: int = 0
    eviction_jobs: int = 0
    evicted_objects: int = 0
    evicted_bytes: int = 0
    peak_orphaned_bytes: int = 0


@dataclass
class _EngineReplay:
    """One eviction mode: serves requests the way an engine does (match, read what is
    reused, store what is missing) and evicts in process when the store is full."""

    index: Index
    layout: PageLayout
    parents: Mapping[str, str | None]
    capacity_bytes: int
    """The simulated pool (the service's own capacity is SERVICE_CAPACITY_FACTOR times it)."""
    used_bytes: int = 0
    """Tracked here (this replay is the namespace's only writer) so the watermark check
    needs no usage() round trip over every shard per request."""
    counters: _Counters = field(default_factory=_Counters)

    def serve(self, chain: list[str]) -> None:
        stored = self._stored_keys(chain)
        reused = self._usable_prefix(chain, stored)
        for page in chain[:reused]:  # the engine loads the reused KV: a read takes a lease
            for key in self.layout.keys(page):
                self.index.get(key)
        self._store_missing(chain, stored)
        self.counters.requests += 1
        self.counters.requested_pages += len(chain)
        self.counters.reused_pages += reused

    def _stored_keys(self, chain: list[str]) -> list[list[bool]]:
        keys = [key for page in chain for key in self.layout.keys(page)]
        exists = self.index.batch_is_exist(keys)
        per_page = len(KV_SUFFIXES)
        return [exists[i:i + per_page] for i in range(0, len(exists), per_page)]

    def _usable_prefix(self, chain: list[str], stored: list[list[bool]]) -> int:
        """With the tree, match_prefix; without it (match_prefix is refused), the leading
        run of pages whose objects all exist: what an engine without the tree probes."""
        if self.index.settings.enable_radix_tree:
            return self.index.match_prefix(chain)
        for position, page_stored in enumerate(stored):
            if not all(page_stored):
                return position
        return len(chain)

    def _store_missing(self, chain: list[str], stored: list[list[bool]]) -> None:
        """Store every object of the chain that is not there, each with its parent page.
        On NoSpace, evict room for it and retry, until it fits, an eviction frees nothing,
        or EVICTIONS_PER_STORE jobs have run; then its pages count as not stored."""
        missing_pages, items = self._missing(chain, stored)
        evictions = 0
        while items and not self._put(items):
            need_bytes = sum(size for _, size, _ in items)
            if evictions == EVICTIONS_PER_STORE or not self._evict(need_bytes):
                self.counters.pages_not_stored += missing_pages
                return
            evictions += 1
            # The eviction may have taken objects of this very chain (matched pages whose
            # read lease ran out, or, without the tree, old pages past a gap): the engine
            # holds their KV and writes them back, so no page is stored under a dead parent.
            missing_pages, items = self._missing(chain, self._stored_keys(chain))
        self.counters.pages_stored += missing_pages
        if self.used_bytes > self.index.settings.high_watermark * self.capacity_bytes:
            self._evict(need_bytes=0)

    def _missing(self, chain: list[str], stored: list[list[bool]]
                 ) -> tuple[int, list[tuple[str, int, str | None]]]:
        """How many pages miss an object, and the (key, size, parent page) to put. Without
        the tree, objects past a gap may survive: only the absent ones are put."""
        positions = [position for position, page_stored in enumerate(stored)
                     if not all(page_stored)]
        items = [
            (key, self.layout.object_bytes, chain[position - 1] if position else None)
            for position in positions
            for key, present in zip(self.layout.keys(chain[position]), stored[position])
            if not present
        ]
        return len(positions), items

    def _put(self, items: list[tuple[str, int, str | None]]) -> bool:
        """put_start the items and put_end those admitted. False when any was refused
        for space (the caller evicts and re-reads what is stored); other refusals are
        bugs of the replay and raise."""
        if self.used_bytes + sum(size for _, size, _ in items) > self.capacity_bytes:
            return False
        results = self.index.batch_put_start(items)
        admitted = [result.key for result in results if result.ok]
        for result in results:
            if result.error is not None and not isinstance(result.error, NoSpace):
                raise result.error
        raise_first(self.index.batch_put_end(admitted))
        self.used_bytes += sum(size for (_, size, _), result in zip(items, results)
                               if result.ok)
        return len(admitted) == len(items)

    def _evict(self, need_bytes: int) -> int:
        """One eviction job, down to the usual target, or lower when a batch needs more
        room. Returns how many objects it evicted."""
        capacity = self.capacity_bytes
        target_bytes = min(self.index.settings.eviction_target_ratio * capacity,
                           max(0, capacity - need_bytes))
        report = self.index.evict(target_bytes / (capacity * SERVICE_CAPACITY_FACTOR))
        self.used_bytes = report.used_bytes
        self.counters.eviction_jobs += 1
        self.counters.evicted_objects += report.objects
        self.counters.evicted_bytes += report.bytes
        if report.objects:
            self.sample_orphans()
        return report.objects

    def sample_orphans(self) -> OrphanCensus:
        census = count_orphans(self.index, self.layout, self.parents)
        self.counters.peak_orphaned_bytes = max(self.counters.peak_orphaned_bytes, census.bytes)
        return census


def mode_namespace(base: str, mode: str) -> str:
    return f"{base}-sim-{mode}"


def open_mode_index(url: str | None, namespace: str, enable_radix_tree: bool,
                    capacity_bytes: int) -> Index:
    """A namespace emptied of an earlier run (a real Redis keeps them), configured for one mode."""
    index = Index.from_url(url, namespace=namespace, enable_radix_tree=enable_radix_tree,
                           capacity_bytes=capacity_bytes * SERVICE_CAPACITY_FACTOR,
                           lease_ttl_ms=READ_LEASE_TTL_MS)
    index.remove_all(force=True)
    return index


def replay_mode(
    index: Index,
    mode: str,
    requests: Sequence[list[str]],
    layout: PageLayout,
    parents: Mapping[str, str | None],
    capacity_bytes: int,
    show_progress: bool,
) -> ServiceRunMetrics:
    """Serve every request in order on one namespace; count orphans from the store at the end."""
    replay = _EngineReplay(index, layout, parents, capacity_bytes)
    started = time.perf_counter()
    for chain in tqdm(requests, desc=f"sim redis {mode}", unit="request",
                      disable=not show_progress):
        replay.serve(chain)
    seconds = time.perf_counter() - started
    final = replay.sample_orphans()
    counters = replay.counters
    return ServiceRunMetrics(
        mode=mode,
        enable_radix_tree=index.settings.enable_radix_tree,
        namespace=index.namespace,
        capacity_bytes=capacity_bytes,
        hit_rate=counters.reused_pages / max(1, counters.requested_pages),
        orphaned_pages=final.pages,
        orphaned_bytes=final.bytes,
        seconds=seconds,
        **asdict(counters),
    )


def replay_on_service(
    workload: Workload,
    page_tokens: int,
    capacity_fraction: float,
    url: str | None = None,
    namespace: str = "mc",
    show_progress: bool = False,
) -> list[ServiceRunMetrics]:
    """Both modes, each in its own namespace, under the same capacity: `capacity_fraction`
    of the bytes the workload would store with no eviction at all."""
    chains = page_chains(workload, page_tokens)
    layout = page_layout(workload, page_tokens)
    parents = distinct_pages(chains)
    capacity_bytes = max(1, int(capacity_fraction * len(parents) * layout.page_bytes))
    requests = list(requests_in_arrival_order(workload, chains))
    results = []
    for mode, enable_radix_tree in MODES:
        index = open_mode_index(url, mode_namespace(namespace, mode), enable_radix_tree,
                                capacity_bytes)
        results.append(replay_mode(index, mode, requests, layout, parents, capacity_bytes,
                                   show_progress))
    return results


def run_redis_backend(workload: Workload, args: argparse.Namespace) -> int:
    """The `sim --backend redis` command: replay, print the table, write CSV and JSON.

    The URL and namespace come from the main CLI's global --url/--namespace when present;
    otherwise MOONCAKE_REDIS_URL or the in-process memory:// store."""
    url = getattr(args, "url", None) or os.environ.get(ENV_URL) or DEFAULT_URL
    namespace: str = getattr(args, "namespace", None) or "mc"
    results = replay_on_service(workload, args.page_tokens, args.capacity_fraction, url,
                                namespace, show_progress=not args.no_progress)
    print(format_table(results, _TABLE_COLUMNS))
    description: dict[str, Any] = {
        "workload": asdict(workload.config),
        "page_tokens": args.page_tokens,
        "object_bytes": page_layout(workload, args.page_tokens).object_bytes,
        "key_suffixes": list(KV_SUFFIXES),
        "capacity_fraction": args.capacity_fraction,
        "read_lease_ttl_ms": READ_LEASE_TTL_MS,
        "url": redact(url),
        "python": platform.python_version(),
    }
    written = write_results(results, description, args.out, CSV_NAME, JSON_NAME,
                            ServiceRunMetrics)
    print("wrote " + ", ".join(str(path) for path in written))
    return 0
