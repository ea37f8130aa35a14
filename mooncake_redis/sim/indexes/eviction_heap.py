"""Eviction candidates by score in a binary heap with lazy deletion: O(log n) per push and
(amortized) per pop, never a scan of the cache."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Hashable
from typing import Generic, TypeVar

_COMPACT_SLACK = 1024
"""Stale entries tolerated beyond one per live page before the heap is rebuilt."""


KeyT = TypeVar("KeyT", bound=Hashable)


class EvictionHeap(Generic[KeyT]):
    """Pages (or any hashable keys) by (score, push order). Re-scoring a page is a new push;
    the older entry goes stale and is skipped when it surfaces. An entry that surfaces while
    its page may not be evicted (an inner node, a page the current request holds) is
    dropped: the owner pushes the page again when it becomes evictable, or at its next use."""

    def __init__(self) -> None:
        self._entries: list[tuple[float, int, KeyT]] = []
        self._latest: dict[KeyT, int] = {}  # page -> push number of its live entry
        self._pushes = 0

    def __len__(self) -> int:
        """Entries held, stale ones included (what the memory figure pays for)."""
        return len(self._entries)

    def push(self, page: KeyT, score: float) -> None:
        self._pushes += 1
        self._latest[page] = self._pushes
        heapq.heappush(self._entries, (score, self._pushes, page))
        if len(self._entries) > 2 * len(self._latest) + _COMPACT_SLACK:
            self._compact()

    def pop(self, is_evictable: Callable[[KeyT], bool], held: Container[KeyT]) -> KeyT | None:
        """The lowest-scored page with a live entry that is evictable and not held; None when
        there is none."""
        entries, latest, pop = self._entries, self._latest, heapq.heappop
        while entries:
            _, push_number, page = pop(entries)
            if latest.get(page) != push_number:
                continue
            del latest[page]
            if page not in held and is_evictable(page):
                return page
        return None

    def _compact(self) -> None:
        latest = self._latest
        self._entries = [entry for entry in self._entries if latest.get(entry[2]) == entry[1]]
        heapq.heapify(self._entries)
