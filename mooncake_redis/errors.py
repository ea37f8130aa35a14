"""Every exception class of the package, in one place.

MooncakeRedisError is the root of the one tree of errors the library raises (first
below, then the few that only the CLI, the ingester and the executor's own key check
raise). After it, the errors of the Mooncake drop-in and of the simulator, which keep
their builtin bases (Exception, ValueError, RuntimeError) and are not in the tree.
This module imports nothing of the package, so that every module can import it.
"""

from __future__ import annotations

from enum import Enum


class ReplyCode(str, Enum):
    """Every CODE of a script's `MCERR_<CODE> detail` refusal (lua/_lib.lua fail); a test
    holds this list to the scripts. The link refusals FENCED, STALE_EPOCH and CYCLE_CHECK
    are handled by registration itself; the others become the exception of that code."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    INVALID_STATE = "INVALID_STATE"
    NOT_READY = "NOT_READY"
    LEASED = "LEASED"
    NO_SPACE = "NO_SPACE"
    PARENT_CONFLICT = "PARENT_CONFLICT"
    SEGMENT_NOT_MOUNTED = "SEGMENT_NOT_MOUNTED"
    FENCED = "FENCED"
    """The node's link is fenced by a resolver: send again with an epoch past the detail."""
    STALE_EPOCH = "STALE_EPOCH"
    """The item's link epoch is older than the shard's: send again with the new one."""
    CYCLE_CHECK = "CYCLE_CHECK"
    """The node has children and the script could not walk up from the parent itself (a
    node served elsewhere, or whose shard only the client computes): the client walks."""
    CYCLE = "CYCLE"
    """The script walked up from the parent and met the node: the link would close a
    cycle."""
    NOT_HERE = "NOT_HERE"
    """A link the client meant to write in one call names a parent that the node the call
    went to does not serve (a slot moved): send it again."""


# The library: what Index and the modules under it raise to their callers.


class MooncakeRedisError(Exception):
    """Root of every error the library raises to its callers; catch it to catch them all
    (the Mooncake drop-in's SetupError and the simulator's errors, below, are not in it)."""

    code = "ERROR"

    def __init__(self, message: str, *, key: str | None = None, prefix_hash: str | None = None):
        super().__init__(message)
        self.key = key
        self.prefix_hash = prefix_hash


class ConfigurationError(MooncakeRedisError):
    """A URL, option or environment variable is invalid."""

    code = "CONFIGURATION"


class InvalidArgument(MooncakeRedisError, ValueError):
    """A call got an argument of the wrong type or out of range; nothing was written."""

    code = "INVALID_ARGUMENT"


class ObjectNotFound(MooncakeRedisError):
    """The object key is not in the store."""

    code = "NOT_FOUND"


class ObjectAlreadyExists(MooncakeRedisError):
    """put_start of a key that is already stored (complete or still processing)."""

    code = "ALREADY_EXISTS"


class InvalidObjectState(MooncakeRedisError):
    """The object is not in the state the operation needs (e.g. put_end twice)."""

    code = "INVALID_STATE"


class ObjectNotReady(InvalidObjectState):
    """get of an object that is still processing: its writer has not called put_end."""

    code = "NOT_READY"


class ObjectLeased(MooncakeRedisError):
    """remove of an object whose read lease has not expired; wait or pass force=True."""

    code = "LEASED"


class NoSpace(MooncakeRedisError):
    """put_start would pass the shard's share of capacity_bytes; an eviction job has been
    requested (when a queue is configured)."""

    code = "NO_SPACE"


class ParentConflict(MooncakeRedisError):
    """A node already records a different parent; a node's parent never changes."""

    code = "PARENT_CONFLICT"


class CycleDetected(MooncakeRedisError):
    """The parent link would make a node its own ancestor."""

    code = "CYCLE"


class LinkContention(MooncakeRedisError):
    """A link kept being fenced (its child deleted, or settled by a resolver running with
    no grace period) for every send this call made; nothing of the item was written:
    send it again."""

    code = "LINK_CONTENTION"


class RadixTreeDisabled(MooncakeRedisError):
    """A radix tree operation on a namespace configured with enable_radix_tree=False."""

    code = "RADIX_TREE_DISABLED"


class PermissionDenied(MooncakeRedisError):
    """The Redis user may not run this command or touch these keys (ACL NOPERM). Grant it
    the namespace's key pattern (`~<ns>:*`) and the commands of docs/RELIABILITY.md."""

    code = "NOPERM"


class ScriptError(MooncakeRedisError):
    """A script failed in a way the Python side does not know; a bug, please report it."""

    code = "SCRIPT"


class OutcomeUnknown(MooncakeRedisError):
    """The connection to a Redis node was lost after a call that is not safe to re-send
    had been sent: it may or may not have run. Look before retrying (object_info, get_node).
    put_start, put_end and registrations are safe to re-send (they carry the writer's
    token): without wait_acks they never raise this; removals and evictions can. With
    wait_acks, any write raises it when the reply of the WAIT after it never came (the
    write ran on the primary, whether replicas have it is unknown): send puts again."""

    code = "OUTCOME_UNKNOWN"


class RedisUnavailable(MooncakeRedisError):
    """Redis did not serve a call within cluster_retries (no connection could be made, or
    each was lost): a server that is down, restarting, unreachable, or dropping clients.
    Nothing of the call ran, and the calls after it were not sent. The message names the
    server and the last connection error."""

    code = "REDIS_UNAVAILABLE"


