"""Replica-level calls: get_replica_desc / batch_get_replica_desc, batch_replica_clear, and
copy / move tasks with query_task.

A replica here is a file in a segment's directory, recorded with the object in Redis. The
store has no call that adds or drops one replica of a stored object, so a copy, a move or
a clear on one segment rewrites the object: its bytes, read from a replica, go to a new
file on each segment it is to have, and an upsert records exactly those replicas; the
old files are freed (by their segments' keepers) once the old read lease has ended, so a
reader holding one keeps reading. Between the upsert's start and end (one round trip) a
get answers REPLICA_IS_NOT_READY. The object keeps its pins and its place in the tree.

Mooncake runs copy and move tasks on its clients after create_*_task returns; the drop-in
runs them inside create_*_task and keeps each task's record in the store that created it:
query_task answers for those (TASK_NOT_FOUND for any other id).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace

from mooncake_redis.files.data_plane import Page, write_pages

from ..models import ObjectInfo, Replica
from .checks import check_key, check_keys, texts
from .codes import FAILURES, ErrorCode, code_of
from .records import (
    Descriptor,
    MemoryDescriptor,
    QueryTaskResponse,
    ReplicaDescriptor,
    ReplicaStatus,
    TaskStatus,
    TaskType,
)
from .state import OpenStore, StoreCore, TaskId

log = logging.getLogger(__name__)



def describe(replica: Replica) -> ReplicaDescriptor:
    """A replica as Mooncake describes a memory replica: its segment is the transport
    endpoint (a file holds the bytes: no address)."""
    return ReplicaDescriptor(ReplicaStatus.COMPLETE, MemoryDescriptor(
        Descriptor(0, replica.size, replica.segment)))


def _new_task_id() -> TaskId:
    return secrets.randbits(63), secrets.randbits(64)


class ReplicaMethods:
    def get_replica_desc(self: StoreCore, key: str) -> list[ReplicaDescriptor]:
        """The object's replicas (a read lease, as Mooncake's Query grants); [] if it is
        not stored."""
        key = check_key(key)
        return ReplicaMethods.batch_get_replica_desc(self, [key]).get(key, [])

    def batch_get_replica_desc(self: StoreCore, keys: Sequence[str]
                               ) -> dict[str, list[ReplicaDescriptor]]:
        """Each stored key's replicas; keys not stored (or not readable) are left out."""
        keys = check_keys(keys)
        with self._lock:
            found = self._find(keys)
        return {key: [describe(replica) for replica in item.replicas]
                for key, item in found.items() if not item.code and item.replicas}

    def batch_replica_clear(self: StoreCore, keys: Sequence[str], segment_name: str = ""
                            ) -> list[str]:
        """Drop the replicas of objects whose read lease has ended: all of them (the
        object goes, as a remove) or, with segment_name, the one on that segment (the
        object goes if it was the last). The keys cleared; leased, processing, absent
        objects and ones without a replica on segment_name are skipped."""
        keys = check_keys(keys)
        if not isinstance(segment_name, str):
            raise TypeError(f"segment_name must be a str, got {type(segment_name).__name__}")
        with self._lock:
            state = self._open
            if state is None or not keys:
                return []
            try:
                return _clear(state, list(dict.fromkeys(keys)), segment_name)
            except FAILURES as error:
                log.error("batch_replica_clear: %s", error)
                return []

    def create_copy_task(self: StoreCore, key: str, targets: Sequence[str]
                         ) -> tuple[TaskId, int]:
        """Copy the object to each target segment (mounted; one that holds a replica
        already is left as it is): (task id, 0), or ((0, 0), code): OBJECT_NOT_FOUND,
        INVALID_PARAMS for no target or one not mounted."""
        key = check_key(key)
        wanted = texts(targets, "targets")
        with self._lock:
            return ReplicaMethods._task(self, TaskType.REPLICA_COPY, key, wanted, None)

    def create_move_task(self: StoreCore, key: str, source: str, target: str
                         ) -> tuple[TaskId, int]:
        """Move the object's replica from source to target (both mounted, not the same):
        (task id, 0), or ((0, 0), code)."""
        key = check_key(key)
        if not isinstance(source, str) or not isinstance(target, str):
            raise TypeError("source and target must be str")
        with self._lock:
            return ReplicaMethods._task(self, TaskType.REPLICA_MOVE, key, [target], source)

    def query_task(self: StoreCore, task_id: TaskId) -> tuple[QueryTaskResponse | None, int]:
        """(the task's record, 0), or (None, TASK_NOT_FOUND)."""
        wanted = _task_id(task_id)
        with self._lock:
            task = self._tasks.get(wanted)
        return (task, 0) if task is not None else (None, ErrorCode.TASK_NOT_FOUND)

    def _task(self: StoreCore, kind: TaskType, key: str, targets: list[str],
              source: str | None) -> tuple[TaskId, int]:
        state = self._open
        if state is None:
            return (0, 0), ErrorCode.INVALID_PARAMS
        try:  # the object first, then the segments: Mooncake's order of answers
            info = state.index.object_info(key)
            mounted = {name for name, segment in
                       state.view.refresh(state.index).segments.items() if segment.mounted}
        except FAILURES as error:
            return (0, 0), code_of(error)
        if info is None or info.state != "complete":
            return (0, 0), ErrorCode.OBJECT_NOT_FOUND
        if not targets or any(name not in mounted for name in targets) or (
                source is not None and (source not in mounted or source == targets[0])):
            return (0, 0), ErrorCode.INVALID_PARAMS
        now = int(time.time() * 1000)
        task = QueryTaskResponse(_new_task_id(), kind, TaskStatus.PROCESSING, now, now,
                                 _new_task_id())
        segments = [r.segment for r in info.replicas if r.segment != source]
        segments += [name for name in targets if name not in segments]
        code = _rewrite(state, info, segments)
        done = int(time.time() * 1000)
        task = replace(task, status=TaskStatus.SUCCESS if code == 0 else TaskStatus.FAILED,
                       last_updated_at_ms_epoch=done,
                       message="" if code == 0 else f"error code {code}")
        self._tasks[task.id] = task
        return task.id, 0


