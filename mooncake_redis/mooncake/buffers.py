"""Caller memory given by address, as Mooncake's zero-copy calls take it: the buffers a
store has registered (register_buffer), and views of their bytes.

Mooncake's docs require every address passed to put_from / get_into and their batch and
ranged forms to lie in registered memory. The drop-in holds to that: an address range
outside every registered buffer is refused with INVALID_PARAMS before a byte is touched,
so a wrong address cannot make it write over the process's memory (Mooncake's tcp
transport happens to accept unregistered memory; RDMA does not).
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

    def clear(self) -> None:
        with self._lock:
            self._regions.clear()


def view(address: int, size: int) -> memoryview:
    """A writable byte view of size bytes at address (which the caller checked with
    RegisteredBuffers.holds)."""
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
