"""Put and get sessions with ranged transfers, and put_from_with_metadata.

A put session reserves objects before their bytes exist: batch_put_session_start(keys,
sizes, config) places each (as a put does), creates its replica files zero-filled, and
records the object as processing (batch_put_start); batch_put_from_multi_buffer_ranges
writes ranges of caller memory into every replica at the offsets given; then
batch_put_session_end completes the objects (batch_put_end) or batch_put_session_revoke
deletes them. A get session looks the replicas up once (a read lease, as a get grants):
batch_get_into_multi_buffer_ranges then reads ranges of them into caller memory, until
batch_get_session_end. Codes as Mooncake 0.3.13.post1 answers (measured on its client):
a size of 0, a key twice, or a ranged call on a key without a session: INVALID_PARAMS.
Sessions belong to the store that opened them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..models import Replica
from .buffers import view
from .checks import check_int, check_keys, check_list
from .codes import FAILURES, ErrorCode, code_of
from .replicate_config import ReplicateConfig, check_config
from .state import Found, OpenStore, Row, StoreCore

Ranges = list[tuple[int, int, int]]
"""A key's ranges: (address, size, offset in the object) each."""


def _ranges(keys: list[str], all_pointers: object, all_sizes: object, all_offsets: object
            ) -> list[Ranges | None]:
    """Each key's ranges; None where its three lists differ in length (or there are
    fewer lists than keys)."""
    lists = [[[check_int(v, what) for v in check_list(row, what)]
              for row in check_list(values, what)]
             for values, what in ((all_pointers, "all_buffer_ptrs"), (all_sizes, "all_sizes"),
                                  (all_offsets, "offsets"))]
    ranges: list[Ranges | None] = []
    for number in range(len(keys)):
        rows = [table[number] if number < len(table) else None for table in lists]
        if any(row is None for row in rows) or len({len(row) for row in rows if row}) > 1:
            ranges.append(None)
        else:
            pointers, sizes, offsets = (row or [] for row in rows)
            ranges.append(list(zip(pointers, sizes, offsets)))
    return ranges


