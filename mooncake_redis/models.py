"""The plain records the public API returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .errors import MooncakeRedisError
from .segment_registry import Segment

T = TypeVar("T")


@dataclass(frozen=True, init=False)
class Result(Generic[T]):
    """One item's outcome in a batch call: its value, or the error that refused it (that
    item wrote nothing; the other items stand on their own)."""

    key: str
    """The object key (or, for node registrations, the prefix hash) of the item."""
    value: T | None = None
    error: MooncakeRedisError | None = None

    def __init__(self, key: str, value: T | None = None,
                 error: MooncakeRedisError | None = None):
        # what the frozen dataclass's own __init__ does (one object.__setattr__ a field),
        # in half the time: batch calls make one Result a key
        fields = self.__dict__
        fields["key"], fields["value"], fields["error"] = key, value, error

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> T | None:
        """The value, or raise the item's error."""
        if self.error is not None:
            raise self.error
        return self.value


def raise_first(results: list[Result[T]]) -> None:
    for result in results:
        result.unwrap()


@dataclass(frozen=True)
class Replica:
    """Where one copy of an object's bytes lives (Mooncake's replica descriptor): the
    data plane allocates and frees it; the store records it, checks that its segment is
    mounted and counts its bytes against that segment."""

    segment: str
    """The mounted segment holding it (mount_segment)."""
    location: str
    """Where in the segment: an address or offset, a file path or a URI."""
    medium: str = "memory"
    """"memory" or "disk"."""
    size: int = 0
    """Its bytes: the object's size (a replica holds the whole object); set by the store."""


ReplicaSpec = Replica | Sequence[str]
"""A replica as a caller gives it: a Replica, or (segment, location[, medium])."""

PutItem = (tuple[str, int] | tuple[str, int, str | None]
           | tuple[str, int, str | None, Sequence[ReplicaSpec] | None])
"""One batch_put_start / batch_upsert_start item: (key, size[, parent hash[, replicas]])."""

PutRow = tuple[str, int, str | None, Sequence[ReplicaSpec] | None]
"""A PutItem once checked: padded to four with None (validation.check_put_items)."""

NodeItem = tuple[str, str | None, Sequence[str]]
"""One batch_register_radix_tree_node item: (prefix hash, parent hash or None, keys)."""


@dataclass(frozen=True, init=False)
class ObjectInfo:
    """An object's metadata as the store keeps it."""

    key: str
    prefix_hash: str
    size: int
    state: str
    """"processing" between put_start and put_end, then "complete"."""
    lease_ms: int
    """Redis time (ms) until which the object is held against eviction and removal
    (0 while processing)."""
    started_ms: int | None
    """When put_start ran (Redis ms), while processing; None once complete."""
    soft_pin: bool
    hard_pin: bool
    token: str
    """The writer token of the put_start that made it."""
    replicas: tuple[Replica, ...] = ()
    """Where its bytes are (empty for an object stored without replicas)."""

    def __init__(self, key: str, prefix_hash: str, size: int, state: str, lease_ms: int,
                 started_ms: int | None, soft_pin: bool, hard_pin: bool, token: str,
                 replicas: tuple[Replica, ...] = ()):
        # the frozen dataclass's own __init__ sets each field with object.__setattr__;
        # filling the instance's dict at once takes a third of the time (batch_get
        # makes one a key)
        self.__dict__.update(key=key, prefix_hash=prefix_hash, size=size, state=state,
                             lease_ms=lease_ms, started_ms=started_ms, soft_pin=soft_pin,
                             hard_pin=hard_pin, token=token, replicas=replicas)


@dataclass(frozen=True)
class NodeInfo:
    """A radix tree node: one prefix hash, its parent, children and objects."""

    prefix_hash: str
    parent: str | None
    """None while the parent is unknown (a root, or a node registered without one)."""
    parent_epoch: int | None
    children: list[str]
    keys: list[str]
    bytes: int
    processing: int
    """How many of its objects are still processing."""
    soft_pins: int
    hard_pins: int
    eviction_score: float | None
    """The node's score in its shard's leaf index (ms; inf = not evictable), None if not a leaf."""

    @property
    def is_shell(self) -> bool:
        """A node with no objects, kept only because it has children."""
        return not self.keys

    @property
    def is_leaf(self) -> bool:
        return bool(self.keys) and not self.children


@dataclass(frozen=True)
class Usage:
    """How full the namespace is: sums of the shards' exact counters."""

    used_bytes: int
    capacity_bytes: int
    """capacity_bytes, or while segments are registered the sum of the mounted ones."""
    objects: int
    nodes: int
    segments: dict[str, Segment] = field(default_factory=dict)
    """Each registered segment with its capacity and the bytes of replicas on it."""

    @property
    def ratio(self) -> float:
        """used/capacity; 0.0 when capacity is unlimited."""
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0
