"""Replays a workload against every (index, policy, capacity) combination and measures each."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from tqdm import tqdm

from mooncake_redis.errors import SimulationError
from mooncake_redis.sim.indexes.bitwise_radix import BitwiseRadixTreeIndex
from mooncake_redis.sim.indexes.cache_index import CacheIndex
from mooncake_redis.sim.indexes.hash_table import BoundedScanHashTableIndex, HashTableIndex
from mooncake_redis.sim.indexes.keys import CacheKey
from mooncake_redis.sim.indexes.metrics import (
    RunMetrics,
    mean,
    measure_index_memory,
    percentiles,
)
from mooncake_redis.sim.indexes.optimum import (
    OPTIMUM_INDEX,
    OPTIMUM_POLICY,
    References,
    belady_hits,
    with_share_of_optimum,
    workload_references,
)
from mooncake_redis.sim.indexes.policies import (
    POLICY_NAMES,
    BlockHeatPolicy,
    EvictionPolicy,
    LruPolicy,
    PrefixProtectedLruPolicy,
)
from mooncake_redis.sim.indexes.radix_tree import RadixTreeIndex
from mooncake_redis.sim.indexes.workload import SpanKind, Workload

INDEX_NAMES = (
    HashTableIndex.name,
    BoundedScanHashTableIndex.name,
    RadixTreeIndex.name,
    BitwiseRadixTreeIndex.name,
)


EXPERIMENT_POLICY_NAMES = (*POLICY_NAMES, OPTIMUM_POLICY)
"""The online policies, run on every index, and the offline optimum, one row per capacity."""

QUICK_POLICIES = (LruPolicy.name, PrefixProtectedLruPolicy.name, OPTIMUM_POLICY)
QUICK_CAPACITIES = (0.05, 0.1, 0.2)
"""`sim` with no options: every index under the two LRU policies, and the optimum, at the
capacities where they differ and the first where they meet (under 30 s on 2 cores).
`--full` runs the whole matrix of SimulationSettings' defaults (every policy, block-heat's
slow evictions included, and capacity 0.4: about three times as long)."""


@dataclass(frozen=True)
class SimulationSettings:
    """Which combinations to run, and the knobs of the indexes and policies that have them."""

    indexes: tuple[str, ...] = INDEX_NAMES
    policies: tuple[str, ...] = EXPERIMENT_POLICY_NAMES
    capacity_fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    scan_limit: int = 16
    block_tokens: int = 16
    half_life_uses: int = 4096

    def __post_init__(self) -> None:
        check_names("index", self.indexes, INDEX_NAMES)
        check_names("policy", self.policies, EXPERIMENT_POLICY_NAMES)
        check_capacity_fractions(self.capacity_fractions)
        for name in ("scan_limit", "block_tokens", "half_life_uses"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def combinations(self) -> list[tuple[str, str, float]]:
        """Every (index, online policy, capacity), and after each capacity's the optimum's
        one run (index OPTIMUM_INDEX: it is the same on every index)."""
        online = [policy for policy in self.policies if policy != OPTIMUM_POLICY]
        runs = []
        for fraction in self.capacity_fractions:
            runs += combinations(self.indexes, online, (fraction,))
            if OPTIMUM_POLICY in self.policies:
                runs.append((OPTIMUM_INDEX, OPTIMUM_POLICY, fraction))
        return runs


def combinations(indexes: Sequence[str], policies: Sequence[str],
                 capacity_fractions: Sequence[float]) -> list[tuple[str, str, float]]:
    """Every (index, policy, capacity), capacity outermost: a table reads capacity by
    capacity, the indexes of one policy side by side."""
    return [
        (index, policy, fraction)
        for fraction in capacity_fractions
        for policy in policies
        for index in indexes
    ]


def check_names(kind: str, names: Sequence[str], known: Sequence[str]) -> None:
    """Raise ValueError, listing the choices, unless `names` are some of `known`."""
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(
            f"unknown {kind} {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}"
        )


def check_capacity_fractions(fractions: Sequence[float]) -> None:
    """Raise ValueError unless every capacity is a fraction of the working set in (0, 1]."""
    if not fractions:
        raise ValueError("give at least one capacity fraction")
    for fraction in fractions:
        if not 0 < fraction <= 1:
            raise ValueError(f"capacity {fraction} is not a fraction of the working set in (0, 1]")


def make_index(name: str, settings: SimulationSettings) -> CacheIndex[Any]:
    factories: dict[str, Callable[[], CacheIndex[Any]]] = {
        HashTableIndex.name: HashTableIndex,
        BoundedScanHashTableIndex.name: lambda: BoundedScanHashTableIndex(settings.scan_limit),
        RadixTreeIndex.name: RadixTreeIndex,
        BitwiseRadixTreeIndex.name: BitwiseRadixTreeIndex,
    }
    return factories[name]()


def make_policy(
    name: str, index: CacheIndex[Any], workload: Workload, settings: SimulationSettings
) -> EvictionPolicy:
    layers, heads = workload.config.layers, workload.config.heads
    if name == BlockHeatPolicy.name:
        return BlockHeatPolicy(
            index, layers, heads, settings.block_tokens, settings.half_life_uses
        )
    policy_class = {LruPolicy.name: LruPolicy,
                    PrefixProtectedLruPolicy.name: PrefixProtectedLruPolicy}
    return policy_class[name](index, layers, heads)


def working_set_keys(workload: Workload) -> Iterator[CacheKey]:
    """Every KV entry of the workload, in the order the workload first writes it."""
    config = workload.config
    for span in workload.spans:
        if span.kind is SpanKind.WRITE:
            for position in range(span.start, span.end):
                for layer in range(config.layers):
                    for head in range(config.heads):
                        yield CacheKey(span.sequence, layer, head, position)


def capacity_entries(workload: Workload, fraction: float) -> int:
    return max(1, round(fraction * workload.working_set_entries))


class _Replay:
    """One run: the index, the policy and the counters, driven span by span."""

    def __init__(self, index: CacheIndex[Any], policy: EvictionPolicy, capacity: int) -> None:
        self.index, self.policy, self.capacity = index, policy, capacity
        self.hits = 0
        self.lookup_ns: list[int] = []
        self.eviction_ns: list[int] = []
        self.evicted_entries = 0
        self.retier_ns = 0

    def admit(self, key: Hashable, sequence: int, position: int) -> None:
        clock = time.perf_counter_ns
        while len(self.index) >= self.capacity:
            start = clock()
            removed = self.policy.evict()
            self.eviction_ns.append(clock() - start)
            if not removed:
                raise SimulationError(f"{self.policy.name} freed nothing from a full cache")
            self.evicted_entries += removed
        self.index.insert(key, self.policy.tier_for(sequence, position))
        self.policy.on_insert(sequence, position)

    def replay(self, workload: Workload, keys_by_position: list[list[list[Hashable]]]) -> None:
        clock = time.perf_counter_ns
        access, lookup_ns, policy = self.index.access, self.lookup_ns, self.policy
        for span in workload.spans:
            sequence = span.sequence
            if span.kind is SpanKind.READ:
                for position in range(span.start, span.end):
                    policy.on_position_used(sequence, position)
                    for key in keys_by_position[sequence][position]:
                        start = clock()
                        hit = access(key)
                        lookup_ns.append(clock() - start)
                        if hit:
                            self.hits += 1
                        else:
                            self.admit(key, sequence, position)
            elif span.kind is SpanKind.WRITE:
                for position in range(span.start, span.end):
                    policy.on_position_used(sequence, position)
                    for key in keys_by_position[sequence][position]:
                        self.admit(key, sequence, position)
            else:
                start = clock()
                policy.on_span(span)
                self.retier_ns += clock() - start


def encoded_keys_by_position(
    workload: Workload, index: CacheIndex[Any]
) -> list[list[list[Hashable]]]:
    """[sequence][position] -> the index's keys for every layer and head, encoded up front so
    that the timed lookups measure the index, not key formatting."""
    system_length = len(workload.system_prompt)
    lengths = [system_length] + [system_length + len(t) for t in workload.session_tokens]
    table: list[list[list[Hashable]]] = [[[] for _ in range(length)] for length in lengths]
    for key in working_set_keys(workload):
        table[key.sequence][key.position].append(index.encode_key(key))
    return table


def run_one(
    workload: Workload,
    index_name: str,
    policy_name: str,
    capacity_fraction: float,
    settings: SimulationSettings,
    memory_bytes: int,
) -> RunMetrics:
    """Replay the whole workload on a fresh index under one policy and capacity."""
    index = make_index(index_name, settings)
    policy = make_policy(policy_name, index, workload, settings)
    capacity = capacity_entries(workload, capacity_fraction)
    keys_by_position = encoded_keys_by_position(workload, index)
    replay = _Replay(index, policy, capacity)
    started = time.perf_counter()
    # As timeit does: a collection pause landing inside one timed call would be charged to
    # whichever index happened to be running (the lookup list alone grows to 10^5 ints).
    gc.disable()
    try:
        replay.replay(workload, keys_by_position)
    finally:
        gc.enable()
    reads = len(replay.lookup_ns)
    lookup_p50, lookup_p99 = percentiles(replay.lookup_ns, (0.5, 0.99))
    eviction_p50, eviction_p99 = percentiles(replay.eviction_ns, (0.5, 0.99))
    return RunMetrics(
        index=index_name,
        policy=policy_name,
        capacity_fraction=capacity_fraction,
        capacity_entries=capacity,
        reads=reads,
        hits=replay.hits,
        hit_rate=replay.hits / reads if reads else 0.0,
        lookup_mean_ns=mean(replay.lookup_ns),
        lookup_p50_ns=lookup_p50,
        lookup_p99_ns=lookup_p99,
        evictions=len(replay.eviction_ns),
        evicted_entries=replay.evicted_entries,
        eviction_mean_ns=mean(replay.eviction_ns),
        eviction_p50_ns=eviction_p50,
        eviction_p99_ns=eviction_p99,
        eviction_ns_per_entry=sum(replay.eviction_ns) / max(1, replay.evicted_entries),
        retier_total_ms=replay.retier_ns / 1e6,
        memory_bytes=memory_bytes,
        seconds=time.perf_counter() - started,
    )


def run_optimum(workload: Workload, references: References, fraction: float) -> RunMetrics:
    """The optimum's row: its hits at one capacity; nothing of it is timed or held."""
    capacity = capacity_entries(workload, fraction)
    started = time.perf_counter()
    counts = belady_hits(references, capacity)
    return RunMetrics(
        index=OPTIMUM_INDEX,
        policy=OPTIMUM_POLICY,
        capacity_fraction=fraction,
        capacity_entries=capacity,
        reads=counts.reads,
        hits=counts.hits,
        hit_rate=counts.hits / counts.reads if counts.reads else 0.0,
        lookup_mean_ns=None,
        lookup_p50_ns=None,
        lookup_p99_ns=None,
        evictions=counts.evicted_entries,
        evicted_entries=counts.evicted_entries,
        eviction_mean_ns=None,
        eviction_p50_ns=None,
        eviction_p99_ns=None,
        eviction_ns_per_entry=None,
        retier_total_ms=None,
        memory_bytes=None,
        seconds=time.perf_counter() - started,
        hit_rate_of_optimum=1.0,
    )


def run_experiment(
    workload: Workload, settings: SimulationSettings, show_progress: bool = True
) -> list[RunMetrics]:
    """Every combination of the settings, in a stable order, with a progress bar on stderr."""
    memory_by_index_and_capacity: dict[tuple[str, int], int] = {}
    references = (workload_references(workload) if OPTIMUM_POLICY in settings.policies
                  else None)
    results = []
    for index_name, policy_name, fraction in tqdm(
        settings.combinations(), desc="sim", unit="run", disable=not show_progress
    ):
        if policy_name == OPTIMUM_POLICY:
            assert references is not None
            results.append(run_optimum(workload, references, fraction))
            continue
        capacity = capacity_entries(workload, fraction)
        memory_key = (index_name, capacity)
        if memory_key not in memory_by_index_and_capacity:
            keys = list(working_set_keys(workload))[:capacity]
            memory_by_index_and_capacity[memory_key] = measure_index_memory(
                partial(make_index, index_name, settings), keys
            )
        results.append(
            run_one(
                workload,
                index_name,
                policy_name,
                fraction,
                settings,
                memory_by_index_and_capacity[memory_key],
            )
        )
    return with_share_of_optimum(results, "hit_rate", "hit_rate_of_optimum")
