"""Mooncake's Python client on mooncake-redis: code written for `mooncake.store` runs on
it with only the import changed,

    from mooncake_redis.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

with Mooncake's methods, arguments and integer return codes; the metadata, leases, radix
tree and eviction in Redis, the bytes in files (store.py; docs/INTEGRATIONS.md lists what
is supported and what differs).
"""

from .buffers import BufferHandle
from .codes import ErrorCode
from .replicate_config import ReplicateConfig, SoftPinAction
from .store import MooncakeDistributedStore

__all__ = ["BufferHandle", "ErrorCode", "MooncakeDistributedStore", "ReplicateConfig",
           "SoftPinAction"]
