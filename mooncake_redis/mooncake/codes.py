"""Mooncake's integer return codes, and which one answers each error of this package.

The values are Mooncake's `ErrorCode` enum (mooncake-store/include/types.h, all of it);
the Python client returns them as plain ints (0, or a negative code), and so does the
drop-in.
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
    """Every code of Mooncake's ErrorCode (same names, same values), as plain ints like the
    ones Mooncake's binding returns. The drop-in returns those _CODES maps errors to, plus
    the ones its methods name; the others are here so code that compares with them runs."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SHARD_INDEX_OUT_OF_RANGE = -100
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    """No segment has room for the object (Mooncake's allocation failure)."""
    INVALID_VERSION = -300
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    OBJECT_NO_REPLICATION_TASK = -709
    REPLICA_NOT_FOUND = -710
    REPLICA_ALREADY_EXISTS = -711
    REPLICA_IS_GONE = -712
    REPLICA_NOT_IN_LOCAL_MEMORY = -713
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    """The bytes could not be read or written (a replica's file is gone or unwritable)."""
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    """Redis did not answer (Mooncake: the master did not)."""
    RPC_TIMEOUT = -901
    """The call's outcome is unknown (the connection dropped after it was sent)."""
    ETCD_OPERATION_ERROR = -1000
    ETCD_KEY_NOT_EXIST = -1001
    ETCD_TRANSACTION_FAIL = -1002
    ETCD_CTX_CANCELLED = -1003
    OPLOG_ENTRY_NOT_FOUND = -1004
    K8S_LEASE_OPERATION_ERROR = -1005
    K8S_LEASE_NOT_FOUND = -1006
    INCOMPLETE_OPLOG_CATCH_UP = -1007
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    UNAVAILABLE_IN_CURRENT_MODE = -1011
    NOT_SUPPORTED = -1012
    FILE_NOT_FOUND = -1100
    FILE_OPEN_FAIL = -1101
    FILE_READ_FAIL = -1102
    FILE_WRITE_FAIL = -1103
    FILE_INVALID_BUFFER = -1104
    FILE_LOCK_FAIL = -1105
    FILE_INVALID_HANDLE = -1106
    BUCKET_NOT_FOUND = -1200
    BUCKET_ALREADY_EXISTS = -1201
    KEYS_EXCEED_BUCKET_LIMIT = -1202
    KEYS_ULTRA_LIMIT = -1203
    UNABLE_OFFLOAD = -1300
    UNABLE_OFFLOADING = -1301
    TASK_NOT_FOUND = -1400
    """query_task of a task this namespace does not hold."""
    TASK_PENDING_LIMIT_EXCEEDED = -1401
    JOB_NOT_FOUND = -1402
    SERIALIZE_UNSUPPORTED = -1500
    SERIALIZE_FAIL = -1501
    DESERIALIZE_FAIL = -1502
    PERSISTENT_FAIL = -1503
    DFS_NETWORK_TIMEOUT = -1600
    DFS_SERVICE_UNAVAILABLE = -1601
    DFS_QUOTA_EXCEEDED = -1602
    DFS_PERMISSION_DENIED = -1603
    DFS_STALE_HANDLE = -1604
    DFS_PARTIAL_WRITE = -1605
    TENANT_QUOTA_EXCEEDED = -1700
    TENANT_NOT_REGISTERED = -1701
    TENANT_NOT_EMPTY = -1702


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
