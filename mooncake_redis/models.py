"""The plain records the public API returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectInfo:
    """An object's metadata as the store keeps it."""

    key: str
    size: int
    state: str
    """"processing" between put_start and put_end, then "complete"."""
    lease_ms: int
    """Redis time (ms) until which the object is held against eviction and removal."""
    soft_pin: bool
    hard_pin: bool
    created_ms: int
    prefix_hash: str


@dataclass(frozen=True)
class NodeInfo:
    """A radix tree node: one prefix hash, its parent, children and registered keys."""

    prefix_hash: str
    parent: str | None
    """None while the parent is unknown (a root, or a node registered without one)."""
    children: list[str]
    keys: list[str]
    bytes: int
    processing: int
    """How many of its keys are still processing."""
    soft_pins: int
    """How many of its keys are soft-pinned (such a leaf waits for eviction's second pass)."""
    eviction_score: float | None
    """The node's score in its shard's leaf index (ms; inf = not evictable), None if not a leaf."""

    @property
    def is_shell(self) -> bool:
        """A node with no registered keys, kept only because it has children."""
        return not self.keys

    @property
    def is_leaf(self) -> bool:
        return bool(self.keys) and not self.children


@dataclass(frozen=True)
class Usage:
    """How full the namespace is."""

    used_bytes: int
    capacity_bytes: int
    objects: int
    nodes: int

    @property
    def ratio(self) -> float:
        """used/capacity; 0.0 when capacity is unlimited."""
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0
