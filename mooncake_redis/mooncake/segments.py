"""Mooncake's segment calls and its other ways to set a client up: mount_segment,
allocate_and_mount_segment, unmount_segment, unmount_and_free_segment,
unmount_local_disk_segment, setup_dummy, init_all, alloc_from_mem_pool.

A Mooncake client's segments all answer to its one name (get_hostname() is the transport
endpoint of every replica on them); each mount has an id, a UUID ("<hi>-<lo>"). Here a
store has one segment in Redis under that name, and a mount adds its bytes to that
segment's capacity (an unmount takes them away again: eviction then brings the segment
under its new capacity). The bytes stay files in the segment's directory: mount_segment's
path must exist (Mooncake maps it) but holds nothing. A store set up without a segment
(global_segment_size 0) mounts none (INTERNAL_ERROR, as Mooncake answers a failed mount).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence
from typing import Any

from .checks import text, texts, uint64
from .codes import FAILURES, ErrorCode, code_of
from .setup_options import DEFAULT_MASTER, MIN_SEGMENT_SIZE
from .state import OpenStore, StoreCore

log = logging.getLogger(__name__)

INIT_ALL_HOSTNAME = "localhost:12345"
INIT_ALL_METADATA = "127.0.0.1:2379"
INIT_ALL_BUFFER_SIZE = 1 << 30
"""What Mooncake's init_all sets a client up with besides its arguments."""


def _segment_id() -> str:
    return f"{secrets.randbits(64)}-{secrets.randbits(64)}"


def _resize(state: OpenStore) -> int:
    """Give the store's segment its capacity now: 0 or Mooncake's code."""
    if state.plane is None:
        return ErrorCode.INTERNAL_ERROR
    try:
        state.index.remount_segment(state.hostname, state.options.global_segment_size +
                                    sum(state.mounted.values()))
        state.view.refresh(state.index)
    except FAILURES as error:
        return code_of(error)
    return 0


class SegmentMethods:
    def mount_segment(self: StoreCore, path: str, size: int, offset: int = 0,
                      protocol: str = "tcp", location: str = "") -> dict[str, Any]:
        """Add size bytes to this store's segment: {"ret": 0, "segment_ids": [id]}, or
        {"ret": code, "segment_ids": []} (a path that does not exist: INTERNAL_ERROR)."""
        text(path, "path"), uint64(size, "size"), uint64(offset, "offset")
        text(protocol, "protocol"), text(location, "location")
        if not os.path.exists(path):
            log.error("mount_segment: %s does not exist", path)
            return {"ret": ErrorCode.INTERNAL_ERROR, "segment_ids": []}
        return SegmentMethods._mount(self, size)

    def allocate_and_mount_segment(self: StoreCore, size: int, protocol: str = "tcp",
                                   location: str = "") -> dict[str, Any]:
        """mount_segment of memory the store allocates: at least 16 MiB, as Mooncake's
        allocator rounds up; {"ret", "segment_ids", "allocated_size"}."""
        size = max(uint64(size, "size"), MIN_SEGMENT_SIZE)
        text(protocol, "protocol"), text(location, "location")
        mounted = SegmentMethods._mount(self, size)
        if mounted["ret"] == 0:
            mounted["allocated_size"] = size
        return mounted

    def unmount_segment(self: StoreCore, segment_ids: Sequence[str],
                        grace_period_seconds: int = 0) -> int:
        """Take the mounts' bytes off this store's segment: 0, or INTERNAL_ERROR if an id
        is not one of its mounts (then none is taken off)."""
        ids = texts(segment_ids, "segment_ids")
        uint64(grace_period_seconds, "grace_period_seconds")
        with self._lock:
            state = self._open
            if state is None or any(name not in state.mounted for name in ids):
                return ErrorCode.INTERNAL_ERROR
            if not ids:
                return 0
            sizes = {name: state.mounted.pop(name) for name in ids}
            code = _resize(state)
            if code:
                state.mounted.update(sizes)
            return code

    def unmount_and_free_segment(self: StoreCore, segment_ids: Sequence[str],
                                 grace_period_seconds: int = 0) -> int:
        """unmount_segment of allocated segments (nothing else to free here)."""
        return SegmentMethods.unmount_segment(self, segment_ids, grace_period_seconds)

    def unmount_local_disk_segment(self: StoreCore, grace_period_seconds: int = 0) -> int:
        """0: a store here has no local-disk (SSD offload) segment to unmount."""
        uint64(grace_period_seconds, "grace_period_seconds")
        return 0

    def get_offload_rpc_read_count(self: StoreCore) -> int:
        """How many reads went to SSD-offloaded data over Mooncake's offload RPC: 0, there
        is no SSD offload here (every replica is a segment's file)."""
        return 0

    def setup_dummy(self: StoreCore, mem_pool_size: int, local_buffer_size: int,
                    server_address: str) -> int:
        """Mooncake's dummy client shares a real client's memory (server_address, a
        mooncake_client process). There is none here: the store is set up as a client
        of its own whose segment is mem_pool_size bytes, on the Redis
        MOONCAKE_REDIS_URL names; alloc_from_mem_pool then hands out memory."""
        uint64(mem_pool_size, "mem_pool_size"), uint64(local_buffer_size, "local_buffer_size")
        text(server_address, "server_address")
        code = self.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                           "global_segment_size": mem_pool_size,
                           "local_buffer_size": local_buffer_size,
                           "master_server_addr": DEFAULT_MASTER})
        with self._lock:
            if code == 0 and self._open is not None:
                self._open.dummy = True
        return code

    def init_all(self: StoreCore, protocol: str, device_name: str,
                 mount_segment_size: int = MIN_SEGMENT_SIZE) -> int:
        """setup as Mooncake's init_all does it: local_hostname localhost:12345, a 1 GiB
        local buffer, a segment of mount_segment_size bytes, the default master address
        (so MOONCAKE_REDIS_URL names the Redis)."""
        text(protocol, "protocol"), text(device_name, "device_name")
        uint64(mount_segment_size, "mount_segment_size")
        return self.setup(INIT_ALL_HOSTNAME, INIT_ALL_METADATA, mount_segment_size,
                          INIT_ALL_BUFFER_SIZE, protocol, device_name, DEFAULT_MASTER)

    def alloc_from_mem_pool(self: StoreCore, size: int) -> int:
        """A dummy client's memory (setup_dummy): the address of size fresh bytes, kept
        until close (register_buffer it for zero-copy calls); 0 for any other store, as
        Mooncake's real client answers."""
        size = uint64(size, "size")
        with self._lock:
            state = self._open
            return state.pool.allocate(size) if state is not None and state.dummy else 0

    def _mount(self: StoreCore, size: int) -> dict[str, Any]:
        with self._lock:
            state = self._open
            if state is None:
                return {"ret": ErrorCode.INVALID_PARAMS, "segment_ids": []}
            name = _segment_id()
            state.mounted[name] = size
            code = _resize(state)
            if code:
                del state.mounted[name]
                return {"ret": code, "segment_ids": []}
            return {"ret": 0, "segment_ids": [name]}
