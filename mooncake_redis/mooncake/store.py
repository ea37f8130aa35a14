"""`MooncakeDistributedStore` on mooncake-redis: Mooncake's Python client (mooncake.store,
0.3.13.post1), its methods, arguments and integer return codes, over the public Index
(metadata, leases, the radix tree, eviction) and a file data plane (the bytes).

Each store mounts a segment named as Mooncake names a client's (get_hostname():
`<local_hostname>:<port>`, the port one this store holds for its life), of
global_segment_size bytes, whose bytes are files in its directory under the namespace's
data root (segment_files.py); a put writes the value to a file on each segment placement
chose (placement.py), then records the object with those replicas (batch_put, the
one-phase put: the bytes are in place); a get reads a replica under the read lease
batch_get_replica_desc grants.
What eviction, removal, an unmount or an upsert frees reaches each segment's owner on
the events streams, and its keeper thread deletes the files (keeper.py).
docs/INTEGRATIONS.md lists every method: what is the same as Mooncake, what differs, why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

from mooncake_redis.files.byte_store import MAX_QUOTED_KEY, FileByteStore
from mooncake_redis.files.data_plane import FileDataPlane, Page, room_for_bytes, write_pages

from ..errors import (
    InvalidArgument,
    LinkContention,
    ObjectAlreadyExists,
    SegmentNotMounted,
    SetupError,
)
from ..index import Index
from ..models import Replica
from ..segment_registry import check_name
from ..settings import ENV_PREFIX, Settings
from . import placement
from .buffers import BufferHandle, view
from .checks import (
    bytes_of,
    check_3d,
    check_bool,
    check_int,
    check_key,
    check_keys,
    check_list,
)
from .codes import FAILURES, ErrorCode, code_of
from .keeper import GRACE_S, INTERVAL_S, SWEEP_INTERVAL_S, Clock, Keeper, mount
from .probes import ProbeMethods
from .records import QueryTaskResponse
from .replicas import ReplicaMethods
from .replicate_config import ReplicateConfig, SoftPinAction, check_config
from .segment_files import SegmentFiles, remove_files
from .segments import SegmentMethods
from .sessions import SessionMethods
from .setup_options import SetupOptions, hold_client_port
from .state import Found, OpenStore, Row, TaskId
from .tensors import TensorMethods

log = logging.getLogger(__name__)

T = TypeVar("T")

MOONCAKE_DEFAULTS: dict[str, Any] = {
    "lease_ttl_ms": 10_000,  # default_kv_lease_ttl: 10000 since v0.3.12 (5000 before)
    "probe_extends_lease": True,  # MasterService::ExistKey grants a read lease
    "soft_pin_ttl_ms": 1_800_000,  # default_kv_soft_pin_ttl
    "allow_soft_pin_eviction": True,  # allow_evict_soft_pinned_objects
    "high_watermark": 0.90,  # eviction_high_watermark_ratio
    "eviction_ratio": 0.05,
    "segment_heartbeat_timeout_ms": 10_000,  # client_live_ttl_sec
}
"""Settings of a namespace the drop-in creates: mooncake_master 0.3.13.post1's defaults
(`mooncake_master --help`). Opening a namespace never changes stored settings, and a
MOONCAKE_REDIS_<SETTING> variable wins over these, as for every Index."""

MAX_ENCODED_KEY = MAX_QUOTED_KEY
"""A key's file name is the key percent-encoded plus a tag and a digest (FileByteStore):
keys longer than this encoded would pass the 255-byte file name limit, and are refused."""

CONSUMER = "store"
"""This store's name in its segment's events group (files:<segment>); the keeper's is
CONSUMER + "-keeper"."""

_HOST_PORT = re.compile(r".+:\d{1,5}")


class MooncakeDistributedStore(ProbeMethods, ReplicaMethods, SegmentMethods,
                               SessionMethods, TensorMethods):
    """Mooncake's MooncakeDistributedStore: setup() first, close() at the end. Calls from
    several threads are served one at a time."""

    def __init__(self) -> None:
        self._open: OpenStore | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.RLock()
        self._tasks: dict[TaskId, QueryTaskResponse] = {}
        self._put_sessions: dict[str, list[Replica]] = {}
        self._get_sessions: dict[str, Found] = {}

    # -- life ----------------------------------------------------------------------------

    def setup(self, *args: Any, **kwargs: Any) -> int:
        """setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
        protocol, rdma_devices, master_server_addr, engine=None, enable_ssd_offload=False,
        ssd_offload_path="", tenant_id="default", enable_client_http_server=False,
        client_http_port=9300), or setup(config: dict). master_server_addr: a redis://,
        rediss://, redis+cluster:// or memory:// URL, or Mooncake's host:port (then
        MOONCAKE_REDIS_URL names the Redis). The config dict also takes "namespace" and
        "data_dir". Returns 0 or Mooncake's code (the reason is logged)."""
        try:
            if len(args) + len(kwargs) == 1 and isinstance(
                    args[0] if args else kwargs.get("config"), Mapping):
                options = SetupOptions.from_dict(args[0] if args else kwargs["config"])
            else:  # a TypeError (bad argument types) is raised before anything changes
                options = SetupOptions.positional(*_bind_setup(args, kwargs))
        except SetupError as error:
            log.error("MooncakeDistributedStore.setup: %s", error)
            return error.code
        with self._lock:
            if self._open is not None:  # set up again: this store starts over
                self._close()
            try:
                self._open = _start(options)
                self._finalizer = weakref.finalize(self, _shutdown_quietly, self._open)
            except SetupError as error:
                log.error("MooncakeDistributedStore.setup: %s", error)
                return error.code
            except FAILURES as error:
                log.error("MooncakeDistributedStore.setup: %s", error)
                return code_of(error)
            return 0

    def close(self) -> int:
        """Unmount this store's segment (its objects lose their replicas on it, as when a
        Mooncake client leaves), delete its files, stop its thread; 0 (also when closed).
        A store that is garbage-collected, or still open when the interpreter exits, is
        closed then (Mooncake's destructor tears its client down too)."""
        with self._lock:
            if self._open is None:
                return 0
            try:
                self._close()
            except FAILURES as error:
                log.error("MooncakeDistributedStore.close: %s", error)
                return code_of(error)
            return 0

    def _close(self) -> None:
        state, self._open = self._open, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        assert state is not None
        self._put_sessions.clear()  # unfinished objects: released after the timeout
        self._get_sessions.clear()
        _shutdown(state)

    def health_check(self) -> int:
        """0 healthy, 1 not set up (or closed), 2 Redis does not answer."""
        with self._lock:
            if self._open is None:
                return 1
            try:
                self._open.index.client.ping()
            except Exception:  # any failure to answer is "unreachable" here
                return 2
            return 0

    def get_hostname(self) -> str:
        """This store's segment name, `<local_hostname>:<port>` ("" before setup)."""
        with self._lock:
            return self._open.hostname if self._open else ""

    # -- registered memory ---------------------------------------------------------------

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Let zero-copy calls use [buffer_ptr, buffer_ptr + size): 0, or INVALID_PARAMS
        (null, empty, or overlapping a registered buffer)."""
        check_int(buffer_ptr, "buffer_ptr")
        check_int(size, "size")
        with self._lock:
            if self._open is None or not self._open.buffers.register(buffer_ptr, size):
                return ErrorCode.INVALID_PARAMS
            return 0

    def unregister_buffer(self, buffer_ptr: int) -> int:
        check_int(buffer_ptr, "buffer_ptr")
        with self._lock:
            if self._open is None or not self._open.buffers.unregister(buffer_ptr):
                return ErrorCode.INVALID_PARAMS
            return 0

    # -- writing -------------------------------------------------------------------------

    def put(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Store value (any buffer) under key: 0 (also if the key is stored already: the
        stored value stays), or Mooncake's code."""
        return self._put_values([key], [value], config, upsert=False)

    def upsert(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Store value under key, replacing a stored value."""
        return self._put_values([key], [value], config, upsert=True)

    def put_batch(self, keys: Sequence[str], values: Sequence[Any],
                  config: ReplicateConfig | None = None) -> int:
        """put for many: 0, or the first item's code that is not 0."""
        return self._put_values(keys, values, config, upsert=False)

    def upsert_batch(self, keys: Sequence[str], values: Sequence[Any],
                     config: ReplicateConfig | None = None) -> int:
        return self._put_values(keys, values, config, upsert=True)

    def put_parts(self, key: str, *parts: Any, config: ReplicateConfig | None = None) -> int:
        """put of the parts joined; no parts (or only empty ones): 0, nothing stored."""
        return self._put_joined(key, parts, config, upsert=False)

    def upsert_parts(self, key: str, *parts: Any,
                     config: ReplicateConfig | None = None) -> int:
        return self._put_joined(key, parts, config, upsert=True)

    def put_from(self, key: str, buffer_ptr: int, size: int,
                 config: ReplicateConfig | None = None) -> int:
        """put of size bytes at buffer_ptr (buffers.py: any memory of the process, as
        Mooncake's tcp transport takes it); a size of 0 returns 0 and
        stores nothing, as Mooncake does."""
        return self._put_from_one(key, buffer_ptr, size, config, upsert=False)

    def upsert_from(self, key: str, buffer_ptr: int, size: int,
                    config: ReplicateConfig | None = None) -> int:
        return self._put_from_one(key, buffer_ptr, size, config, upsert=True)

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int], config: ReplicateConfig | None = None
                       ) -> list[int]:
        """put_from for many: a code per key."""
        return self._put_from_many(keys, buffer_ptrs, sizes, config, upsert=False)

    def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                          sizes: Sequence[int], config: ReplicateConfig | None = None
                          ) -> list[int]:
        return self._put_from_many(keys, buffer_ptrs, sizes, config, upsert=True)

    def batch_put_from_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: ReplicateConfig | None = None) -> list[int]:
        """put_from for many, each value the concatenation of several registered buffers
        (SGLang's layer-first host pools): a code per key."""
        return self._put_rows(check_keys(keys), _rows(all_buffer_ptrs, all_sizes), config,
                              upsert=False)

    def batch_get_into_multi_buffers(self, keys: Sequence[str],
                                     all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> list[int]:
        """batch_get_into with each value spread over several registered buffers, in
        order: the bytes read per key; INVALID_PARAMS if the buffers hold less than the
        value, TRANSFER_FAIL if more or if a key's two lists differ in length (as Mooncake
        answers)."""
        check_bool(prefer_alloc_in_same_node, "prefer_alloc_in_same_node")
        return self._get_rows(check_keys(keys), _rows(all_buffer_ptrs, all_sizes),
                              exact=True)

    def _put_values(self, keys: Sequence[str], values: Sequence[Any],
                    config: ReplicateConfig | None, upsert: bool) -> int:
        keys = check_keys(keys)
        datas = [bytes_of(value) for value in check_list(values, "values")]
        with self._lock:
            state = self._open
            if state is None or len(keys) != len(datas):
                return ErrorCode.INVALID_PARAMS
            if sum(len(data) for data in datas) > state.options.local_buffer_size:
                log.error("values of %d bytes do not fit the local buffer (local_buffer_size="
                          "%d): Mooncake stages them there", sum(map(len, datas)),
                          state.options.local_buffer_size)
                return ErrorCode.INVALID_PARAMS
            if any(not data for data in datas):
                return ErrorCode.INVALID_PARAMS  # Mooncake refuses empty values
            codes = self._write(state, keys, datas, config, upsert)
            return next((code for code in codes if code), 0)

    def _put_joined(self, key: str, parts: Sequence[Any], config: ReplicateConfig | None,
                    upsert: bool) -> int:
        joined = b"".join(bytes(bytes_of(part)) for part in parts)
        if not joined:
            check_key(key)
            return 0
        return self._put_values([key], [joined], config, upsert)

    def _put_from_one(self, key: str, buffer_ptr: int, size: int,
                      config: ReplicateConfig | None, upsert: bool) -> int:
        check_key(key)
        check_int(buffer_ptr, "buffer_ptr")
        check_int(size, "size")
        if size == 0 and not upsert:
            return 0
        return self._put_from_many([key], [buffer_ptr], [size], config, upsert)[0]

    def _put_from_many(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int], config: ReplicateConfig | None, upsert: bool
                       ) -> list[int]:
        return self._put_rows(check_keys(keys), _single_rows(buffer_ptrs, sizes), config,
                              upsert)

    def _put_rows(self, keys: list[str], rows: list[Row | None],
                  config: ReplicateConfig | None, upsert: bool) -> list[int]:
        """Each key's value from its row of (address, size) buffers, joined: a code per
        key (INVALID_PARAMS for no buffer, an empty one, one buffers.allows refuses, or
        a row that came with lists of different lengths)."""
        with self._lock:
            state = self._open
            if state is None or len(keys) != len(rows):
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            codes = [ErrorCode.INVALID_PARAMS] * len(keys)
            ready = [number for number, row in enumerate(rows)
                     if row and all(size and state.buffers.allows(address, size, False)
                                    for address, size in row)]
            values = [_joined(rows[number]) for number in ready]  # type: ignore[arg-type]
            for number, code in zip(ready, self._write(state, [keys[n] for n in ready],
                                                       values, config, upsert)):
                codes[number] = code
            return codes

    def _write(self, state: OpenStore, keys: list[str], datas: list[memoryview],
               config: ReplicateConfig | None, upsert: bool) -> list[int]:
        """Store the items, one code each (duplicates of a key get the first one's)."""
        config = check_config(config)
        try:
            return self._write_checked(state, keys, datas, config, upsert)
        except FAILURES as error:  # Redis away while placing, reading settings or pins
            return [code_of(error)] * len(keys)

    def _write_checked(self, state: OpenStore, keys: list[str], datas: list[memoryview],
                       config: ReplicateConfig, upsert: bool) -> list[int]:
        problem = config.config_error(state.index.settings.soft_pin_ttl_ms)
        if problem is not None:
            log.error("put refused: %s", problem)
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        first: dict[str, int] = {}  # a valid key -> where it first appears
        codes: list[int] = [ErrorCode.INVALID_PARAMS] * len(keys)  # for the invalid ones
        for number, key in enumerate(keys):
            if self._writable_key(state, key):
                first.setdefault(key, number)
        items = [(key, datas[number]) for key, number in first.items()]
        written = dict(zip(first, self._write_unique(state, items, config, upsert)))
        return [written.get(key, code) for key, code in zip(keys, codes)]

    def _write_unique(self, state: OpenStore, items: list[tuple[str, memoryview]],
                      config: ReplicateConfig, upsert: bool) -> list[int]:
        codes = dict.fromkeys((key for key, _ in items), 0)
        placed = self._place(state, [(key, len(data)) for key, data in items], config)
        pages = [Page(key, data, config.parent_block_hash) for key, data in items
                 if placed[key]]
        for key, _ in items:
            if not placed[key]:
                codes[key] = ErrorCode.NO_AVAILABLE_HANDLE
        for soft_pin, group in _by_soft_pin(state, pages, config, upsert).items():
            for attempt in range(2):  # LinkContention: "send it again", once
                try:
                    results = write_pages(state.index, group, placed, soft_pin=soft_pin,
                                          hard_pin=config.with_hard_pin, upsert=upsert,
                                          evict=self._evictor(state), watermark=False)
                except FAILURES as error:
                    for page in group:
                        codes[page.key] = code_of(error)
                    break
                retry = []
                for page, result in zip(group, results):
                    if result.ok:
                        state.view.add([s.segment for s in placed[page.key]], len(page.data))
                        codes[page.key] = 0
                    elif isinstance(result.error, ObjectAlreadyExists):
                        codes[page.key] = 0  # Mooncake's put: the stored object stays
                    elif isinstance(result.error, LinkContention) and not attempt:
                        retry.append(page)
                    else:
                        codes[page.key] = code_of(result.error) if result.error else -1
                group = retry
                if not group:
                    break
        return [codes[key] for key, _ in items]

    def _place(self, state: OpenStore, items: list[tuple[str, int]],
               config: ReplicateConfig) -> dict[str, list[FileByteStore]]:
        """Each item's replica stores (placement.choose); [] for one that fits nowhere,
        after a fresh look at the segments and, failing that, an eviction job. The view
        of the segments is read again (at most once per call) when it has fewer segments
        with room than replica_num asks for."""
        preferred = config.segments()
        placed: dict[str, list[FileByteStore]] = {}
        refreshed = evicted = False
        for key, size in items:
            while True:
                stores = self._stores_for(state, size, preferred, config.replica_num)
                if len(stores) < config.replica_num and stores and not refreshed:
                    refreshed = True  # fewer than asked: a segment may have mounted since
                    state.view.refresh(state.index)
                    continue
                if stores or (refreshed and evicted):
                    break
                if refreshed:
                    evicted = True
                    if not state.view.could_hold(size):
                        break  # bigger than every segment: nothing to evict for
                    self._evictor(state)(room_for_bytes(state.index, size))
                refreshed = True
                state.view.refresh(state.index)
            placed[key] = stores
        return placed

    def _stores_for(self, state: OpenStore, size: int, preferred: list[str],
                    replica_num: int) -> list[FileByteStore]:
        def fits(name: str) -> bool:
            return state.view.room(name, size) and state.files.reach(name) is not None

        names = placement.choose(state.view.mounted(), preferred, replica_num, fits, state.rng)
        return [store for store in map(state.files.reach, names) if store is not None]

    def _evictor(self, state: OpenStore) -> Callable[[float | None], object]:
        if state.plane is not None:
            return state.plane.evict  # jobs, then this segment's freed files
        return state.index.evict  # the other segments' owners delete theirs

    @staticmethod
    def _writable_key(state: OpenStore, key: str) -> bool:
        if not key or len(quote(key, safe="")) > MAX_ENCODED_KEY:
            return False
        try:
            state.index.split_key(key)
        except InvalidArgument:
            return False
        return True

    # -- reading -------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The value; b"" if the key is not stored (or cannot be read)."""
        return self.get_batch([check_key(key)])[0]

    def get_batch(self, keys: Sequence[str]) -> list[bytes]:
        keys = check_keys(keys)
        with self._lock:
            found = self._find(keys)
            return [self._read(found[key], staged=True) or b"" for key in keys]

    def get_buffer(self, key: str) -> BufferHandle | None:
        """The value in a BufferHandle (ptr(), size(), len(), the buffer protocol); None
        if the key is not stored."""
        return self.batch_get_buffer([check_key(key)])[0]

    def batch_get_buffer(self, keys: Sequence[str]) -> list[BufferHandle | None]:
        keys = check_keys(keys)
        with self._lock:
            found = self._find(keys)
            handles = []
            for key in keys:
                data = self._read(found[key], staged=True)
                handles.append(BufferHandle(data) if data else None)
            return handles

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read the value into memory at buffer_ptr (size bytes there; buffers.py): the
        bytes read, or Mooncake's code (INVALID_PARAMS if the value is bigger than size,
        or the range runs past a registered buffer's end)."""
        return self.batch_get_into([check_key(key)], [buffer_ptr], [size])[0]

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int]) -> list[int]:
        return self._get_rows(check_keys(keys), _single_rows(buffer_ptrs, sizes),
                              exact=False)

    def _get_rows(self, keys: list[str], rows: list[Row | None], exact: bool) -> list[int]:
        """Each key's value into its row of (address, size) buffers, in order: the bytes
        read, or a code: INVALID_PARAMS for memory buffers.allows refuses or less room
        than the value; with exact, TRANSFER_FAIL for more room than the value or a row whose lists
        differed in length (Mooncake's multi-buffer answers)."""
        with self._lock:
            state = self._open
            if state is None or len(keys) != len(rows):
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            found = self._find(keys)
            results = []
            for key, row in zip(keys, rows):
                item = found[key]
                room = sum(size for _, size in row or ())
                if row is not None and not all(state.buffers.allows(address, size, True)
                                               for address, size in row):
                    results.append(ErrorCode.INVALID_PARAMS)
                elif item.code:
                    results.append(item.code)
                elif row is None or (exact and room > item.size):
                    results.append(ErrorCode.TRANSFER_FAIL)
                elif room < item.size:
                    log.error("buffer too small for key %r: required=%d, available=%d", key,
                              item.size, room)
                    results.append(ErrorCode.INVALID_PARAMS)
                else:
                    results.append(item.size if self._read_rows(item, row)
                                   else ErrorCode.TRANSFER_FAIL)
            return results

    def _read_rows(self, item: Found, row: Row) -> bool:
        """The value into the row's buffers, in order, up to its size."""
        offset = 0
        for address, size in row:
            take = min(size, item.size - offset)
            if take and not self._read_into(item, view(address, take), offset):
                return False
            offset += take
        return True

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                        all_src_offsets: Sequence[Sequence[Sequence[int]]],
                        all_sizes: Sequence[Sequence[Sequence[int]]]) -> list[list[list[int]]]:
        """Byte ranges of objects into registered buffers: results[i][j][k] is the bytes
        read for fragment k of key j into buffer i, or a negative code (INVALID_PARAMS for
        a fragment past the object's end or the registered buffer's, or for nested lists
        of different lengths)."""
        pointers = [check_int(p, "buffer_ptr") for p in check_list(buffer_ptrs, "buffer_ptrs")]
        keys = [check_keys(row) for row in check_list(all_keys, "all_keys")]
        dst = check_3d(all_dst_offsets, "all_dst_offsets")
        src = check_3d(all_src_offsets, "all_src_offsets")
        sizes = check_3d(all_sizes, "all_sizes")
        with self._lock:
            refused = _refused_shape(len(pointers), keys, dst)
            if self._open is None or not len(pointers) == len(keys) == len(dst) == \
                    len(src) == len(sizes):
                return refused
            found = self._find([key for row in keys for key in row])
            results = []
            for i, pointer in enumerate(pointers):
                if not len(keys[i]) == len(dst[i]) == len(src[i]) == len(sizes[i]):
                    results.append(refused[i])
                    continue
                room = self._open.buffers.room_at(pointer)
                results.append([self._read_fragments(found[key], pointer, room, dst[i][j],
                                                     src[i][j], sizes[i][j])
                                for j, key in enumerate(keys[i])])
            return results

    def _read_fragments(self, item: Found, pointer: int, room: int, dst: Sequence[int],
                        src: Sequence[int], sizes: Sequence[int]) -> list[int]:
        if not len(dst) == len(src) == len(sizes):
            return [ErrorCode.INVALID_PARAMS] * len(dst)
        results = []
        for dst_offset, src_offset, size in zip(dst, src, sizes):
            if item.code:
                results.append(item.code)
            elif dst_offset + size > room or src_offset + size > item.size:
                results.append(ErrorCode.INVALID_PARAMS)
            else:
                target = view(pointer + dst_offset, size)
                results.append(size if self._read_into(item, target, src_offset)
                               else ErrorCode.TRANSFER_FAIL)
        return results

    def get_size(self, key: str) -> int:
        """The value's size in bytes, or Mooncake's code (OBJECT_NOT_FOUND)."""
        key = check_key(key)
        with self._lock:
            item = self._find([key])[key]
            return item.code or item.size

    def _ask(self, keys: Sequence[str], call: Callable[[Index, list[str]], list[T]]
             ) -> tuple[list[str], list[T]] | int:
        """call(index, keys) with the keys that can be stored here, once each: those keys
        and its answers, or the code of its failure (INVALID_PARAMS before setup)."""
        state = self._open
        if state is None:
            return ErrorCode.INVALID_PARAMS
        valid = _unique([key for key in keys if self._readable_key(state, key)])
        try:
            return valid, call(state.index, valid)
        except FAILURES as error:
            return code_of(error)

    def _find(self, keys: Sequence[str]) -> dict[str, Found]:
        """Each key's replicas, in one batch_get_replica_desc round trip (read leases)."""
        asked = self._ask(keys, Index.batch_get_replica_desc)
        if isinstance(asked, int):
            return {key: Found(asked) for key in keys}
        found = {key: Found(ErrorCode.OBJECT_NOT_FOUND) for key in keys}
        own = self._open.hostname if self._open else ""
        for result in asked[1]:
            if result.error is not None:
                found[result.key] = Found(code_of(result.error))
            elif result.value:
                ordered = sorted(result.value, key=lambda r: r.segment != own)  # local first
                found[result.key] = Found(0, tuple(ordered), ordered[0].size)
        return found

    def _read(self, item: Found, staged: bool) -> bytes | None:
        state = self._open
        if item.code or state is None:
            return None
        if staged and item.size > state.options.local_buffer_size:
            log.error("a value of %d bytes does not fit the local buffer (local_buffer_size="
                      "%d): Mooncake stages it there", item.size, state.options.local_buffer_size)
            return None
        for replica in item.replicas:
            with contextlib.suppress(*FAILURES):  # a location that is not a file of ours
                store = state.files.reach(replica.segment)
                data = store.read(replica) if store is not None else None
                if data is not None:
                    return data
        return None

    def _read_into(self, item: Found, target: memoryview, offset: int = 0) -> bool:
        state = self._open
        assert state is not None
        for replica in item.replicas:
            with contextlib.suppress(*FAILURES):  # a location that is not a file of ours
                store = state.files.reach(replica.segment)
                if store is not None and store.read_range(replica, offset, target):
                    return True
        return False

    @staticmethod
    def _readable_key(state: OpenStore, key: str) -> bool:
        """A key that can be stored here (any other is simply not stored)."""
        return MooncakeDistributedStore._writable_key(state, key)

    # -- removing ------------------------------------------------------------------------

    def remove(self, key: str, force: bool = False) -> int:
        """0, or Mooncake's code: OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (read lately; force
        removes it all the same)."""
        return self.batch_remove([check_key(key)], force)[0]

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> list[int]:
        keys = check_keys(keys)
        check_bool(force, "force")
        with self._lock:
            asked = self._ask(keys, lambda index, valid: index.batch_remove(valid, force=force))
            if isinstance(asked, int):
                return [asked] * len(keys)
            results = {result.key: result for result in asked[1]}
            codes, seen = [], set()
            for key in keys:
                result = results.get(key)
                if result is None or (key in seen and result.ok):
                    codes.append(ErrorCode.OBJECT_NOT_FOUND)  # removed by its first
                else:
                    codes.append(code_of(result.error) if result.error else 0)
                seen.add(key)
            return codes

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Remove every object whose key the pattern matches (searched; RE2 syntax): how
        many, or INVALID_PARAMS for a pattern that does not compile."""
        if not isinstance(regex_pattern, str):
            raise TypeError(f"regex_pattern must be a str, got {type(regex_pattern).__name__}")
        check_bool(force, "force")
        return self._count(lambda index: index.remove_by_regex(regex_pattern, force=force))

    def remove_all(self, force: bool = False) -> int:
        """Remove every object (leased ones only with force): how many."""
        check_bool(force, "force")
        return self._count(lambda index: index.remove_all(force=force))

    def _count(self, call: Callable[[Index], int]) -> int:
        with self._lock:
            if self._open is None:
                return ErrorCode.INVALID_PARAMS
            try:
                return call(self._open.index)
            except FAILURES as error:
                return code_of(error)


# -- setting up ------------------------------------------------------------------------------


def _start(options: SetupOptions) -> OpenStore:
    url = options.redis_url()
    namespace = options.namespace_name()
    index = Index.from_url(url, namespace, **_mooncake_defaults(url, namespace))
    port_holder = None
    try:
        hostname = options.local_hostname
        if not _HOST_PORT.fullmatch(hostname):
            try:
                port_holder = hold_client_port(random.Random())
            except OSError as error:
                raise SetupError(ErrorCode.INTERNAL_ERROR, str(error)) from None
            hostname = f"{hostname}:{port_holder.getsockname()[1]}"
        try:
            check_name(hostname)
        except InvalidArgument as error:
            raise SetupError(ErrorCode.INVALID_PARAMS, f"local_hostname: {error}") from None
        files = SegmentFiles(options.data_root(namespace))
        view_ = placement.SegmentView()
        plane: FileDataPlane | None = None
        keeper: Keeper | None = None
        mounted: dict[str, int] = {}
        if options.global_segment_size:
            plane = _mount(index, files, hostname, options.global_segment_size)
            store = plane.store
            keeper = Keeper(lambda clock: _keeper_plane(url, namespace, store, clock),
                            lambda: options.global_segment_size + sum(mounted.values()),
                            view_, files, INTERVAL_S)
        view_.refresh(index)
        state = OpenStore(options, index, files, hostname, port_holder, plane, keeper, view_,
                          mounted=mounted)
        if keeper is not None:
            keeper.start()
        return state
    except BaseException:
        if port_holder is not None:
            port_holder.close()
        index.close()
        raise


def _shutdown(state: OpenStore) -> None:
    try:
        if state.keeper is not None:
            state.keeper.stop()
        if state.plane is not None:
            segment = state.plane.store.segment
            with contextlib.suppress(SegmentNotMounted):  # unmounted for it already
                while not state.index.unmount_segment(segment).done:
                    pass
            state.plane.release()  # the invalidated replicas' files
            remove_files(state.plane.store)
            state.files.forget(segment)
    finally:
        state.buffers.clear()
        state.pool.clear()
        if state.port_holder is not None:
            state.port_holder.close()
        state.index.close()


def _shutdown_quietly(state: OpenStore) -> None:
    """close() of a store nobody closed (collected, or at exit): errors only logged."""
    try:
        _shutdown(state)
    except Exception as error:  # at exit, Redis may be gone already: nothing to do then
        log.warning("closing a MooncakeDistributedStore nobody closed: %s", error)


def _mooncake_defaults(url: str, namespace: str) -> dict[str, Any]:
    """MOONCAKE_DEFAULTS for the settings this namespace has not set (its value is still
    the project's default) and no MOONCAKE_REDIS_<SETTING> variable gives: filled in at
    open like any Index argument, so a new namespace starts with them, and a namespace
    whose settings were chosen keeps them without a warning."""
    current = Index.from_url(url, namespace, read_only=True)
    try:
        settings = current.settings
    finally:
        current.close()
    project = Settings()
    return {name: value for name, value in MOONCAKE_DEFAULTS.items()
            if getattr(settings, name) == getattr(project, name)
            and ENV_PREFIX + name.upper() not in os.environ}


def _mount(index: Index, files: SegmentFiles, hostname: str, capacity: int) -> FileDataPlane:
    """Mount this store's segment. A segment not registered yet starts with an empty
    directory: files left there belong to no stored object (a store that ended without
    unmounting, whose segment was unmounted for it); so do the old files of other
    segments that are not registered (collect_dead)."""
    registered = index.usage().segments
    files.collect_dead(registered, GRACE_S, time.time())
    store = files.own(hostname)
    if hostname not in registered:
        remove_files(store)
        store = files.own(hostname)
    mount(index, hostname, capacity)
    return FileDataPlane(index, store, None, consumer=CONSUMER)


def _keeper_plane(url: str, namespace: str, store: FileByteStore, clock: Clock
                  ) -> FileDataPlane:
    """The keeper thread's own client and events consumer, on the same segment; it sweeps
    the segment's directory every SWEEP_INTERVAL_S."""
    return FileDataPlane(Index.from_url(url, namespace), store, None,
                         consumer=CONSUMER + "-keeper", resync_min_age_s=GRACE_S,
                         sweep_interval_s=SWEEP_INTERVAL_S, clock=clock)


_SETUP_PARAMETERS = ("local_hostname", "metadata_server", "global_segment_size",
                     "local_buffer_size", "protocol", "rdma_devices", "master_server_addr",
                     "engine", "enable_ssd_offload", "ssd_offload_path", "tenant_id",
                     "enable_client_http_server", "client_http_port")
_SETUP_DEFAULTS = {"engine": None, "enable_ssd_offload": False, "ssd_offload_path": "",
                   "tenant_id": "default", "enable_client_http_server": False,
                   "client_http_port": 9300}


def _bind_setup(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The positional form's arguments (TypeError if they do not match its signature, as
    Mooncake's binding raises); engine, SSD offload and the client HTTP server are
    accepted and unused (bytes go through files, metrics through mooncake-redis)."""
    if len(args) > len(_SETUP_PARAMETERS) or set(kwargs) - set(_SETUP_PARAMETERS):
        raise TypeError("setup(): incompatible function arguments")
    bound = dict(zip(_SETUP_PARAMETERS, args))
    for name, value in kwargs.items():
        if name in bound:
            raise TypeError(f"setup(): {name} given twice")
        bound[name] = value
    missing = [name for name in _SETUP_PARAMETERS[:7] if name not in bound]
    if missing:
        raise TypeError(f"setup(): missing {', '.join(missing)}")
    values = {**_SETUP_DEFAULTS, **bound}
    return tuple(values[name] for name in _SETUP_PARAMETERS[:7]) + (values["tenant_id"],)


def _rows(all_pointers: Any, all_sizes: Any) -> list[Row | None]:
    """The multi-buffer calls' lists, per key (None where its two lists differ in
    length)."""
    pointers = [[check_int(p, "buffer_ptr") for p in check_list(row, "all_buffer_ptrs")]
                for row in check_list(all_pointers, "all_buffer_ptrs")]
    sizes = [[check_int(n, "size") for n in check_list(row, "all_sizes")]
             for row in check_list(all_sizes, "all_sizes")]
    if len(pointers) != len(sizes):
        return [None] * max(len(pointers), len(sizes))
    return [list(zip(p, n)) if len(p) == len(n) else None for p, n in zip(pointers, sizes)]


def _single_rows(pointers: Any, sizes: Any) -> list[Row | None]:
    """The single-buffer calls' lists as rows of one buffer each."""
    return _rows([[p] for p in check_list(pointers, "buffer_ptrs")],
                 [[n] for n in check_list(sizes, "sizes")])


def _joined(row: Row) -> memoryview:
    if len(row) == 1:
        return view(*row[0])  # the caller's memory itself: no copy before the file write
    return memoryview(b"".join(view(address, size) for address, size in row))


def _unique(keys: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(keys))


def _refused_shape(buffers: int, keys: Sequence[Sequence[str]],
                   dst: Sequence[Sequence[Sequence[int]]]) -> list[list[list[int]]]:
    """INVALID_PARAMS in every place of the results a ranged read would have."""
    shaped = []
    for i in range(buffers):
        row = keys[i] if i < len(keys) else [""]
        shaped.append([[ErrorCode.INVALID_PARAMS] *
                       (len(dst[i][j]) if i < len(dst) and j < len(dst[i]) else 1)
                       for j in range(len(row))])
    return shaped


def _by_soft_pin(state: OpenStore, pages: list[Page], config: ReplicateConfig,
                 upsert: bool) -> dict[bool, list[Page]]:
    """The pages by whether they are soft-pinned (one write per group: a batch's pins are
    per call). ENABLE pins, DISABLE unpins; PRESERVE leaves a new object unpinned and
    keeps an upserted object's pin (read without a lease, one round trip per key)."""
    if not upsert or config.soft_pin_action != SoftPinAction.PRESERVE:
        return {config.soft_pinned(): pages} if pages else {}
    groups: dict[bool, list[Page]] = {}
    for page in pages:
        info = state.index.object_info(page.key)
        groups.setdefault(bool(info and info.soft_pin), []).append(page)
    return groups


