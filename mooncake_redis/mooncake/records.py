"""The small types `mooncake.store` exports besides the store: its enums (and their members
as module constants), ExistOptions, the replica descriptors get_replica_desc returns, and
the task records of copy/move tasks. Same names, fields and values as Mooncake's pybind
classes (0.3.13.post1, and 0.3.14's ExistOptions); fields are typed as pybind types them
(checks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from .checks import boolean


class MooncakeEnum(IntEnum):
    """An enum as pybind11 shows one: str() is "Type.NAME" (an IntEnum's would be the
    number), and it is an int too."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class ObjectDataType(MooncakeEnum):
    """What an object holds (ReplicateConfig.data_type): recorded by Mooncake, a label here."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(MooncakeEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(MooncakeEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(MooncakeEnum):
    """Mooncake's values (SUCCESS is 3, FAILED 2)."""

    PENDING = 0
    PROCESSING = 1
    FAILED = 2
    SUCCESS = 3


class ExistOptions:
    """is_exist / batch_is_exist options (Mooncake 0.3.14). prefetch_to_memory asks
    Mooncake to promote SSD-only objects to DRAM; every replica here is a file, so it is
    accepted and changes nothing."""

    def __init__(self) -> None:
        self._prefetch_to_memory = False

    @property
    def prefetch_to_memory(self) -> bool:
        return self._prefetch_to_memory

    @prefetch_to_memory.setter
    def prefetch_to_memory(self, value: Any) -> None:
        self._prefetch_to_memory = boolean(value)

    def __str__(self) -> str:
        return f"ExistOptions: {{ prefetch_to_memory: {int(self._prefetch_to_memory)} }}"


@dataclass
class Descriptor:
    """Where a memory replica's bytes are: Mooncake's buffer address, size and the
    transport endpoint (the segment). Here the bytes are a file of the segment: the
    address is 0."""

    buffer_address: int = 0
    size: int = 0
    transport_endpoint: str = ""


@dataclass
class MemoryDescriptor:
    buffer_descriptor: Descriptor


@dataclass
class DiskDescriptor:
    file_path: str
    object_size: int


class ReplicaDescriptor:
    """One replica of an object, as get_replica_desc returns it. A replica on a mounted
    segment is what Mooncake calls a memory replica (the segment is a store's memory
    there, a directory of files here)."""

    def __init__(self, status: ReplicaStatus, memory: MemoryDescriptor | None = None,
                 disk: DiskDescriptor | None = None, local_disk: bool = False):
        self.status = status
        self._memory = memory
        self._disk = disk
        self._local_disk = local_disk

    def is_memory_replica(self) -> bool:
        return self._memory is not None

    def is_disk_replica(self) -> bool:
        return self._disk is not None and not self._local_disk

    def is_local_disk_replica(self) -> bool:
        return self._disk is not None and self._local_disk

    def get_memory_descriptor(self) -> MemoryDescriptor:
        if self._memory is None:
            raise RuntimeError("Expected MemoryDescriptor")
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        if self._disk is None:
            raise RuntimeError("Expected DiskDescriptor")
        return self._disk


@dataclass
class QueryTaskResponse:
    """A copy or move task as query_task returns it. Ids are Mooncake's UUIDs: a pair of
    64-bit ints."""

    id: tuple[int, int] = (0, 0)
    type: TaskType = TaskType.REPLICA_COPY
    status: TaskStatus = TaskStatus.PENDING
    created_at_ms_epoch: int = 0
    last_updated_at_ms_epoch: int = 0
    assigned_client: tuple[int, int] = (0, 0)
    message: str = ""

    def __repr__(self) -> str:
        return (f"QueryTaskResponse(id={self.id[0]}-{self.id[1]}, type={int(self.type)}, "
                f"status={int(self.status)}, created_at={self.created_at_ms_epoch}, "
                f"last_updated_at={self.last_updated_at_ms_epoch}, assigned_client="
                f"{self.assigned_client[0]}-{self.assigned_client[1]}, "
                f"message=\"{self.message}\")")


def module_constants() -> dict[str, MooncakeEnum]:
    """The enum members mooncake.store exports as module names (UNKNOWN, COMPLETE, ...)."""
    names: dict[str, MooncakeEnum] = {}
    for enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
        for member in enum:
            names[member.name] = member
    return names