class SessionMethods:
    def batch_put_session_start(self: StoreCore, keys: Sequence[str], sizes: Sequence[int],
                                config: ReplicateConfig | None = None) -> list[int]:
        """Reserve each key's object of its size: a code per key."""
        keys = check_keys(keys)
        sizes = [check_int(size, "size") for size in check_list(sizes, "sizes")]
        config = check_config(config)
        with self._lock:
            state = self._open
            if state is None or len(keys) != len(sizes):
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            if config.config_error(state.index.settings.soft_pin_ttl_ms) is not None:
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            codes = [ErrorCode.INVALID_PARAMS] * len(keys)
            wanted = {key: size for key, size in zip(keys, sizes)
                      if size and keys.count(key) == 1 and key not in self._put_sessions}
            try:
                placed = self._place(state, list(wanted.items()), config)
                reserved = {key: [store.reserve(key, wanted[key]) for store in stores]
                            for key, stores in placed.items() if stores}
                results = state.index.batch_put_start(
                    [(key, wanted[key], config.parent_block_hash, replicas)
                     for key, replicas in reserved.items()],
                    soft_pin=config.soft_pinned(), hard_pin=config.with_hard_pin)
            except FAILURES as error:
                return [code_of(error) if key in wanted else code for key, code in
                        zip(keys, codes)]
            answers = dict.fromkeys(wanted, ErrorCode.NO_AVAILABLE_HANDLE)
            for result in results:
                if result.ok:
                    self._put_sessions[result.key] = reserved[result.key]
                    state.view.add([r.segment for r in reserved[result.key]],
                                   wanted[result.key])
                    answers[result.key] = 0
                else:
                    _delete(state, reserved[result.key])
                    answers[result.key] = code_of(result.error) if result.error else -1
            return [answers.get(key, code) for key, code in zip(keys, codes)]

    def batch_put_from_multi_buffer_ranges(self: StoreCore, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_dst_offsets: Sequence[Sequence[int]]
                                           ) -> list[int]:
        """Write each key's ranges into its reserved object: the bytes written per key,
        or a code (no session, a range past the object, lists of unequal lengths:
        INVALID_PARAMS; a replica file gone: TRANSFER_FAIL)."""
        keys = check_keys(keys)
        ranges = _ranges(keys, all_buffer_ptrs, all_sizes, all_dst_offsets)
        with self._lock:
            state = self._open
            results = []
            for key, key_ranges in zip(keys, ranges):
                replicas = self._put_sessions.get(key)
                if replicas is None or not _usable(state, key_ranges, replicas[0].size, False):
                    results.append(ErrorCode.INVALID_PARAMS)
                else:
                    assert state is not None and key_ranges is not None
                    results.append(_write_ranges(state, replicas, key_ranges))
            return results

    def batch_put_session_end(self: StoreCore, keys: Sequence[str]) -> list[int]:
        """Complete the reserved objects: a code per key (INVALID_PARAMS: no session)."""
        return SessionMethods._finish_puts(self, check_keys(keys), revoke=False)

    def batch_put_session_revoke(self: StoreCore, keys: Sequence[str]) -> list[int]:
        """Delete the reserved objects and their files: a code per key."""
        return SessionMethods._finish_puts(self, check_keys(keys), revoke=True)

    def batch_get_session_start(self: StoreCore, keys: Sequence[str]) -> list[int]:
        """Look the keys' replicas up once (a read lease each): a code per key
        (OBJECT_NOT_FOUND for one not stored)."""
        keys = check_keys(keys)
        with self._lock:
            if self._open is None:
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            found = self._find(keys)
            for key, item in found.items():
                if not item.code:
                    self._get_sessions[key] = item
            return [found[key].code for key in keys]

    def batch_get_into_multi_buffer_ranges(self: StoreCore, keys: Sequence[str],
                                           all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_src_offsets: Sequence[Sequence[int]]
                                           ) -> list[int]:
        """Read each key's ranges (from its get session's replicas) into caller memory:
        the bytes read per key, or a code."""
        keys = check_keys(keys)
        ranges = _ranges(keys, all_buffer_ptrs, all_sizes, all_src_offsets)
        with self._lock:
            found = [(self._get_sessions.get(key), key_ranges)
                     for key, key_ranges in zip(keys, ranges)]
            return [_read_ranges(self, item, key_ranges)
                    if item is not None and key_ranges is not None and
                    _usable(self._open, key_ranges, item.size, True)
                    else ErrorCode.INVALID_PARAMS for item, key_ranges in found]

    def batch_get_session_end(self: StoreCore, keys: Sequence[str]) -> int:
        """Forget the keys' replicas: 0."""
        keys = check_keys(keys)
        with self._lock:
            for key in keys:
                self._get_sessions.pop(key, None)
        return 0

    def put_from_with_metadata(self: StoreCore, key: str, buffer_ptr: int,
                               metadata_buffer_ptr: int, size: int, metadata_size: int,
                               config: ReplicateConfig | None = None) -> int:
        """put of metadata_size bytes at metadata_buffer_ptr followed by size bytes at
        buffer_ptr, as one object (metadata first, as Mooncake stores it)."""
        row: Row = [(check_int(metadata_buffer_ptr, "metadata_buffer_ptr"),
                     check_int(metadata_size, "metadata_size")),
                    (check_int(buffer_ptr, "buffer_ptr"), check_int(size, "size"))]
        parts = [part for part in row if part[1]]
        return self._put_rows(check_keys([key]), [parts or None], config, upsert=False)[0]

    def _finish_puts(self: StoreCore, keys: list[str], revoke: bool) -> list[int]:
        with self._lock:
            state = self._open
            ours = [key for key in dict.fromkeys(keys) if key in self._put_sessions]
            if state is None:
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            try:
                results = (state.index.batch_put_revoke(ours) if revoke
                           else state.index.batch_put_end(ours))
            except FAILURES as error:
                return [code_of(error) if key in ours else ErrorCode.INVALID_PARAMS
                        for key in keys]
            answers = {}
            for result in results:
                replicas = self._put_sessions.pop(result.key)
                if revoke or not result.ok:
                    _delete(state, replicas)
                answers[result.key] = 0 if result.ok else code_of(result.error) \
                    if result.error else -1
            return [answers.pop(key, ErrorCode.INVALID_PARAMS) for key in keys]


def _usable(state: OpenStore | None, ranges: Ranges | None, size: int, writable: bool
            ) -> bool:
    """Whether a ranged call may move these ranges of an object of size bytes: each
    within the object, its memory one buffers.py allows."""
    return state is not None and ranges is not None and all(
        offset + length <= size and state.buffers.allows(address, length, writable)
        for address, length, offset in ranges)


def _write_ranges(state: OpenStore, replicas: list[Replica], ranges: Ranges) -> int:
    written = 0
    for address, size, offset in ranges:
        data = view(address, size)
        for replica in replicas:
            store = state.files.reach(replica.segment)
            try:
                if store is None or not store.write_at(replica, offset, data):
                    return ErrorCode.TRANSFER_FAIL
            except FAILURES as error:
                return code_of(error)
        written += size
    return written


def _read_ranges(store: StoreCore, item: Found, ranges: Ranges) -> int:
    read = 0
    for address, size, offset in ranges:
        if size and not store._read_into(item, view(address, size), offset):
            return ErrorCode.TRANSFER_FAIL
        read += size
    return read


def _delete(state: OpenStore, replicas: list[Replica]) -> None:
    for replica in replicas:
        with contextlib.suppress(*FAILURES):
            store = state.files.reach(replica.segment)
            if store is not None:
                store.delete(replica.location)
