"""Leaf-first cascading eviction, driven by the capacity watermark.

A round takes the oldest evictable leaves across all shards (the heads of the per-shard
leaf indexes, merged), evicts each leaf whole inside its shard's script, and unlinks it
from its parent; a parent left without children becomes a leaf at once and competes in
the next round by its own score. Soft-pinned leaves wait for a second pass; hard-pinned
and processing objects never go. When no leaf is evictable, a lease-ordered fallback
takes objects outside the tree (and, only with allow_path_breaking_eviction, keys of
nodes that still have children). One job runs at most max_rounds_per_job rounds and
says whether more work is left, so a worker can hand over to a follow-up job.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .batch import raise_first_error, score_pairs
from .errors import InvalidArgument
from .index import Index
from .prefix import all_shards, shard_of
from .tree_links import Link

T = TypeVar("T")

HEAD_PER_SHARD_MIN = 4
"""Each round reads at least this many leaf candidates from every shard's head."""

FALLBACK_SCAN_PER_SHARD = 32
"""How deep the lease-ordered fallback reads into each shard's object index per round."""

TARGET_REACHED = "target reached"
NOTHING_EVICTABLE = "nothing evictable"
ROUND_LIMIT = "round limit"
LOCK_HELD = "another eviction job holds the lock"
NO_CAPACITY = "capacity is unlimited: nothing to do without an explicit target"


@dataclass
class EvictionReport:
    """What one eviction job did."""

    target_bytes: int = 0
    start_used_bytes: int = 0
    used_bytes: int = 0
    rounds: int = 0
    leaves: int = 0
    objects: int = 0
    bytes: int = 0
    fallback_objects: int = 0
    seconds: float = 0.0
    stopped: str = ""

    @property
    def more_work(self) -> bool:
        """The job stopped at its round limit still above target: a follow-up is due."""
        return self.stopped == ROUND_LIMIT

    def summary(self) -> str:
        return (f"{self.stopped}: {self.rounds} rounds, {self.leaves} leaves, "
                f"{self.objects} objects ({self.fallback_objects} by fallback), "
                f"{self.bytes} bytes evicted in {self.seconds:.3f} s; "
                f"used {self.start_used_bytes} -> {self.used_bytes}, target {self.target_bytes}")


@dataclass
class _Freed:
    leaves: int = 0
    objects: int = 0
    bytes: int = 0
    fallback_objects: int = 0


def enough_for(need_bytes: int, candidates: Iterable[T], sizes: Iterable[str | None]) -> list[T]:
    """The shortest prefix of the candidates (oldest first) whose sizes add up to
    need_bytes, or all of them."""
    chosen: list[T] = []
    planned = 0
    for candidate, size in zip(candidates, sizes):
        if planned >= need_bytes:
            break
        chosen.append(candidate)
        planned += int(size or 0)
    return chosen


