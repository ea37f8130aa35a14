"""Which segments get an object's replicas: the way Mooncake's master allocates them
(RandomAllocationStrategy::Allocate in mooncake-store/include/allocation_strategy.h).

Best effort, replicas on distinct segments: the preferred segments first, in order,
each that is mounted and has room; then the other segments, starting at a random one
and going round once, each with room; as many replicas as found, up to replica_num; none
at all is Mooncake's NO_AVAILABLE_HANDLE. "Room" is the segment's capacity minus the
bytes the store counts on it, as this process last read them (SegmentView): the store's
own admission, in put_start, is what keeps the namespace within its capacity.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Sequence

from ..index import Index
from ..models import Usage


class SegmentView:
    """The mounted segments and their free bytes, as last read from the store (usage(),
    three round trips), plus what this process put on them since."""

    def __init__(self) -> None:
        self._free: dict[str, int] = {}
        self._capacity: dict[str, int] = {}
        self._lock = threading.Lock()

    def refresh(self, index: Index) -> Usage:
        """Read the segments again; the usage read (for the keeper's watermark check)."""
        usage = index.usage()
        segments = {name: segment for name, segment in usage.segments.items()
                    if segment.mounted}
        with self._lock:
            self._free = {name: s.capacity_bytes - s.used_bytes for name, s in segments.items()}
            self._capacity = {name: s.capacity_bytes for name, s in segments.items()}
        return usage

    def could_hold(self, size: int) -> bool:
        """Whether any mounted segment is that big (else no eviction can make room)."""
        with self._lock:
            return any(capacity >= size for capacity in self._capacity.values())

    def mounted(self) -> list[str]:
        with self._lock:
            return sorted(self._free)

    def room(self, name: str, size: int) -> bool:
        with self._lock:
            return self._free.get(name, -1) >= size

    def add(self, names: Iterable[str], size: int) -> None:
        with self._lock:
            for name in names:
                if name in self._free:
                    self._free[name] -= size


def choose(mounted: Sequence[str], preferred: Sequence[str], replica_num: int,
           fits: Callable[[str], bool], rng: random.Random) -> list[str]:
    """The segments for one object's replicas, in order (at most replica_num; [] when no
    mounted segment fits)."""
    chosen: list[str] = []
    names = set(mounted)
    for name in preferred:
        if len(chosen) == replica_num:
            return chosen
        if name in names and name not in chosen and fits(name):
            chosen.append(name)
    if not mounted:
        return chosen
    start = rng.randrange(len(mounted))
    for step in range(len(mounted)):
        if len(chosen) == replica_num:
            break
        name = mounted[(start + step) % len(mounted)]
        if name not in chosen and fits(name):
            chosen.append(name)
    return chosen
