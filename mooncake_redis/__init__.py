"""mooncake-redis: a Redis-backed prefix index and metadata store for LLM KV-cache objects."""

from __future__ import annotations

from .config import Config
from .errors import (
    ConfigurationError,
    CycleDetected,
    InvalidArgument,
    InvalidObjectState,
    MooncakeRedisError,
    NoSpace,
    ObjectAlreadyExists,
    ObjectLeased,
    ObjectNotFound,
    ObjectNotReady,
    ParentConflict,
    PermissionDenied,
    RadixTreeDisabled,
)
from .index import Index
from .models import NodeInfo, ObjectInfo, Usage
from .prefix import rfc_prefix, shard_of

__all__ = [
    "Config", "ConfigurationError", "CycleDetected", "Index", "InvalidArgument",
    "InvalidObjectState", "MooncakeRedisError", "NoSpace", "NodeInfo", "ObjectAlreadyExists",
    "ObjectInfo", "ObjectLeased", "ObjectNotFound", "ObjectNotReady", "ParentConflict",
    "PermissionDenied",
    "RadixTreeDisabled", "Usage", "rfc_prefix", "shard_of",
]
