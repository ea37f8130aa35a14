"""Caller memory given by address, as Mooncake's zero-copy calls take it: the buffers a
store has registered (register_buffer), views of their bytes, and the memory the store
hands out (alloc_from_mem_pool).

Mooncake's docs ask every address passed to put_from / get_into and their batch forms to
lie in registered memory; its tcp transport takes any memory of the process, and code
(its own tests among them) relies on that. The drop-in does as the tcp transport does,
without the crash a wrong address gives there: a range in a registered buffer is taken
as it is; any other range must lie in memory the process has mapped, readable (for a put)
or writable (for a get), as /proc/self/maps lists it (where there is no /proc, only
registered memory is taken). A range that starts in a registered buffer and runs past
its end is refused. Refused: INVALID_PARAMS, before a byte is touched. A ranged read
(get_into_ranges) needs its buffer registered: the registered size is what its
destination offsets are checked against.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Region:
    address: int
    size: int

    @property
    def end(self) -> int:
        return self.address + self.size


class RegisteredBuffers:
    """One store's registered buffers: disjoint address ranges."""

    def __init__(self) -> None:
        self._regions: list[Region] = []  # sorted by address
        self._lock = threading.Lock()

    def register(self, address: int, size: int) -> bool:
        """False (Mooncake: INVALID_PARAMS) for a null address, a size of 0, or a range
        overlapping one registered already."""
        if address <= 0 or size <= 0:
            return False
        with self._lock:
            at = bisect.bisect_left([r.address for r in self._regions], address)
            before = self._regions[at - 1] if at else None
            after = self._regions[at] if at < len(self._regions) else None
            if (before and before.end > address) or (after and after.address < address + size):
                return False
            self._regions.insert(at, Region(address, size))
            return True

    def unregister(self, address: int) -> bool:
        """False if no buffer was registered at exactly this address."""
        with self._lock:
            for number, region in enumerate(self._regions):
                if region.address == address:
                    del self._regions[number]
                    return True
            return False

    def room_at(self, address: int) -> int:
        """How many bytes from address to the end of the registered buffer holding it;
        0 if none holds it."""
        with self._lock:
            at = bisect.bisect_right([r.address for r in self._regions], address)
            if not at:
                return 0
            region = self._regions[at - 1]
            return max(0, region.end - address)

    def holds(self, address: int, size: int) -> bool:
        """Whether [address, address + size) lies in one registered buffer."""
        return size >= 0 and self.room_at(address) >= max(size, 1)

    def allows(self, address: int, size: int, writable: bool) -> bool:
        """Whether a zero-copy call may read (or, writable, write) [address, address +
        size): a registered buffer holds it, or no registered buffer holds part of it and
        the process has it mapped so."""
        if address <= 0 or size < 0:
            return False
        end = address + size
        with self._lock:
            for region in self._regions:
                if region.address <= address and end <= region.end:
                    return True
                if region.address < end and address < region.end:
                    return False  # runs past a registered buffer
        return mapped(address, size, writable)

    def clear(self) -> None:
        with self._lock:
            self._regions.clear()


class _Maps:
    """The process's mappings as /proc/self/maps last listed them (read again when a range
    is not found in them: memory mapped since). A range found there that the caller
    unmapped since is the caller's error, as it would be on Mooncake."""

    def __init__(self) -> None:
        self._spans: list[tuple[int, int, str]] = []
        self._lock = threading.Lock()

    def covers(self, address: int, size: int, writable: bool) -> bool:
        with self._lock:
            if self._within(address, size, writable):
                return True
            try:
                with open("/proc/self/maps") as maps:
                    self._spans = [_span(line) for line in maps]
            except OSError:
                self._spans = []
            return self._within(address, size, writable)

    def _within(self, address: int, size: int, writable: bool) -> bool:
        needed = "rw" if writable else "r"
        position, end = address, address + max(size, 1)
        at = bisect.bisect_right(self._spans, (position, 1 << 64, "")) - 1
        for low, high, permissions in self._spans[max(at, 0):]:
            if high <= position:
                continue
            if low > position or not all(flag in permissions for flag in needed):
                return False
            position = high
            if position >= end:
                return True
        return False


def _span(line: str) -> tuple[int, int, str]:
    span, permissions = line.split(None, 2)[:2]
    low, high = span.split("-")
    return int(low, 16), int(high, 16), permissions


_MAPS = _Maps()


def mapped(address: int, size: int, writable: bool) -> bool:
    """Whether the process has [address, address + size) mapped, readable (and writable),
    by /proc/self/maps; False where there is no /proc."""
    return _MAPS.covers(address, size, writable)


def view(address: int, size: int) -> memoryview:
    """A writable byte view of size bytes at address (which the caller checked with
    RegisteredBuffers.allows)."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")


class BufferHandle(bytearray):
    """An object's bytes, as get_buffer returns them: Mooncake's BufferHandle accessors
    (ptr(), size(), len(), the buffer protocol) over memory of this process that stays
    put while the handle lives. Unlike Mooncake's (format "b"), its buffer's format is
    "B" (unsigned bytes), as a bytearray's is."""

    def ptr(self) -> int:
        """The address of the first byte (0 for an empty handle)."""
        if not self:
            return 0
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def size(self) -> int:
        return len(self)


class MemoryPool:
    """Memory alloc_from_mem_pool hands out (a dummy client's pool): zeroed buffers of
    this process, kept until the store closes; not registered until register_buffer."""

    def __init__(self) -> None:
        self._buffers: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._lock = threading.Lock()

    def allocate(self, size: int) -> int:
        """The address of a new buffer of size bytes (0 for none)."""
        if size <= 0:
            return 0
        buffer = (ctypes.c_char * size)()
        address = ctypes.addressof(buffer)
        with self._lock:
            self._buffers[address] = buffer
        return address

    def clear(self) -> None:
        with self._lock:
            self._buffers.clear()