class ClusterUnavailable(RedisUnavailable):
    """On a Redis Cluster: a call not served within cluster_retries (a failover taking
    longer, slots without a node, nodes down). Nothing of the call ran, and the calls
    after it were not sent."""

    code = "CLUSTER_UNAVAILABLE"


class StoreFull(MooncakeRedisError):
    """Redis refused a write because it is at maxmemory (policy noeviction). Eviction and
    removal still work (they free memory); see `mooncake-redis doctor`."""

    code = "REDIS_FULL"


class ReplicationIncomplete(MooncakeRedisError):
    """wait_acks > 0 and fewer Redis replicas acknowledged the writes in wait_timeout_ms: they
    are applied on the primary, but a failover now could lose them. Raised for the whole
    call (the message names the node, the count and the calls it covered); the steps after
    it were not sent: send the call again (puts are safe to re-send)."""

    code = "REPLICATION_INCOMPLETE"


class SegmentNotMounted(MooncakeRedisError):
    """A replica names a segment that is not mounted (never mounted, or unmounted): the
    store cannot count its bytes, and an unmount would not find it."""

    code = "SEGMENT_NOT_MOUNTED"


class SegmentExists(MooncakeRedisError):
    """mount_segment of a segment that is registered already (remount_segment changes a
    mounted one)."""

    code = "SEGMENT_EXISTS"


class SegmentUnmounting(MooncakeRedisError):
    """The segment is being unmounted: finish its unmount_segment before mounting it again."""

    code = "SEGMENT_UNMOUNTING"


class EventsLost(MooncakeRedisError):
    """Events a reader had not read yet were trimmed from a shard's events stream (it is
    capped at events_max_len entries): what it knows of that shard may be wrong. The
    events consumer yields this as a marker in its stream of events, in the place of the
    lost ones; resynchronise the shard from `Consumer.list_shard` (docs/EVENTS.md)."""

    code = "EVENTS_LOST"

    def __init__(self, message: str, *, shard: str | None = None, count: int | None = None):
        super().__init__(message)
        self.shard = shard
        """The shard ("0".."f"; 0.1's layout "00".."ff") whose stream lost them; None when
        several may have."""
        self.count = count
        """How many were lost; None when that cannot be known."""


# The executor's own check, before a script is sent (executor.py, scripts.py).


class CrossSlotCall(ScriptError):
    """A script got keys of two shard tags: a bug that Redis Cluster would refuse with
    CROSSSLOT, caught here on a single Redis too."""


# The command line (cli/main.py, cli/support.py): `main` prints them and exits 1.


class NamespaceNotFound(MooncakeRedisError):
    """A command that reads a namespace found nothing of it: no settings, no segments, no
    shard stats (a mistyped --namespace looks like an empty store otherwise)."""


class AmbiguousHash(MooncakeRedisError):
    """A hash prefix that more than one node's hash begins with."""


class NoSuchHash(MooncakeRedisError):
    """A hash prefix that no node's hash begins with."""


# The vLLM ingester (engines/vllm/kv_events.py, engines/vllm/ingester.py).


class InvalidEvent(MooncakeRedisError):
    """A payload (or one event of it) that is not what vLLM publishes."""


# Outside the tree: the Mooncake drop-in (mooncake/), whose setup() returns the code.


class SetupError(Exception):
    """setup() refuses: the code it returns and the reason it logs."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# Outside the tree: the simulator (sim/).


class TraceFormatError(ValueError):
    """A trace line that is not a Mooncake request; names the file and the 1-based line."""

    def __init__(self, source: str, line: int, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


class ReplayDiverged(RuntimeError):
    """The store holds other pages than the replay knows it stored and eviction left."""


class SimulationError(RuntimeError):
    """A policy could not free space the runner needed."""


_BY_CODE: dict[ReplyCode, type[MooncakeRedisError]] = {
    ReplyCode(cls.code): cls
    for cls in (
        InvalidArgument,
        ObjectNotFound,
        ObjectAlreadyExists,
        InvalidObjectState,
        ObjectNotReady,
        ObjectLeased,
        NoSpace,
        ParentConflict,
        SegmentNotMounted,
        CycleDetected,
    )
}

SCRIPT_ERROR_PREFIX = "MCERR_"


def split_script_error(text: str) -> tuple[ReplyCode, str] | None:
    """(code, detail) of a script's `MCERR_<CODE> detail` reply (lua/_lib.lua fail); None
    for any other text, a code this version does not know included. The one reader of
    that form: from_script_error, and the link refusals registration handles itself."""
    if not text.startswith(SCRIPT_ERROR_PREFIX):
        return None
    code, _, detail = text[len(SCRIPT_ERROR_PREFIX):].partition(" ")
    try:
        return ReplyCode(code), detail
    except ValueError:
        return None


def from_script_error(message: str, *, key: str | None = None,
                      prefix_hash: str | None = None) -> MooncakeRedisError:
    """Turn a script's `MCERR_<CODE> text` error reply into the matching exception."""
    text = message.strip()
    parts = split_script_error(text)
    if parts is not None:
        code, detail = parts
        cls = _BY_CODE.get(code, ScriptError)
        return cls(detail or text, key=key, prefix_hash=prefix_hash)
    if text.startswith("NOPERM"):
        return PermissionDenied(text, key=key, prefix_hash=prefix_hash)
    return ScriptError(text, key=key, prefix_hash=prefix_hash)
