"""Leaf-first cascading eviction, driven by the capacity watermark.

A job holds the namespace's eviction lock, settles what crashed clients left (the
resolver), then runs rounds. It keeps the evictable leaves of every shard in one heap,
oldest first, as SGLang's radix cache does in memory: a round takes the oldest leaves
(enough bytes to reach the target, at most leaves_per_round) and evicts each whole inside
its shard's evict call (re-checked there). The call unlinks a leaf from a parent of its
own shard itself (declared in the call: the refill read the parent); unlinks from parents
elsewhere go through the outbox and run at once in the parents' shards, with the same
script, level by level. A parent left as a leaf no younger than the round's latest choice
is evicted in that same call (it would have been chosen had it been a leaf), within the
bytes the round still needs; any other goes on the heap with its own score and competes
in the next round. The order is exact up to one round (a shard whose candidates are all
used up is read again before its unread leaves could be older than the next pick). A
job's first round takes one leaf, and each round after twice as many as the one before
(up to leaves_per_round): a round counts only its leaves' own bytes when it chooses them,
so where the cascade of the oldest leaf up its chain frees what is needed (long chains
have one leaf each), a wide first round would have taken the newest chains' leaves too.
Soft-pinned leaves wait for a second pass; hard pins never go. Only with
allow_path_breaking_eviction, and only when no leaf is evictable, the objects of interior
nodes go (they stay as shells).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mooncake_redis.context import Context
from mooncake_redis.errors import InvalidArgument, MooncakeRedisError
from mooncake_redis.executor import raise_first_error, score_pairs
from mooncake_redis.scripts import NodeCalls
from mooncake_redis.tree.links import (
    Intent,
    NewLeaf,
    ResolverReport,
    cascade,
    clear_outbox,
    new_leaves,
    resolve,
    triples,
)
from mooncake_redis.tree.matching import primaries
from mooncake_redis.tree.rescoring import latest_possible_score, rescore_leaves
from mooncake_redis.values import split_node, to_int

from .admission import eviction_lock, rebalance, take_eviction_lock, used_bytes

log = logging.getLogger(__name__)

TARGET_REACHED = "target reached"
NOTHING_EVICTABLE = "nothing evictable"
ROUND_LIMIT = "round limit"
LOCK_HELD = "another eviction job holds the lock"
NO_CAPACITY = "capacity is unlimited: nothing to do without an explicit target"

MIN_HEAD_PER_SHARD = 8
"""Each refill reads at least this many leaves of a shard's index."""

USAGE_REREAD_ROUNDS = 8
"""A job counts down from the bytes it frees and re-reads the shards' usage (one read a shard)
every this many rounds, and before it stops at the target."""

job_observers: list[Callable[[str, EvictionReport], None]] = []
"""Called with the namespace and the report after every job this process runs (the
metrics exporter counts jobs, rounds, objects, bytes and seconds this way)."""

INTERIOR_SCAN_COUNT = 1000
"""Path-breaking eviction: SCAN COUNT per round (it looks for interior nodes by scanning)."""


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
    interior_nodes: int = 0
    seconds: float = 0.0
    stopped: str = ""
    resolver: ResolverReport = field(default_factory=ResolverReport)

    @property
    def more_work(self) -> bool:
        """The job stopped at its round limit still above target: a follow-up is due."""
        return self.stopped == ROUND_LIMIT

    def summary(self) -> str:
        return (f"{self.stopped}: {self.rounds} rounds, {self.leaves} leaves, "
                f"{self.objects} objects, {self.bytes} bytes in {self.seconds:.3f} s; used "
                f"{self.start_used_bytes} -> {self.used_bytes}, target {self.target_bytes}")