class Evictor:
    def __init__(self, index: Index):
        self.index = index
        self.schema = index.schema
        self.scripts = index.scripts

    def run(self, target_ratio: float | None = None, max_rounds: int | None = None,
            on_round: Callable[[EvictionReport], None] | None = None) -> EvictionReport:
        """One eviction job: rounds until used bytes are at or below the target (default
        high_watermark - eviction_ratio of capacity), nothing is evictable, or the round
        limit is reached. Holds the namespace's eviction lock throughout."""
        config = self.index.config
        started = time.monotonic()
        report = EvictionReport(used_bytes=self._used())
        report.start_used_bytes = report.used_bytes
        target = self._target_bytes(target_ratio)
        if target is None:
            report.stopped = NO_CAPACITY
            return report
        report.target_bytes = target
        token = uuid.uuid4().hex
        if not self.index.client.set(self.schema.eviction_lock, token, nx=True,
                                     px=config.eviction_lock_ttl_ms):
            report.stopped = LOCK_HELD
            return report
        try:
            rounds = config.max_rounds_per_job if max_rounds is None else max_rounds
            report.stopped = ROUND_LIMIT
            for _ in range(rounds):
                if report.used_bytes <= target:
                    report.stopped = TARGET_REACHED
                    break
                self._renew(token)
                freed = self.round(report.used_bytes - target)
                if not freed.objects:
                    report.stopped = NOTHING_EVICTABLE
                    break
                report.rounds += 1
                report.leaves += freed.leaves
                report.objects += freed.objects
                report.bytes += freed.bytes
                report.fallback_objects += freed.fallback_objects
                report.used_bytes = self._used()
                if on_round is not None:
                    on_round(report)
            if report.stopped == ROUND_LIMIT and report.used_bytes <= target:
                report.stopped = TARGET_REACHED
        finally:
            batch = self.index.batch()
            self.scripts.lock_token(batch, self.schema.eviction_lock, "release", token)
            batch.execute()
            report.seconds = time.monotonic() - started
        return report

    def _target_bytes(self, target_ratio: float | None) -> int | None:
        capacity = self.index.config.capacity_bytes
        if target_ratio is not None:
            if isinstance(target_ratio, bool) or not isinstance(target_ratio, (int, float)) \
                    or not 0 <= target_ratio <= 1:
                raise InvalidArgument(f"target_ratio must be in [0, 1], got {target_ratio!r}")
            if capacity == 0 and target_ratio > 0:
                raise InvalidArgument("capacity_bytes is unlimited (0): only target_ratio=0 "
                                      "(evict everything evictable) has a meaning")
            return int(target_ratio * capacity)
        if capacity == 0:
            return None
        return int(self.index.config.eviction_target_ratio * capacity)

    def _used(self) -> int:
        return int(self.index.client.get(self.schema.usage) or 0)

    def _renew(self, token: str) -> None:
        batch = self.index.batch()
        self.scripts.lock_token(batch, self.schema.eviction_lock, "renew", token,
                                self.index.config.eviction_lock_ttl_ms)
        batch.execute()

    def round(self, need_bytes: int) -> _Freed:
        """Evict up to leaves_per_round of the oldest evictable leaves (enough to free
        need_bytes if there are that many); soft-pinned leaves only if the first pass
        finds none; the lease-ordered fallback only if no leaf is evictable."""
        config = self.index.config
        now_ms = self._redis_now_ms()
        passes = [False, True] if config.allow_soft_pin_eviction else [False]
        if config.enable_radix_tree:
            for soft in passes:
                freed = self._evict_leaves(now_ms, soft, need_bytes)
                if freed.objects:
                    return freed
        for soft in passes:
            freed = self._evict_by_lease(now_ms, soft, need_bytes)
            if freed.objects:
                return freed
        return _Freed()

    def _redis_now_ms(self) -> int:
        seconds, microseconds = self.index.client.time()
        return int(seconds) * 1000 + int(microseconds) // 1000

    def _heads(self, index_of_shard: Callable[[str], str], now_ms: int,
               per_shard: int) -> list[tuple[float, str]]:
        """(score, member) of the evictable heads of one per-shard sorted set, all shards
        in one round trip, merged oldest first."""
        batch = self.index.batch()
        for shard in all_shards():
            batch.command("ZRANGEBYSCORE", index_of_shard(shard), "-inf", now_ms, "WITHSCORES",
                          "LIMIT", 0, per_shard)
        merged: list[tuple[float, str]] = []
        for page in batch.execute():
            merged += [(score, member) for member, score in score_pairs(page)]
        return sorted(merged)

    def _evict_leaves(self, now_ms: int, soft: bool, need_bytes: int) -> _Freed:
        config = self.index.config
        limit = config.leaves_per_round
        per_shard = max(HEAD_PER_SHARD_MIN, math.ceil(4 * limit / len(all_shards())))
        pick = (lambda s: self.schema.shard_keys(s).soft_leaves) if soft else \
            (lambda s: self.schema.shard_keys(s).leaves)
        candidates = [leaf for _, leaf in self._heads(pick, now_ms, per_shard)[:limit]]
        if not candidates:
            return _Freed()
        batch = self.index.batch()
        for leaf in candidates:
            node = self.schema.node_keys(leaf)
            batch.command("ZRANGE", node.keys, 0, -1)
            batch.command("HGET", node.node, "bytes")
        results = batch.execute()
        chosen: dict[str, list[tuple[str, Sequence[str]]]] = defaultdict(list)
        for leaf, keys in enough_for(need_bytes, zip(candidates, results[0::2]), results[1::2]):
            if keys:
                chosen[shard_of(leaf)].append((leaf, keys))
        batch = self.index.batch()
        for shard, leaves in chosen.items():
            self.scripts.evict_leaves(batch, shard, leaves, soft)
        results = batch.execute()
        raise_first_error(results)
        freed = _Freed()
        evicted: list[Link] = []
        for leaf_count, object_count, freed_bytes, flat, _skipped in results:
            freed.leaves += int(leaf_count)
            freed.objects += int(object_count)
            freed.bytes += int(freed_bytes)
            evicted += list(zip(flat[0::2], flat[1::2]))
        self.index.release_bytes(freed.bytes)
        self.index.links.cascade(evicted)
        return freed

    def _evict_by_lease(self, now_ms: int, soft: bool, need_bytes: int) -> _Freed:
        """Mooncake's lease-ordered BatchEvict over the shards' object indexes. Candidates
        the script would refuse (soft-pinned in the first pass, objects in the tree) are
        filtered out first, reading up to FALLBACK_SCAN_PER_SHARD deep per shard, so
        refusals at the head do not hide evictable objects behind them."""
        config = self.index.config
        heads = self._heads(lambda s: self.schema.shard_keys(s).objects, now_ms,
                            FALLBACK_SCAN_PER_SHARD)
        candidates = [(key, self.index.prefix_of(key)) for _, key in heads]
        if not candidates:
            return _Freed()
        batch = self.index.batch()
        for key, prefix_hash in candidates:
            node = self.schema.node_keys(prefix_hash)
            batch.command("HMGET", self.schema.object_key(key, prefix_hash), "size", "soft_pin")
            batch.command("ZSCORE", node.keys, key)
            batch.command("SCARD", node.children)
        results = batch.execute()
        acceptable, sizes = [], []
        for candidate, (size, soft_pin), registered, children in zip(
                candidates, results[0::3], results[1::3], results[2::3]):
            in_tree = registered is not None and not (config.allow_path_breaking_eviction
                                                      and int(children) > 0)
            if size is not None and (soft or soft_pin != "1") and not in_tree:
                acceptable.append(candidate)
                sizes.append(size)
        chosen = enough_for(need_bytes, acceptable[:config.leaves_per_round], sizes)
        deletion = self.index.delete_objects(
            chosen, "evict", soft_pins_allowed=soft,
            path_breaking=config.allow_path_breaking_eviction)
        return _Freed(objects=deletion.deleted, bytes=deletion.freed_bytes,
                      fallback_objects=deletion.deleted)
