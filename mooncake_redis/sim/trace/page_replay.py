"""Serves page-chain requests as an engine does, on one index under one policy, and counts."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mooncake_redis.sim.indexes.eviction_heap import EvictionHeap
from mooncake_redis.sim.trace.page_index import PageIndex
from mooncake_redis.sim.trace.page_policies import PagePolicy
from mooncake_redis.sim.trace.pages import NO_PARENT

TOUCH_ORDERS = ("chain", "tip-first", "shuffled")
"""The order a request's uses reach the policy: root first (as the engine reads them),
last page first (as vLLM frees blocks, so that a prefix is always more recent than its
extensions), or shuffled (as when a request's pages share one timestamp and ties fall by
key, as with the service's millisecond lease times)."""

SHUFFLE_SEED = 0
"""Seed of the shuffled touch order, so that a replay is deterministic."""


class OrphanMeter:
    """Cached pages whose parent is not cached: they hold capacity but no prefix match can
    reach them. Kept up to date from insert and evict events, never by a census."""

    def __init__(self, parents: Sequence[int], cached: Container[int]) -> None:
        self._parents = parents
        self._cached = cached
        self._cached_children: dict[int, int] = {}
        self.orphans = 0

    def stored(self, page: int) -> None:
        parent = self._parents[page]
        if parent != NO_PARENT:
            self._cached_children[parent] = self._cached_children.get(parent, 0) + 1
            if parent not in self._cached:
                self.orphans += 1
        self.orphans -= self._cached_children.get(page, 0)  # they have their parent back

    def evicted(self, page: int) -> None:
        parent = self._parents[page]
        if parent != NO_PARENT:
            self._cached_children[parent] -= 1
            if parent not in self._cached:
                self.orphans -= 1
        self.orphans += self._cached_children.get(page, 0)


@dataclass
class RequestCounters:
    """What every replay counts, request by request: in process (ReplayCounters) and on
    the service (service/replay.ServiceCounters)."""

    requests: int = 0
    requested_pages: int = 0
    hits: int = 0
    """Pages of the chain cached whole, wherever they sit in it."""
    usable_hits: int = 0
    """Pages of the chain's cached leading run: what an engine reuses."""
    pages_stored: int = 0
    pages_not_stored: int = 0
    """Pages left out for space even after evicting (the request is served uncached)."""
    evicted_pages: int = 0
    orphaned_page_requests: int = 0
    """Sum over requests of the orphans left after each: their mean is this over requests."""
    peak_orphaned_pages: int = 0

    def row_fields(self, orphans: int, page_bytes: int) -> dict[str, Any]:
        """The fields of a results row these counts make, with `orphans` pages orphaned
        at the end."""
        requested = max(1, self.requested_pages)
        return {
            "requests": self.requests, "requested_pages": self.requested_pages,
            "hits": self.hits, "hit_rate": self.hits / requested,
            "usable_hits": self.usable_hits,
            "usable_prefix_hit_rate": self.usable_hits / requested,
            "pages_stored": self.pages_stored, "pages_not_stored": self.pages_not_stored,
            "evicted_pages": self.evicted_pages,
            "orphaned_pages": orphans, "orphaned_bytes": orphans * page_bytes,
            "mean_orphaned_pages": self.orphaned_page_requests / max(1, self.requests),
            "peak_orphaned_pages": self.peak_orphaned_pages,
            "peak_orphaned_bytes": self.peak_orphaned_pages * page_bytes,
        }


@dataclass
class ReplayCounters(RequestCounters):
    """What one replay counted and timed, request by request."""

    lookup_ns: list[int] = field(default_factory=list)
    """Per request: the whole chain's lookup."""
    eviction_ns: list[int] = field(default_factory=list)
    """Per evicted page: choosing it, removing it, re-queueing a parent that became a leaf."""


class PageReplay:
    """One run: the index, the policy, the eviction heap and the counters.

    Per request, as an engine does: look the chain up (hits: cached pages; usable: the
    cached leading run, which is all an engine can use), store the missing pages parent
    first, evicting by the policy while the cache is at capacity, then report a use of
    every cached page of the chain. The request's own pages are not evictable while it
    stores; if nothing else is, the rest of its chain is not stored."""

    def __init__(self, parents: Sequence[int], index: PageIndex, policy: PagePolicy,
                 capacity_pages: int, touch_order: str = "chain",
                 evicted: list[int] | None = None) -> None:
        if capacity_pages < 1:
            raise ValueError(f"capacity must be at least 1 page, got {capacity_pages}")
        if touch_order not in TOUCH_ORDERS:
            raise ValueError(f"touch order {touch_order!r} is not one of {TOUCH_ORDERS}")
        self.index = index
        self.cached = index.pages
        self.policy = policy
        self.capacity_pages = capacity_pages
        self.touch_order = touch_order
        self._shuffler = random.Random(SHUFFLE_SEED)
        self.heap: EvictionHeap[int] = EvictionHeap()
        self.orphans = OrphanMeter(parents, self.cached)
        self.counters = ReplayCounters()
        self.evicted = evicted
        """When a list: every evicted page is appended, in order (for tests)."""
        self._held: frozenset[int] | set[int] = frozenset()

    def serve(self, chain: Sequence[int]) -> None:
        counters, cached = self.counters, self.cached
        self.policy.start_request()
        start = time.perf_counter_ns()
        hits, usable = self.index.match(chain)
        counters.lookup_ns.append(time.perf_counter_ns() - start)
        counters.requests += 1
        counters.requested_pages += len(chain)
        counters.hits += hits
        counters.usable_hits += usable
        self._held = set(chain)
        missing = [page for page in chain if page not in cached]
        stored = self.store(missing)
        counters.pages_not_stored += len(missing) - stored
        self._held = frozenset()
        self.use(self._in_touch_order(chain))
        orphans = self.orphans.orphans
        counters.orphaned_page_requests += orphans
        counters.peak_orphaned_pages = max(counters.peak_orphaned_pages, orphans)

    def store(self, pages: Sequence[int]) -> int:
        """Cache the leading pages of `pages` (parent first, none cached) that room can be
        made for; returns how many. Evicting them all first chooses the same victims as
        evicting before each page would: the pages being stored are held either way."""
        cached, capacity = self.cached, self.capacity_pages
        shortfall = len(cached) + len(pages) - capacity
        if shortfall > 0:
            self._evict(shortfall)
        room = min(len(pages), capacity - len(cached))
        insert, stored = self.index.insert, self.orphans.stored
        for page in pages[:room]:
            insert(page)
            stored(page)
        self.counters.pages_stored += room
        return room

    def _in_touch_order(self, chain: Sequence[int]) -> Iterable[int]:
        if self.touch_order == "tip-first":
            return reversed(chain)
        if self.touch_order == "shuffled":
            return self._shuffler.sample(chain, len(chain))
        return chain

    def use(self, pages: Iterable[int]) -> None:
        """Report a use of each cached page, in this order; evictable ones are re-queued."""
        cached, record_use = self.cached, self.policy.record_use
        is_evictable, push = self.index.is_evictable, self.heap.push
        for page in pages:
            if page in cached:
                score = record_use(page)
                if is_evictable(page):
                    push(page, score)

    def _evict(self, count: int) -> None:
        """Evict up to `count` pages, one policy choice at a time, while any may go."""
        clock, pop, push = time.perf_counter_ns, self.heap.pop, self.heap.push
        index, policy, held = self.index, self.policy, self._held
        is_evictable, remove, forget, score = (
            index.is_evictable, index.remove, policy.forget, policy.score)
        timings, orphan_evicted, log = self.counters.eviction_ns, self.orphans.evicted, self.evicted
        for _ in range(count):
            start = clock()
            victim = pop(is_evictable, held)
            if victim is None:
                return
            new_leaf = remove(victim)
            forget(victim)
            if new_leaf is not None:
                push(new_leaf, score(new_leaf))
            timings.append(clock() - start)
            orphan_evicted(victim)
            self.counters.evicted_pages += 1
            if log is not None:
                log.append(victim)


class WatermarkReplay(PageReplay):
    """Evicts in jobs, as the service's replay does (`sim/service/replay.py`): a store that
    does not fit evicts down to the job target or to room for the store, whichever is
    lower, and a request that leaves the cache above the high watermark evicts down to the
    target. The victims are still chosen one at a time, in the policy's exact order: the
    difference from the service is then the service's eviction order alone."""

    def __init__(self, parents: Sequence[int], index: PageIndex, policy: PagePolicy,
                 capacity_pages: int, high_watermark: float, target_ratio: float) -> None:
        super().__init__(parents, index, policy, capacity_pages)
        self.high_pages = high_watermark * capacity_pages
        self.target_pages = math.floor(target_ratio * capacity_pages)

    def store(self, pages: Sequence[int]) -> int:
        if len(self.cached) + len(pages) > self.capacity_pages:
            self._evict(len(self.cached) - min(self.target_pages,
                                               self.capacity_pages - len(pages)))
        return super().store(pages)

    def serve(self, chain: Sequence[int]) -> None:
        super().serve(chain)
        if len(self.cached) > self.high_pages:
            self._evict(len(self.cached) - self.target_pages)