class Candidates:
    """The evictable leaves of one leaf index (plain or soft) across all shards, oldest
    first, read from Redis lazily and kept exact as leases move scores."""

    def __init__(self, ctx: Context, index: str, depth: int, lapse_ms: int = 0,
                 soft: bool = False):
        self.ctx = ctx
        self.index = index
        self.depth = depth
        self.lapse_ms = lapse_ms
        """Leaves are taken only lapse_ms after their score (soft pins lapsing)."""
        self.soft = soft
        """Whether the evict script may take these soft-pinned leaves whatever their age."""
        self._heap: list[tuple[float, str]] = []
        self._score: dict[str, float] = {}
        self._bytes: dict[str, int] = {}
        self._shard_left: dict[str, int] = {}
        self._shard_full: set[str] = set(ctx.all_shards())  # not read yet: may hold more

    def push(self, prefix_hash: str, score: float, size: int | None = None) -> None:
        """A leaf and its score (a later push of the same leaf supersedes this one); size
        None keeps the size last seen."""
        if self._score.get(prefix_hash) == score:
            return
        if prefix_hash not in self._score:
            shard = self.ctx.shard(prefix_hash)
            self._shard_left[shard] = self._shard_left.get(shard, 0) + 1
        self._score[prefix_hash] = score
        if size is not None:
            self._bytes[prefix_hash] = size
        heapq.heappush(self._heap, (score, prefix_hash))

    def size(self, prefix_hash: str) -> int:
        return self._bytes.get(prefix_hash, 0)

    def drop(self, prefix_hash: str) -> None:
        if self._score.pop(prefix_hash, None) is not None:
            self._shard_left[self.ctx.shard(prefix_hash)] -= 1

    def refill(self, now_ms: int) -> None:
        """Read again the shards that may hold leaves we have not seen."""
        now_ms -= self.lapse_ms
        shards = [s for s in self._shard_full if not self._shard_left.get(s)]
        if not shards:
            return
        pages = self.ctx.per_shard(lambda batch, shard: batch.command(
            "ZRANGEBYSCORE", getattr(self.ctx.schema.shard_keys(shard), self.index), "-inf",
            now_ms, "WITHSCORES", "LIMIT", 0, self.depth), shards=shards)
        found: list[tuple[str, float]] = []
        for shard, (page,) in pages:
            pairs = score_pairs(page)
            found += self._of_shard(shard, pairs)
            if len(pairs) < self.depth:
                self._shard_full.discard(shard)
        if not found:
            return
        node = self.ctx.schema.node
        sizes = self.ctx.reads([("HGET", node(prefix_hash), "b") for prefix_hash, _ in found])
        for (prefix_hash, score), size in zip(found, sizes):
            self.push(prefix_hash, score, to_int(size))

    def _of_shard(self, shard: str, pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
        """The entries that can be leaves of the shard; any other (junk a namespace user
        planted: no node of this shard can have that hash) is dropped from the index."""
        junk = [member for member, _ in pairs if self.ctx.shard(member) != shard]
        if not junk:
            return pairs
        log.warning("dropping %d entries of %s that name no node of its shard (first: %r)",
                    len(junk), self.index, junk[0][:200])
        self.ctx.defer("ZREM", getattr(self.ctx.schema.shard_keys(shard), self.index), *junk)
        return [(member, score) for member, score in pairs if member not in junk]

    def take(self, need_bytes: int, limit: int, now_ms: int) -> list[tuple[str, float]]:
        """The oldest evictable leaves, enough for need_bytes, at most limit; stops early
        where a used-up shard must be read again first (to keep the order exact)."""
        self.refill(now_ms)
        now_ms -= self.lapse_ms
        chosen: list[tuple[str, float]] = []
        planned = 0
        while self._heap and len(chosen) < limit and planned < need_bytes:
            score, prefix_hash = self._heap[0]
            if self._score.get(prefix_hash) != score:
                heapq.heappop(self._heap)  # superseded by a later push, or dropped
                continue
            if score > now_ms:
                break
            heapq.heappop(self._heap)
            planned += self._bytes.get(prefix_hash, 0)
            chosen.append((prefix_hash, score))
            self.drop(prefix_hash)
            shard = self.ctx.shard(prefix_hash)
            if shard in self._shard_full and not self._shard_left[shard]:
                break  # its unread leaves may be older than the next pick: read it first
        return chosen


class Evictor:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._interior_cursors: dict[str, int] = {}
        self._passes: list[Candidates] = []

    def run(self, target_ratio: float | None = None, max_rounds: int | None = None,
            on_round: Callable[[EvictionReport], None] | None = None) -> EvictionReport:
        """One eviction job: rounds until used bytes are at or below the target (default
        high_watermark - eviction_ratio of capacity), nothing is evictable, or the round
        limit is reached. Holds the namespace's eviction lock throughout. Logs one INFO
        line per job, however it stopped (rounds, leaves, objects, bytes, time)."""
        started = time.monotonic()
        report = EvictionReport()
        try:
            self._run(report, target_ratio, max_rounds, on_round)
        except Exception:
            report.seconds = time.monotonic() - started
            log.warning("eviction job in namespace %s failed after %d rounds, %d objects, %d "
                        "bytes, %.3f s", self.ctx.schema.namespace, report.rounds,
                        report.objects, report.bytes, report.seconds)
            raise
        report.seconds = time.monotonic() - started
        log.info("eviction job in namespace %s: %s", self.ctx.schema.namespace,
                 report.summary())
        for observer in job_observers:
            observer(self.ctx.schema.namespace, report)
        return report

    def _run(self, report: EvictionReport, target_ratio: float | None,
             max_rounds: int | None,
             on_round: Callable[[EvictionReport], None] | None) -> None:
        ctx, settings = self.ctx, self.ctx.settings
        report.used_bytes = report.start_used_bytes = used_bytes(ctx)
        target = self._target_bytes(target_ratio)
        if target is None:
            report.stopped = NO_CAPACITY
            return
        report.target_bytes = target
        token = uuid.uuid4().hex
        if not take_eviction_lock(ctx, token):
            report.stopped = LOCK_HELD
            return
        try:
            ctx.check_maxmemory()  # at maxmemory, this job's events free their stream first
            report.resolver = resolve(ctx)
            rescore_leaves(ctx, latest_possible_score(ctx, ctx.redis_time_ms()))
            self._rounds(report, target, max_rounds or settings.max_rounds_per_job, token,
                         on_round)
            rebalance(ctx, token)  # under this job's lock
        finally:
            ctx.flush()
            self._lock(token, "release")

    def _rounds(self, report: EvictionReport, target: int, rounds: int, token: str,
                on_round: Callable[[EvictionReport], None] | None) -> None:
        settings = self.ctx.settings
        depth = max(MIN_HEAD_PER_SHARD,
                    math.ceil(4 * settings.leaves_per_round / len(self.ctx.all_shards())))
        passes = [Candidates(self.ctx, "leaves", depth)]
        if settings.soft_pin_ttl_ms:
            passes.append(Candidates(self.ctx, "soft_leaves", depth, settings.soft_pin_ttl_ms))
        if settings.allow_soft_pin_eviction:
            passes.append(Candidates(self.ctx, "soft_leaves", depth, soft=True))
        self._passes = passes
        report.stopped = ROUND_LIMIT
        width = 1  # leaves a round may take: doubles each round, up to leaves_per_round
        for _ in range(rounds):
            if report.used_bytes <= target:
                report.stopped = TARGET_REACHED
                return
            self._lock(token, "renew")
            before = report.bytes
            freed = self._round(passes, report.used_bytes - target, report,
                                min(width, settings.leaves_per_round))
            width *= 2
            freed_bytes = report.bytes - before
            if not freed:
                report.stopped = NOTHING_EVICTABLE
                return
            report.rounds += 1
            report.used_bytes -= freed_bytes
            if report.rounds % USAGE_REREAD_ROUNDS == 0 or report.used_bytes <= target:
                report.used_bytes = used_bytes(self.ctx)  # puts meanwhile count too
            if on_round is not None:
                on_round(report)
        if report.used_bytes <= target:
            report.stopped = TARGET_REACHED

    def _round(self, passes: list[Candidates], need_bytes: int, report: EvictionReport,
               limit: int) -> int:
        """One round of at most `limit` leaves: the plain leaves, else the soft-pinned ones
        whose pins lapsed, else (by option) any soft-pinned ones, else (by option) interior
        nodes. Returns the objects evicted."""
        now_ms = self.ctx.redis_time_ms()
        for candidates in passes:
            chosen = candidates.take(need_bytes, limit, now_ms)
            if chosen:
                evicted = self._evict(chosen, "leaf", candidates.soft, candidates, report,
                                      need_bytes)
                if evicted:
                    return evicted
        if self.ctx.settings.allow_path_breaking_eviction:
            return self._evict(self._interior_nodes(now_ms), "interior",
                               self.ctx.settings.allow_soft_pin_eviction, None, report)
        return 0

    def _evict(self, chosen: list[tuple[str, float]], mode: str, soft: bool,
               candidates: Candidates | None, report: EvictionReport,
               need_bytes: int = 0) -> int:
        """One evict call per Redis node for the chosen nodes, then the cascade. A call
        unlinks its leaves from their parents where that node serves them (and so on up),
        and the cascade's calls (the same script, one per node and level) unlink the
        others; either evicts a parent left a leaf scored no later than this round's
        latest choice, within the bytes the round still needs (split between the calls)."""
        ctx = self.ctx
        round_ = _Round(candidates, soft, need_bytes, chosen)
        calls = round_.calls(ctx, {ctx.shard(prefix_hash) for prefix_hash, _ in chosen})
        for prefix_hash, seen in chosen:
            calls.item(ctx.shard(prefix_hash), prefix_hash, prefix_hash, _score_arg(seen),
                       mode, "")
        results = self._send(calls)
        evicted = 0
        for prefix_hash, outcome in calls.per_item(results, part=0):
            if outcome.startswith("E"):
                count, size = outcome[1:].split(":")
                evicted += int(count)
                report.objects += int(count)
                report.bytes += int(size)
                report.leaves += mode == "leaf"
                report.interior_nodes += mode == "interior"
            elif outcome.startswith("S") and candidates is not None:
                score = float(outcome[1:])
                if math.isfinite(score):
                    candidates.push(prefix_hash, score)
        if mode != "leaf":
            cascade(ctx, self._intents(calls, results, round_, report), self._on_new_leaf)
            return evicted
        level = self._intents(calls, results, round_, report)
        depth = 0
        while level:
            depth += 1
            if depth > ctx.settings.max_depth:
                raise MooncakeRedisError(f"cascade deeper than max_depth={ctx.settings.max_depth}; "
                                         "the resolver finishes it from the outbox")
            calls = round_.calls(ctx, {ctx.shard(parent) for parent, _, _ in level})
            for parent, child, epoch in level:
                calls.item(ctx.shard(parent), parent, parent, int(epoch), "unlink", child)
            results = self._send(calls)
            clear_outbox(ctx, level)
            before = report.objects
            level = self._intents(calls, results, round_, report)
            evicted += report.objects - before
        return evicted

    def _send(self, calls: NodeCalls[str]) -> list[Any]:
        batch = self.ctx.batch()
        calls.queue(batch)
        results = batch.execute()
        raise_first_error(results)
        return results

    def _intents(self, calls: NodeCalls[str], results: list[Any], round_: _Round,
                 report: EvictionReport) -> list[Intent]:
        """What the calls' replies carry besides the items' outcomes: the parents evicted
        inside (counted), the new leaves (on the heaps) and the unlinks to run elsewhere
        (returned)."""
        intents: list[Intent] = []
        for _, (_, intents_flat, leaves_flat, inside) in calls.replies(results):
            intents += triples(intents_flat)
            for leaf in new_leaves(leaves_flat):
                self._on_new_leaf(leaf)
            leaves, objects, size = (int(x) for x in inside)
            report.leaves += leaves
            report.objects += objects
            report.bytes += size
            round_.need_bytes -= size
        return intents

    def _on_new_leaf(self, leaf: NewLeaf) -> None:
        """A parent became a leaf: it goes on its index's heaps with its own score."""
        prefix_hash, score, size, soft = leaf
        index = "soft_leaves" if soft else "leaves"
        if math.isfinite(score):
            for candidates in self._passes:
                if candidates.index == index:
                    candidates.push(prefix_hash, score, size)

    def _interior_nodes(self, now_ms: int) -> list[tuple[str, float]]:
        """Path-breaking eviction's candidates: interior nodes whose objects are all
        evictable, found by a bounded SCAN per round (it is a last resort)."""
        pattern = self.ctx.schema.node_pattern()
        found: list[str] = []
        for node_client in primaries(self.ctx.client):
            cursor = self._interior_cursors.get(str(node_client), 0)
            cursor, keys = node_client.scan(cursor, match=pattern, count=INTERIOR_SCAN_COUNT)
            self._interior_cursors[str(node_client)] = cursor
            found += keys
        if not found:
            return []
        batch = self.ctx.batch()
        for key in found:
            batch.command("HGETALL", key)
        chosen = []
        for key, fields in zip(found, batch.execute()):
            node = split_node(fields)
            if node.children and node.objects:
                chosen.append((self.ctx.schema.hash_of_node_key(key), float(now_ms)))
        return chosen[:self.ctx.settings.leaves_per_round]

    def _target_bytes(self, target_ratio: float | None) -> int | None:
        capacity = self.ctx.settings.capacity_bytes
        if target_ratio is not None:
            if isinstance(target_ratio, bool) or not isinstance(target_ratio, (int, float)) \
                    or not 0 <= target_ratio <= 1:
                raise InvalidArgument(f"target_ratio must be in [0, 1], got {target_ratio!r}")
            if capacity == 0 and target_ratio > 0:
                raise InvalidArgument(
                    "capacity_bytes is unlimited (0): a target ratio of it means nothing; "
                    "set the capacity (set_config(capacity_bytes=...), `mooncake-redis "
                    "config set capacity_bytes=64GiB`), or use target_ratio=0 to evict "
                    "everything evictable")
            return int(target_ratio * capacity)
        if capacity == 0:
            return None
        return int(self.ctx.settings.eviction_target_ratio * capacity)

    def _lock(self, token: str, operation: str) -> bool:
        return eviction_lock(self.ctx, operation, token)


class _Round:
    """What the evict calls of one round share: the pass, its cutoff and the bytes the
    round may still free inside the calls."""

    def __init__(self, candidates: Candidates | None, soft: bool, need_bytes: int,
                 chosen: list[tuple[str, float]]):
        self.candidates = candidates
        self.soft = soft
        self.cutoff = int(max((seen for _, seen in chosen if math.isfinite(seen)), default=0))
        planned = 0 if candidates is None else sum(candidates.size(h) for h, _ in chosen)
        self.need_bytes = need_bytes - planned
        """Bytes beyond the chosen leaves' that parents evicted inside the calls may free."""

    def calls(self, ctx: Context, shards: set[str]) -> NodeCalls[str]:
        index = "" if self.candidates is None else self.candidates.index
        nodes = {ctx.node_of(shard) for shard in shards}
        allowance = max(0, self.need_bytes) // max(1, len(nodes))
        return ctx.calls("evict", 1 if self.soft else 0, ctx.settings.soft_pin_ttl_ms, index,
                         self.cutoff, allowance)


NEVER = 1 << 62
"""The score sent for +inf: later than any Redis time in ms (JSON has no infinity)."""


def _score_arg(score: float) -> int:
    return NEVER if math.isinf(score) else int(score)
