"""Mooncake's buffer pool (`BufferPool`, also `RegisteredBufferPool`) and host-memory
helpers (`MooncakeHostMemAllocator`, `bind_to_numa_node`): memory a program borrows for
zero-copy puts and gets.

BufferPool(store, max_bytes=0, min_size_class=64 KiB, max_size_class=None,
alignment=8 MiB, block_on_exhaustion=True, default_timeout=None, max_regions=None,
prewarm_size=None, prewarm_count=0): acquire(size) lends a lease of exactly size bytes
(ptr, size, a writable memoryview `buffer`) from a region of its size class (a power of
two from min_size_class up, or the size itself past max_size_class), aligned to
min(alignment, 4 KiB) at least, and registered with the store (register_buffer) while
the pool lives. A released region is lent again. When max_regions regions (or max_bytes
bytes, if set) are out, acquire waits for a release (block; timeout seconds) or raises
RuntimeError("... exhausted"). Mooncake carves its regions from the store's local buffer
and overflows to new memory; here every region is memory of its own.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .checks import boolean, uint64

PAGE = 4096
_ALIGN_CAP = PAGE
"""Regions are aligned to min(alignment, this): an 8 MiB alignment per small region
would waste the memory it is meant to save."""


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


class _Region:
    """One allocation: size bytes at an aligned address, registered with the store."""

    def __init__(self, size: int, alignment: int):
        self.size = size
        self._memory = (ctypes.c_char * (size + alignment))()
        base = ctypes.addressof(self._memory)
        self.address = (base + alignment - 1) // alignment * alignment


class BufferLease:
    """A region lent by a pool: ptr, size, buffer (a memoryview of exactly size bytes).
    release() gives it back (refused while a view of buffer is alive); a lease nobody
    released is given back when it is collected."""

    def __init__(self, pool: BufferPool, region: _Region, size: int):
        self._pool: BufferPool | None = pool
        self._region = region
        self.ptr = region.address
        self.size = size
        self._bytes = (ctypes.c_char * size).from_address(region.address) if size else \
            bytearray()

    @property
    def buffer(self) -> memoryview:
        return memoryview(self._bytes).cast("B")

    def release(self) -> None:
        if self._pool is None:
            return
        # a memoryview of the bytes holds a reference to them: the attribute and the
        # call's argument are the only ones when no view is alive
        if sys.getrefcount(self._bytes) > 2:
            raise RuntimeError("cannot release a BufferLease while its buffer has "
                               "exported views (drop them first)")
        pool, self._pool = self._pool, None
        pool._give_back(self._region)

    def __enter__(self) -> BufferLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool._give_back(self._region)


class BufferLeaseView:
    """Mooncake's view of a lease's bytes (its `buffer`)."""

    def __init__(self, lease: BufferLease):
        self.buffer = lease.buffer


RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView


class BufferPool:
    def __init__(self, store: Any, max_bytes: int = 0, min_size_class: int = 65536,
                 max_size_class: int | None = None, alignment: int = 8 << 20,
                 block_on_exhaustion: bool = True, default_timeout: float | None = None,
                 max_regions: int | None = None, prewarm_size: int | None = None,
                 prewarm_count: int = 0):
        self._store = store
        self._max_bytes = uint64(max_bytes, "max_bytes")
        self._min_class = uint64(min_size_class, "min_size_class")
        self._max_class = None if max_size_class is None else uint64(max_size_class,
                                                                     "max_size_class")
        alignment = uint64(alignment, "alignment")
        if not _power_of_two(alignment):
            raise RuntimeError(f"BufferPool alignment must be a power of two, got {alignment}")
        if not _power_of_two(max(self._min_class, 1)):
            raise RuntimeError(f"BufferPool min_size_class must be a power of two, got "
                               f"{self._min_class}")
        self._alignment = min(alignment, _ALIGN_CAP)
        self._block = boolean(block_on_exhaustion, "block_on_exhaustion")
        self._timeout = default_timeout
        self._max_regions = None if max_regions is None else uint64(max_regions, "max_regions")
        self._free: dict[int, list[_Region]] = {}
        self._regions: list[_Region] = []
        self._lent = 0
        self._closed = False
        self._changed = threading.Condition()
        if prewarm_count:
            self.prewarm(prewarm_size or self._min_class, prewarm_count)

    def acquire(self, size: int, block: bool | None = None, timeout: float | None = None
                ) -> BufferLease:
        """A lease of size bytes; RuntimeError when the pool is exhausted and may not wait
        (or waited timeout seconds), or size is more than memory can hold."""
        size = uint64(size, "size")
        wait = self._block if block is None else boolean(block, "block")
        timeout = self._timeout if timeout is None else timeout
        size_class = self._class_of(size)
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        with self._changed:
            while True:
                if self._closed:
                    raise RuntimeError("BufferPool is closed")
                region = self._take(size_class)
                if region is not None:
                    self._lent += 1
                    return BufferLease(self, region, size)
                left = None if deadline is None else deadline - time.monotonic()
                if not wait or (left is not None and left <= 0):
                    raise RuntimeError(f"BufferPool exhausted: no free region of "
                                       f"{size_class} bytes")
                self._changed.wait(left)

    buffer = acquire
    """Mooncake's other name for acquire."""

    def prewarm(self, size: int, count: int) -> None:
        """Allocate count regions for leases of size bytes now."""
        size_class = self._class_of(uint64(size, "size"))
        with self._changed:
            for _ in range(uint64(count, "count")):
                if not self._room_for(size_class):
                    break
                self._free.setdefault(size_class, []).append(self._allocate(size_class))

    def close(self) -> None:
        """Unregister and free every region; RuntimeError while leases are out."""
        with self._changed:
            if self._lent:
                raise RuntimeError(f"BufferPool.close: {self._lent} active leases")
            if self._closed:
                return
            self._closed = True
            for region in self._regions:
                self._unregister(region)
            self._regions.clear()
            self._free.clear()
            self._changed.notify_all()

    def _class_of(self, size: int) -> int:
        if size >= 1 << 62:
            raise RuntimeError(f"BufferPool: size {size} overflows the pool's capacity")
        size_class = max(self._min_class, 1)
        if self._max_class is not None and size > self._max_class:
            return size
        while size_class < size:
            size_class <<= 1
        return size_class

    def _take(self, size_class: int) -> _Region | None:
        free = self._free.get(size_class)
        if free:
            return free.pop()
        return self._allocate(size_class) if self._room_for(size_class) else None

    def _room_for(self, size_class: int) -> bool:
        if self._max_regions is not None and len(self._regions) >= self._max_regions:
            return False
        used = sum(region.size for region in self._regions)
        return not self._max_bytes or not self._regions or \
            used + size_class <= self._max_bytes

    def _allocate(self, size_class: int) -> _Region:
        region = _Region(size_class, self._alignment)
        if size_class:
            self._store.register_buffer(region.address, size_class)
        self._regions.append(region)
        return region

    def _unregister(self, region: _Region) -> None:
        if region.size:
            self._store.unregister_buffer(region.address)

    def _give_back(self, region: _Region) -> None:
        with self._changed:
            self._lent -= 1
            if not self._closed:
                self._free.setdefault(region.size, []).append(region)
            self._changed.notify_all()


