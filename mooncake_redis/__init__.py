"""mooncake-redis: a Redis-backed prefix index and metadata store for LLM KV-cache objects."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .errors import (
    ClusterUnavailable,
    ConfigurationError,
    CycleDetected,
    InvalidArgument,
    InvalidObjectState,
    LinkContention,
    MooncakeRedisError,
    NoSpace,
    ObjectAlreadyExists,
    ObjectLeased,
    ObjectNotFound,
    ObjectNotReady,
    OutcomeUnknown,
    ParentConflict,
    PermissionDenied,
    RadixTreeDisabled,
    RedisUnavailable,
    ReplicationIncomplete,
    StoreFull,
)
from .index import Index
from .models import NodeInfo, NodeItem, ObjectInfo, PutItem, Replica, Result, Usage
from .prefix import register_extractor, rfc_prefix, shard_of, tagged_prefix
from .settings import ClientOptions, Settings

try:
    __version__ = version("mooncake-redis")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ClientOptions", "ClusterUnavailable", "ConfigurationError", "CycleDetected", "Index",
    "InvalidArgument", "InvalidObjectState", "LinkContention", "MooncakeRedisError", "NoSpace",
    "NodeInfo", "NodeItem",
    "ObjectAlreadyExists", "ObjectInfo", "ObjectLeased", "ObjectNotFound", "ObjectNotReady",
    "OutcomeUnknown", "ParentConflict", "PermissionDenied", "PutItem", "RadixTreeDisabled",
    "RedisUnavailable", "Replica", "ReplicationIncomplete", "Result", "Settings", "StoreFull",
    "Usage",
    "register_extractor", "rfc_prefix", "shard_of", "tagged_prefix",
]