def _task_id(value: object) -> TaskId:
    if not (isinstance(value, tuple) and len(value) == 2 and
            all(isinstance(part, int) and not isinstance(part, bool) for part in value)):
        raise TypeError(f"task_id must be a tuple of two ints, got {value!r}")
    return value[0], value[1]


def _clear(state: OpenStore, keys: list[str], segment: str) -> list[str]:
    now = state.index.redis_time_ms()
    infos = {key: info for key in keys
             if (info := state.index.object_info(key)) is not None}
    clearable = [key for key, info in infos.items()
                 if info.state == "complete" and info.lease_ms <= now
                 and (not segment or any(r.segment == segment for r in info.replicas))]
    cleared = []
    whole = [key for key in clearable
             if not segment or all(r.segment == segment for r in infos[key].replicas)]
    for result in state.index.batch_remove(whole):
        if result.ok:
            cleared.append(result.key)
    for key in clearable:
        if key not in whole:
            info = infos[key]
            kept = [r.segment for r in info.replicas if r.segment != segment]
            if _rewrite(state, info, kept) == 0:
                cleared.append(key)
    return [key for key in keys if key in cleared]


def _rewrite(state: OpenStore, info: ObjectInfo, segments: list[str]) -> int:
    """Store the object again with one replica on each of segments (in order), its bytes
    read from a current replica, its pins kept: 0 or Mooncake's code."""
    data = None
    for replica in info.replicas:
        with contextlib.suppress(*FAILURES):
            store = state.files.reach(replica.segment)
            data = store.read(replica) if store is not None else None
            if data is not None:
                break
    if data is None:
        return ErrorCode.TRANSFER_FAIL
    stores = [state.files.reach(name) for name in segments]
    if any(store is None for store in stores) or not all(
            state.view.room(name, len(data)) or name in {r.segment for r in info.replicas}
            for name in segments):
        return ErrorCode.NO_AVAILABLE_HANDLE
    try:
        (result,) = write_pages(state.index, [Page(info.key, memoryview(data))],
                                {info.key: [s for s in stores if s is not None]},
                                soft_pin=info.soft_pin, hard_pin=info.hard_pin, upsert=True,
                                watermark=False)
    except FAILURES as error:
        return code_of(error)
    if not result.ok:
        return code_of(result.error) if result.error else ErrorCode.INTERNAL_ERROR
    state.view.add([name for name in segments
                    if name not in {r.segment for r in info.replicas}], len(data))
    return 0
