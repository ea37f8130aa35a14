"""An intrusive doubly linked LRU list: tree nodes carry their own links, so every step is O(1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class LruLinked(Protocol):
    """Anything that can sit on an LruList: two link slots the list owns."""

    lru_previous: LruLinked | None
    lru_next: LruLinked | None


ItemT = TypeVar("ItemT", bound=LruLinked)


class _Sentinel:
    __slots__ = ("lru_next", "lru_previous")

    def __init__(self) -> None:
        self.lru_previous: LruLinked | None = self
        self.lru_next: LruLinked | None = self


class LruList(Generic[ItemT]):
    """Oldest at the head, most recently used at the tail; a circular list around a sentinel."""

    __slots__ = ("_length", "_sentinel")

    def __init__(self) -> None:
        self._sentinel = _Sentinel()
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def append(self, item: ItemT) -> None:
        """Put `item` (not on any list) at the most recently used end."""
        last = self._sentinel.lru_previous
        assert last is not None
        item.lru_previous = last
        item.lru_next = self._sentinel
        last.lru_next = item
        self._sentinel.lru_previous = item
        self._length += 1

    def unlink(self, item: ItemT) -> None:
        """Take `item` off this list."""
        previous, following = item.lru_previous, item.lru_next
        assert previous is not None and following is not None
        previous.lru_next = following
        following.lru_previous = previous
        item.lru_previous = item.lru_next = None
        self._length -= 1

    def move_to_end(self, item: ItemT) -> None:
        """Mark `item` (already on this list) as most recently used."""
        self.unlink(item)
        self.append(item)

    def oldest(self) -> ItemT | None:
        """The least recently used item, or None when the list is empty."""
        first = self._sentinel.lru_next
        return None if first is self._sentinel else first  # type: ignore[return-value]

    def __iter__(self) -> Iterator[ItemT]:
        """Oldest first."""
        item = self._sentinel.lru_next
        while item is not self._sentinel:
            assert item is not None
            yield item  # type: ignore[misc]
            item = item.lru_next
