"""Mooncake's integer return codes, and which one answers each error of this package.

The values are Mooncake's `ErrorCode` enum (mooncake-store/include/types.h); the Python
client returns them as plain ints (0, or a negative code), and so does the drop-in.
"""

from __future__ import annotations

import logging

import redis

from ..errors import (
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
    RedisUnavailable,
    SegmentExists,
    SegmentNotMounted,
    SegmentUnmounting,
)

log = logging.getLogger(__name__)


class ErrorCode:
    """The codes the drop-in returns (a subset of Mooncake's ErrorCode, same values), as
    plain ints like the ones Mooncake's binding returns."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    NO_AVAILABLE_HANDLE = -200
    """No segment has room for the object (Mooncake's allocation failure)."""
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    TRANSFER_FAIL = -800
    """The bytes could not be read or written (a replica's file is gone or unwritable)."""
    RPC_FAIL = -900
    """Redis did not answer (Mooncake: the master did not)."""
    RPC_TIMEOUT = -901
    """The call's outcome is unknown (the connection dropped after it was sent)."""


_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (ObjectNotReady, ErrorCode.REPLICA_IS_NOT_READY),  # before its base InvalidObjectState
    (InvalidObjectState, ErrorCode.REPLICA_IS_NOT_READY),
    (InvalidArgument, ErrorCode.INVALID_PARAMS),
    (ConfigurationError, ErrorCode.INVALID_PARAMS),  # a bad URL or namespace name
    (ParentConflict, ErrorCode.INVALID_PARAMS),  # parent_block_hash names a wrong parent
    (CycleDetected, ErrorCode.INVALID_PARAMS),
    (ObjectNotFound, ErrorCode.OBJECT_NOT_FOUND),
    (ObjectAlreadyExists, ErrorCode.OBJECT_ALREADY_EXISTS),
    (ObjectLeased, ErrorCode.OBJECT_HAS_LEASE),
    (NoSpace, ErrorCode.NO_AVAILABLE_HANDLE),
    (SegmentNotMounted, ErrorCode.SEGMENT_NOT_FOUND),
    (SegmentUnmounting, ErrorCode.SEGMENT_NOT_FOUND),
    (SegmentExists, ErrorCode.SEGMENT_ALREADY_EXISTS),
    (PermissionDenied, ErrorCode.ILLEGAL_CLIENT),
    (OutcomeUnknown, ErrorCode.RPC_TIMEOUT),
    (RedisUnavailable, ErrorCode.RPC_FAIL),  # and its cluster kind, ClusterUnavailable
    (redis.exceptions.ConnectionError, ErrorCode.RPC_FAIL),
    (redis.exceptions.TimeoutError, ErrorCode.RPC_FAIL),
    (OSError, ErrorCode.TRANSFER_FAIL),  # a replica's file could not be written or read
)


FAILURES: tuple[type[BaseException], ...] = (MooncakeRedisError, OSError,
                                             redis.exceptions.RedisError)
"""What a call answers with a code instead of raising: this package's errors, Redis's,
and the filesystem's (a segment file)."""


def code_of(error: BaseException) -> int:
    """Mooncake's code for an error; INTERNAL_ERROR (logged) for one it has none for
    (LinkContention after its retry, StoreFull, ReplicationIncomplete, a script error)."""
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    if not isinstance(error, LinkContention):
        log.warning("mooncake drop-in: %s: %s", type(error).__name__, error)
    return ErrorCode.INTERNAL_ERROR


def name_of(code: int) -> str:
    """The name of a code (for messages)."""
    names = {value: name for name, value in vars(ErrorCode).items() if isinstance(value, int)}
    return names.get(code, str(code))
