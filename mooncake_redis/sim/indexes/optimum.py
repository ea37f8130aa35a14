"""Belady's offline optimum on the generated workload: the most read hits any eviction
policy, on any index, can get at a capacity.

The workload is demand paging over single KV entries, every entry the same size: each
read of an entry that is not cached is a miss that caches it again (the KV is
recomputed), each write caches a new entry, and a full cache first evicts one entry. For
that model Belady's rule, evict the cached entry whose next reference is farthest away
(never again counts as farthest), misses the fewest references of all schedules (Belady
1966; Mattson et al. 1970). Every write is an entry's first reference, a miss under any
schedule, so the fewest misses is the most read hits. Entries have no parents here, so
no order constraint applies (the page-chain form, with one, is trace/page_optimum.py).

The references are read in the order the runner replays them (indexes/runner.py): span by
span, each position's entries layer by layer and head by head."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from mooncake_redis.sim.indexes.workload import SpanKind, Workload

OPTIMUM_POLICY = "belady"
"""The optimum's name where policies are named (`--policies`, the tables)."""

OPTIMUM_INDEX = "any"
"""The index column of the generated workload's optimum row: it bounds every index."""


@dataclass(frozen=True)
class References:
    """A workload's entry references in replay order, and each one's next reference."""

    entries: list[int]
    """Per reference, the entry (a dense number for (sequence, position, layer, head))."""
    is_read: list[bool]
    next_use: list[int]
    """Per reference, the index of the entry's next reference; len(entries) for none."""

    @property
    def reads(self) -> int:
        return sum(self.is_read)


def workload_references(workload: Workload) -> References:
    """Every read and write of an entry, in the order the runner replays them."""
    config = workload.config
    per_position = config.layers * config.heads
    system_length = len(workload.system_prompt)
    lengths = [system_length] + [system_length + len(t) for t in workload.session_tokens]
    first_position = [0]
    for length in lengths[:-1]:
        first_position.append(first_position[-1] + length)
    entries: list[int] = []
    is_read: list[bool] = []
    for span in workload.spans:
        if span.kind not in (SpanKind.READ, SpanKind.WRITE):
            continue
        read = span.kind is SpanKind.READ
        base = first_position[span.sequence]
        for position in range(span.start, span.end):
            first = (base + position) * per_position
            entries.extend(range(first, first + per_position))
            is_read.extend([read] * per_position)
    return References(entries, is_read, next_uses(entries))


def next_uses(items: list[int]) -> list[int]:
    """Per position of `items`, the position where the same item comes next; len(items)
    where it never does."""
    never = len(items)
    following: dict[int, int] = {}
    result = [never] * never
    for position in range(never - 1, -1, -1):
        item = items[position]
        result[position] = following.get(item, never)
        following[item] = position
    return result


@dataclass(frozen=True)
class OptimumCounts:
    reads: int
    hits: int
    evicted_entries: int


def belady_hits(references: References, capacity: int) -> OptimumCounts:
    """Replay the references on a cache of `capacity` entries that evicts the entry whose
    next reference is farthest (a max-heap by next use, stale entries skipped)."""
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1 entry, got {capacity}")
    cached: dict[int, int] = {}  # entry -> its next reference
    farthest_first: list[tuple[int, int]] = []  # (-next reference, entry)
    hits = evicted = 0
    push, pop = heapq.heappush, heapq.heappop
    for entry, read, next_use in zip(references.entries, references.is_read,
                                     references.next_use):
        if entry in cached:
            hits += read
        elif len(cached) >= capacity:
            while True:
                negative_next, victim = pop(farthest_first)
                if cached.get(victim) == -negative_next:
                    break
            del cached[victim]
            evicted += 1
        cached[entry] = next_use
        push(farthest_first, (-next_use, entry))
    return OptimumCounts(references.reads, hits, evicted)


RowT = TypeVar("RowT", bound=Any)


def with_share_of_optimum(results: list[RowT], rate: str, share: str) -> list[RowT]:
    """Each row (a dataclass with `policy` and `capacity_fraction`) with its `share` field
    set to its `rate` over the optimum row's at the same capacity, where the optimum ran
    and hit anything."""
    optimum = {result.capacity_fraction: getattr(result, rate) for result in results
               if result.policy == OPTIMUM_POLICY}
    return [
        replace(result, **{share: getattr(result, rate) / optimum[result.capacity_fraction]})
        if optimum.get(result.capacity_fraction) else result
        for result in results
    ]