RegisteredBufferPool = BufferPool


class MooncakeHostMemAllocator:
    """Page-aligned host memory by address: alloc(size) -> address (0 for none),
    free(address) -> 0, or -1 for an address it did not hand out."""

    def __init__(self) -> None:
        self._regions: dict[int, _Region] = {}
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int:
        size = uint64(size, "size")
        if not size:
            return 0
        region = _Region(size, PAGE)
        with self._lock:
            self._regions[region.address] = region
        return region.address

    def free(self, address: int) -> int:
        with self._lock:
            return 0 if self._regions.pop(uint64(address, "address"), None) else -1


def bind_to_numa_node(node: int, cpus_of: Callable[[int], set[int]] | None = None) -> None:
    """Run the calling thread on the CPUs of NUMA node `node` (Linux: its cpulist in
    sysfs). Mooncake also prefers the node's memory for allocations; Python has no call
    for that, so memory placement is left to the kernel. ValueError for a node this
    machine does not have."""
    cpus = (cpus_of or _node_cpus)(uint64(node, "node"))
    if not cpus:
        raise ValueError(f"NUMA node {node} has no CPUs here")
    os.sched_setaffinity(0, cpus)


def _node_cpus(node: int) -> set[int]:
    try:
        with open(f"/sys/devices/system/node/node{node}/cpulist") as listing:
            text = listing.read().strip()
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus
