"""What a set-up store holds (OpenStore), what a read found (Found), and StoreCore: the
part of MooncakeDistributedStore (store.py) that its method groups (probes.py,
replicas.py, segments.py, sessions.py, tensors.py) are written against, as redis-py's
command groups are against its client.
"""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mooncake_redis.files.byte_store import FileByteStore
from mooncake_redis.files.data_plane import FileDataPlane

from ..index import Index
from ..models import Replica
from . import placement
from .buffers import MemoryPool, RegisteredBuffers
from .keeper import Keeper
from .records import QueryTaskResponse
from .replicate_config import ReplicateConfig
from .segment_files import SegmentFiles
from .setup_options import SetupOptions

T = TypeVar("T")

TaskId = tuple[int, int]
"""A copy or move task's id: Mooncake's UUID as two 64-bit ints."""

Row = list[tuple[int, int]]
"""A value's buffers: (address, size) each, in order."""


@dataclass
class OpenStore:
    """A set-up store."""

    options: SetupOptions
    index: Index
    files: SegmentFiles
    hostname: str
    port_holder: socket.socket | None
    plane: FileDataPlane | None
    """Its own segment's data plane; None with global_segment_size 0."""
    keeper: Keeper | None
    view: placement.SegmentView = field(default_factory=placement.SegmentView)
    buffers: RegisteredBuffers = field(default_factory=RegisteredBuffers)
    rng: random.Random = field(default_factory=random.Random)
    mounted: dict[str, int] = field(default_factory=dict)
    """Segments mounted on its segment since setup (mount_segment): id -> bytes."""
    pool: MemoryPool = field(default_factory=MemoryPool)
    dummy: bool = False
    """Set up by setup_dummy: alloc_from_mem_pool hands out memory."""


@dataclass(frozen=True)
class Found:
    """One key as a read found it: its replicas and size, or Mooncake's code."""

    code: int = 0
    replicas: tuple[Replica, ...] = ()
    size: int = 0


class StoreCore(Protocol):
    """The store's state and helpers its method groups use."""

    _lock: threading.RLock
    _open: OpenStore | None
    _tasks: dict[TaskId, QueryTaskResponse]
    """The copy and move tasks this store created (replicas.py)."""
    _put_sessions: dict[str, list[Replica]]
    """Objects reserved by batch_put_session_start: their replica files (sessions.py)."""
    _get_sessions: dict[str, Found]
    """Keys looked up by batch_get_session_start (sessions.py)."""

    def setup(self, *args: Any, **kwargs: Any) -> int: ...

    def _ask(self, keys: Sequence[str], call: Callable[[Index, list[str]], list[T]]
             ) -> tuple[list[str], list[T]] | int: ...

    def _find(self, keys: Sequence[str]) -> dict[str, Found]: ...

    def _place(self, state: OpenStore, items: list[tuple[str, int]],
               config: ReplicateConfig) -> dict[str, list[FileByteStore]]: ...

    def _read(self, item: Found, staged: bool) -> bytes | None: ...

    def _read_into(self, item: Found, target: memoryview, offset: int = 0) -> bool: ...

    def _write(self, state: OpenStore, keys: list[str], datas: list[memoryview],
               config: ReplicateConfig | None, upsert: bool) -> list[int]: ...

    def _put_values(self, keys: Sequence[str], values: Sequence[Any],
                    config: ReplicateConfig | None, upsert: bool) -> int: ...

    def _put_rows(self, keys: list[str], rows: list[Row | None],
                  config: ReplicateConfig | None, upsert: bool) -> list[int]: ...

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int]) -> list[int]: ...

    def _get_rows(self, keys: list[str], rows: list[Row | None], exact: bool) -> list[int]: ...
