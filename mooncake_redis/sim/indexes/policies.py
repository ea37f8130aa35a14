"""Eviction policies: each decides what to evict and asks the index (a CacheIndex) to do it."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, ClassVar

from mooncake_redis.sim.indexes.cache_index import NORMAL_TIER, PROTECTED_TIER, CacheIndex
from mooncake_redis.sim.indexes.eviction_heap import EvictionHeap
from mooncake_redis.sim.indexes.keys import CacheKey
from mooncake_redis.sim.indexes.workload import SYSTEM_PROMPT_SEQUENCE, Span, SpanKind


class EvictionPolicy(ABC):
    """The runner tells a policy what the workload does; `evict` frees at least one entry."""

    name: ClassVar[str]

    def __init__(self, index: CacheIndex[Any], layers: int, heads: int) -> None:
        self.index = index
        self.layers = layers
        self.heads = heads

    def tier_for(self, sequence: int, position: int) -> int:
        """The LRU tier a newly cached entry of this position joins."""
        return NORMAL_TIER

    def on_span(self, span: Span) -> None:  # noqa: B027 (an optional hook)
        """A question was asked or answered (READ and WRITE spans are reported per position)."""

    def on_position_used(self, sequence: int, position: int) -> None:  # noqa: B027
        """A position was read or written, in every layer and head."""

    def on_insert(self, sequence: int, position: int) -> None:  # noqa: B027
        """One entry of this position was cached."""

    @abstractmethod
    def evict(self) -> int:
        """Evict by this policy's rule; return how many entries were removed (0: none left)."""

    def cached_keys_of_span(self, sequence: int, start: int, end: int) -> list[Hashable]:
        """Cached keys of positions start..end-1 in every layer and head: one range query each,
        since the keys of one head are contiguous in key order."""
        encode = self.index.encode_key
        keys: list[Hashable] = []
        for layer in range(self.layers):
            for head in range(self.heads):
                low = encode(CacheKey(sequence, layer, head, start))
                high = encode(CacheKey(sequence, layer, head, end))
                keys.extend(self.index.keys_in_range(low, high))
        return keys


class LruPolicy(EvictionPolicy):
    """Evict the least recently used entry."""

    name = "lru"

    def evict(self) -> int:
        return 0 if self.index.evict_oldest(NORMAL_TIER) is None else 1


class PrefixProtectedLruPolicy(EvictionPolicy):
    """LRU that spares the system prompt and the current question while anything else is left.

    Protected entries live on their own LRU tier, so the victim is the oldest unprotected
    entry, or the oldest protected one when nothing unprotected is cached (or, with a
    bounded index, when none was found within its search budget).
    """

    name = "prefix-protected"

    def __init__(self, index: CacheIndex[Any], layers: int, heads: int) -> None:
        super().__init__(index, layers, heads)
        self._current_question: Span | None = None

    def tier_for(self, sequence: int, position: int) -> int:
        question = self._current_question
        if sequence == SYSTEM_PROMPT_SEQUENCE or (
            question is not None
            and sequence == question.sequence
            and question.start <= position < question.end
        ):
            return PROTECTED_TIER
        return NORMAL_TIER

    def on_span(self, span: Span) -> None:  # noqa: B027 (an optional hook)
        if span.kind is SpanKind.QUESTION_ASKED:
            self._current_question, tier = span, PROTECTED_TIER
        elif span.kind is SpanKind.QUESTION_ANSWERED:
            self._current_question, tier = None, NORMAL_TIER
        else:
            return
        for key in self.cached_keys_of_span(span.sequence, span.start, span.end):
            self.index.insert(key, tier)

    def evict(self) -> int:
        for tier in (NORMAL_TIER, PROTECTED_TIER):
            if self.index.evict_oldest(tier) is not None:
                return 1
        return 0


def heat_after_use(log_heat: float | None, now: float) -> float:
    """log2 of a decayed use count after one more use at `now` (in half-lives).

    A count that halves every half-life orders items exactly as the sum of 2**(use time)
    over their uses does; kept as its log2 it never overflows and needs no rescaling."""
    if log_heat is None:
        return now
    high, low = (now, log_heat) if now >= log_heat else (log_heat, now)
    return high + math.log2(1.0 + 2.0 ** (low - high))


class BlockHeatPolicy(EvictionPolicy):
    """Evict, all at once, the cached block of positions with the least access heat.

    A block is `block_tokens` consecutive positions of one sequence, in every layer and head.
    Heat is an access count that halves every `half_life_uses` position uses
    (heat_after_use). Cached blocks wait in a heap by heat, re-queued when used, so finding
    the coldest is O(log n), not a scan of every block.
    """

    name = "block-heat"

    def __init__(
        self,
        index: CacheIndex[Any],
        layers: int,
        heads: int,
        block_tokens: int = 16,
        half_life_uses: int = 4096,
    ) -> None:
        super().__init__(index, layers, heads)
        if block_tokens < 1 or half_life_uses < 1:
            raise ValueError("block_tokens and half_life_uses must be at least 1")
        self.block_tokens = block_tokens
        self._half_life = float(half_life_uses)
        self._uses = 0
        self._log_heat: dict[tuple[int, int], float] = {}
        self._cached_entries: dict[tuple[int, int], int] = {}
        self._coldest: EvictionHeap[tuple[int, int]] = EvictionHeap()

    def heat_of(self, sequence: int, position: int) -> float:
        """The block's current heat, in units of the most recent use's weight."""
        log_heat = self._log_heat.get((sequence, position // self.block_tokens))
        return 0.0 if log_heat is None else 2.0 ** (log_heat - self._uses / self._half_life)

    def on_position_used(self, sequence: int, position: int) -> None:  # noqa: B027
        self._uses += 1
        block = (sequence, position // self.block_tokens)
        heat = self._log_heat[block] = heat_after_use(
            self._log_heat.get(block), self._uses / self._half_life)
        if block in self._cached_entries:
            self._coldest.push(block, heat)

    def on_insert(self, sequence: int, position: int) -> None:  # noqa: B027
        block = (sequence, position // self.block_tokens)
        entries = self._cached_entries[block] = self._cached_entries.get(block, 0) + 1
        if entries == 1:
            self._coldest.push(block, self._log_heat.get(block, -math.inf))

    def evict(self) -> int:
        coldest = self._coldest.pop(self._cached_entries.__contains__, held=())
        if coldest is None:
            return 0
        del self._cached_entries[coldest]
        sequence, block_number = coldest
        start = block_number * self.block_tokens
        keys = self.cached_keys_of_span(sequence, start, start + self.block_tokens)
        for key in keys:
            self.index.remove(key)
        return len(keys)


POLICY_NAMES = (LruPolicy.name, PrefixProtectedLruPolicy.name, BlockHeatPolicy.name)
