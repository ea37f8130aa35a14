"""Mooncake's Python client on mooncake-redis: code written for `mooncake.store` runs on
it with only the import changed,

    from mooncake_redis.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

with Mooncake's methods, arguments and integer return codes; the metadata, leases, radix
tree and eviction in Redis, the bytes in files (store.py; docs/INTEGRATIONS.md lists what
is supported and what differs). The names mooncake.store exports are exported here too
(its enums and their members, descriptors, task records, the buffer pool, the tensor
classes), but for those docs/INTEGRATIONS.md lists as not provided.
"""

from .buffer_pool import (
    BufferLease,
    BufferLeaseView,
    BufferPool,
    MooncakeHostMemAllocator,
    RegisteredBufferLease,
    RegisteredBufferLeaseView,
    RegisteredBufferPool,
    bind_to_numa_node,
)
from .buffers import BufferHandle
from .codes import ErrorCode
from .records import (
    Descriptor,
    DiskDescriptor,
    ExistOptions,
    MemoryDescriptor,
    ObjectDataType,
    QueryTaskResponse,
    ReplicaDescriptor,
    ReplicaStatus,
    TaskStatus,
    TaskType,
    module_constants,
)
from .replicate_config import ReplicateConfig, SoftPinAction
from .store import MooncakeDistributedStore
from .tensor_format import deserialize_tensor as _deserialize_tensor
from .tensor_format import serialize_tensor as _serialize_tensor
from .tensor_format import tensor_metadata_size as _tensor_metadata_size

globals().update(module_constants())  # UNKNOWN, KVCACHE, ..., COMPLETE, ..., SUCCESS

__all__ = ["BufferHandle", "BufferLease", "BufferLeaseView", "BufferPool", "Descriptor",
           "DiskDescriptor", "ErrorCode", "ExistOptions", "MemoryDescriptor",
           "MooncakeDistributedStore", "MooncakeHostMemAllocator", "ObjectDataType",
           "QueryTaskResponse", "RegisteredBufferLease", "RegisteredBufferLeaseView",
           "RegisteredBufferPool", "ReplicaDescriptor", "ReplicaStatus", "ReplicateConfig",
           "SoftPinAction", "TaskStatus", "TaskType", "_deserialize_tensor",
           "_serialize_tensor", "_tensor_metadata_size", "bind_to_numa_node",
           *module_constants()]
