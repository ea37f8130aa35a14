"""Replays page chains on the service for every capacity, mode and round size, each next to
the in-memory ideal leaf-first LRU at the same capacity in pages."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tqdm import tqdm

from mooncake_redis.errors import ConfigurationError
from mooncake_redis.settings import Settings, coerce
from mooncake_redis.sim.indexes.runner import check_capacity_fractions, check_names
from mooncake_redis.sim.service.replay import (
    MODES,
    PageLayout,
    ServiceReplay,
    open_namespace,
    take_census,
)
from mooncake_redis.sim.trace.page_index import RadixPageTree
from mooncake_redis.sim.trace.page_policies import PageLruPolicy
from mooncake_redis.sim.trace.page_replay import PageReplay, WatermarkReplay
from mooncake_redis.sim.trace.pages import PageTrace, ServicePages
from mooncake_redis.sim.trace.runner import capacity_pages, replay_pages

MODE_NAMES = tuple(MODES)

@dataclass(frozen=True)
class ServiceSettings:
    """Which runs to make: every capacity x mode x leaves_per_round."""

    modes: tuple[str, ...] = MODE_NAMES
    capacity_fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    leaves_per_round: tuple[int, ...] = (Settings.leaves_per_round,)

    def __post_init__(self) -> None:
        check_names("mode", self.modes, MODE_NAMES)
        check_capacity_fractions(self.capacity_fractions)
        if not self.leaves_per_round:
            raise ValueError("give at least one leaves_per_round")
        for leaves in self.leaves_per_round:
            try:
                coerce("leaves_per_round", leaves)
            except ConfigurationError as error:
                raise ValueError(str(error)) from None

    def combinations(self) -> list[tuple[float, str, int]]:
        """Capacity outermost, then mode, then round size: a table reads capacity by
        capacity."""
        return [(fraction, mode, leaves) for fraction in self.capacity_fractions
                for mode in self.modes for leaves in self.leaves_per_round]


@dataclass(frozen=True)
class ServiceRunMetrics:
    """One row: one mode and round size at one capacity, over every request."""

    mode: str
    enable_radix_tree: bool
    leaves_per_round: int
    namespace: str
    capacity_fraction: float
    capacity_pages: int
    capacity_bytes: int
    """The simulated pool (the service's own capacity is SERVICE_CAPACITY_FACTOR times it)."""
    requests: int
    requested_pages: int
    hits: int
    hit_rate: float
    """Pages stored whole over pages requested, wherever they sit in the chain."""
    usable_hits: int
    usable_prefix_hit_rate: float
    """Pages of the stored leading run over pages requested: what an engine reuses."""
    ideal_usable_prefix_hit_rate: float
    """The in-memory leaf-first LRU at the same capacity in pages, evicting one page at a
    time exactly when a store does not fit."""
    ideal_watermark_usable_prefix_hit_rate: float
    """The same, evicting at the service's watermarks (page_replay.WatermarkReplay): the
    rate the service would reach if its eviction order were exact."""
    pages_stored: int
    pages_not_stored: int
    eviction_jobs: int
    evicted_pages: int
    evicted_objects: int
    evicted_bytes: int
    orphaned_pages: int
    """At the end, counted incrementally: stored pages whose parent page is not stored."""
    orphaned_bytes: int
    mean_orphaned_pages: float
    """Orphans after each request, averaged over requests."""
    peak_orphaned_pages: int
    """The most orphans after any request or eviction job."""
    peak_orphaned_bytes: int
    census_orphaned_pages: int
    """At the end, from a census of every distinct page in the store (the cross-check)."""
    census_orphaned_bytes: int
    seconds: float
    """The replay of every request (not the census, nor the ideal)."""


@dataclass(frozen=True)
class IdealRates:
    usable_prefix_hit_rate: float
    watermark_usable_prefix_hit_rate: float


def _usable_rate(replay: PageReplay) -> float:
    return replay.counters.usable_hits / max(1, replay.counters.requested_pages)


def ideal_rates(trace: PageTrace, capacity: int) -> IdealRates:
    """The ideal leaf-first LRU at `capacity` pages, plain and at the watermarks the service
    runs at (the defaults: replay.open_namespace sets them)."""
    defaults = Settings()
    watermarks = WatermarkReplay(trace.parents, RadixPageTree(trace.parents), PageLruPolicy(),
                                 capacity, defaults.high_watermark,
                                 defaults.eviction_target_ratio)
    for chain in trace.chains:
        watermarks.serve(chain)
    return IdealRates(_usable_rate(replay_pages(trace, "radix", "lru", capacity)),
                      _usable_rate(watermarks))


def mode_namespace(base: str, mode: str) -> str:
    return f"{base}-sim-{mode}"


def run_one(pages: ServicePages, layout: PageLayout, fraction: float, mode: str,
            leaves_per_round: int, ideal: IdealRates, url: str | None, namespace: str,
            progress: tqdm | None = None) -> ServiceRunMetrics:
    """Replay every request on a freshly emptied namespace, then check the census."""
    trace = pages.trace
    capacity = capacity_pages(trace, fraction)
    index = open_namespace(url, mode_namespace(namespace, mode), mode, capacity, layout,
                           leaves_per_round)
    replay = ServiceReplay(index, layout, pages, capacity)
    started = time.perf_counter()
    for chain in trace.chains:
        replay.serve(chain)
        if progress is not None:
            progress.update()
    seconds = time.perf_counter() - started
    census = take_census(index, layout, pages)
    replay.check(census)
    counters = replay.counters
    return ServiceRunMetrics(
        mode=mode,
        enable_radix_tree=index.settings.enable_radix_tree,
        leaves_per_round=leaves_per_round,
        namespace=index.namespace,
        capacity_fraction=fraction,
        capacity_pages=capacity,
        capacity_bytes=replay.capacity_bytes,
        ideal_usable_prefix_hit_rate=ideal.usable_prefix_hit_rate,
        ideal_watermark_usable_prefix_hit_rate=ideal.watermark_usable_prefix_hit_rate,
        eviction_jobs=counters.eviction_jobs,
        evicted_objects=counters.evicted_objects,
        evicted_bytes=counters.evicted_bytes,
        **counters.row_fields(replay.orphans.orphans, layout.page_bytes),
        census_orphaned_pages=census.orphaned_pages,
        census_orphaned_bytes=census.orphaned_bytes,
        seconds=seconds,
    )


def run_on_service(pages: ServicePages, layout: PageLayout, settings: ServiceSettings,
                   url: str | None = None, namespace: str = "mc",
                   show_progress: bool = False) -> list[ServiceRunMetrics]:
    """Every combination of the settings, in order, each mode in its own namespace
    (`<namespace>-sim-<mode>`, emptied first and left filled for inspection), with one
    progress bar over every request of every run on stderr."""
    combinations = settings.combinations()
    ideals: dict[float, IdealRates] = {}
    results = []
    with tqdm(total=len(combinations) * len(pages.trace.chains), desc="sim redis",
              unit="request", disable=not show_progress) as progress:
        for fraction, mode, leaves in combinations:
            if fraction not in ideals:
                ideals[fraction] = ideal_rates(pages.trace, capacity_pages(pages.trace,
                                                                           fraction))
            progress.set_postfix_str(f"{mode} at {fraction:g}, {leaves} leaves/round")
            results.append(run_one(pages, layout, fraction, mode, leaves, ideals[fraction],
                                   url, namespace, progress))
    return results
