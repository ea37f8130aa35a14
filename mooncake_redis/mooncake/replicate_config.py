"""`ReplicateConfig` and `SoftPinAction`: Mooncake's per-put options, as mooncake.store
0.3.13.post1 names them (`soft_pin_action`, `soft_pin_ttl_ms`), with 0.3.14's fields
(`session_ids`, `residency_affinity_ids`, `preferred_hca_names`,
`per_key_preferred_hca_names`), also under 0.3.12's name (`with_soft_pin`), plus this
project's `parent_block_hash` (the RFC's path A).

Attributes are typed as Mooncake's pybind class types them (checks.py): assigning a value
of the wrong type raises TypeError there and here (`soft_pin_ttl_ms = 1 << 64`, as a
uint64 field). Values are checked when a put uses the
config; a bad one gets INVALID_PARAMS (config_error).
"""

from __future__ import annotations

from typing import Any

from .checks import (
    boolean,
    instance_or_default,
    optional_text_lists,
    optional_texts,
    optional_uint64,
    text,
    texts,
    uint64,
)
from .records import MooncakeEnum, ObjectDataType

MAX_SOFT_PIN_TTL_MS = 24 * 3600 * 1000
"""Mooncake master's default max_kv_soft_pin_ttl: longer requested TTLs are refused."""


class SoftPinAction(MooncakeEnum):
    """What a put does to the object's soft pin (Mooncake's SoftPinAction)."""

    PRESERVE = 0
    """No soft pin for a new object; an upsert keeps the old object's pin."""
    ENABLE = 1
    DISABLE = 2


def _action(value: Any, what: str) -> SoftPinAction:
    if not isinstance(value, SoftPinAction):
        raise TypeError(f"{what} must be a SoftPinAction, got {value!r}")
    return value


def _data_type(value: Any, what: str) -> ObjectDataType:
    if not isinstance(value, ObjectDataType):
        raise TypeError(f"{what} must be an ObjectDataType, got {value!r}")
    return value


def _optional_text(value: Any, what: str) -> str | None:
    return None if value is None else text(value, what)


_FIELDS: dict[str, tuple[Any, Any]] = {
    # name: (default, converter that raises TypeError as pybind does)
    "replica_num": (1, uint64),
    "soft_pin_action": (SoftPinAction.PRESERVE, _action),
    "soft_pin_ttl_ms": (None, optional_uint64),
    "with_hard_pin": (False, boolean),
    "preferred_segment": ("", text),
    "preferred_segments": ([], texts),
    "parent_block_hash": (None, _optional_text),
    # accepted so code that sets them runs; there is no NVMe-oF, DFS, node grouping,
    # transfer session, residency or NIC choice here (bytes go through files)
    "nof_replica_num": (0, uint64),
    "dfs_replica_num": (0, uint64),
    "preferred_nof_segments": ([], texts),
    "prefer_alloc_in_same_node": (False, boolean),
    "group_ids": (None, optional_texts),
    "data_type": (ObjectDataType.UNKNOWN, _data_type),
    "session_ids": (None, optional_texts),  # 0.3.14
    "residency_affinity_ids": (None, optional_texts),  # 0.3.14
    "preferred_hca_names": (None, optional_texts),  # 0.3.14
    "per_key_preferred_hca_names": (None, optional_text_lists),  # 0.3.14
}


class ReplicateConfig:
    """How many replicas a put makes, where, and how the object is pinned.

    replica_num            replicas on distinct segments (best effort: fewer if fewer
                           segments have room, as Mooncake's master allocates)
    preferred_segment(s)   segments tried first, in order (a segment is a store's
                           get_hostname())
    soft_pin_action        ENABLE soft-pins the object: eviction takes it only after
                           unpinned objects, until soft_pin_ttl_ms after its last read
    soft_pin_ttl_ms        None: the namespace's soft_pin_ttl_ms; 0: no soft pin
    with_hard_pin          never evicted (removed only by remove)
    parent_block_hash      the page's parent page: the store links the object's node
                           under it (radix tree, leaf-first eviction)
    """

    def __init__(self) -> None:
        for name, (default, _) in _FIELDS.items():
            object.__setattr__(self, name, list(default) if isinstance(default, list)
                               else default)

    replica_num: int
    soft_pin_action: SoftPinAction
    soft_pin_ttl_ms: int | None
    with_hard_pin: bool
    preferred_segment: str
    preferred_segments: list[str]
    parent_block_hash: str | None
    nof_replica_num: int
    dfs_replica_num: int
    preferred_nof_segments: list[str]
    prefer_alloc_in_same_node: bool
    group_ids: list[str] | None
    data_type: ObjectDataType
    session_ids: list[str] | None
    residency_affinity_ids: list[str] | None
    preferred_hca_names: list[str] | None
    per_key_preferred_hca_names: list[list[str]] | None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "with_soft_pin":  # a property
            object.__setattr__(self, name, value)
        elif name not in _FIELDS:
            raise AttributeError(f"'ReplicateConfig' object has no attribute {name!r}")
        else:
            object.__setattr__(self, name, _FIELDS[name][1](value, name))

    @property
    def with_soft_pin(self) -> bool:
        """Mooncake 0.3.12's name: True is soft_pin_action ENABLE."""
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value: bool) -> None:
        self.soft_pin_action = SoftPinAction.ENABLE if boolean(value) else \
            SoftPinAction.PRESERVE

    def __str__(self) -> str:
        ttl = "default" if self.soft_pin_ttl_ms is None else self.soft_pin_ttl_ms
        return (f"ReplicateConfig: {{ replica_num: {self.replica_num}, soft_pin_action: "
                f"{self.soft_pin_action.name}, soft_pin_ttl_ms: {ttl}, with_hard_pin: "
                f"{int(self.with_hard_pin)}, preferred_segments: {self.segments()}, "
                f"parent_block_hash: {self.parent_block_hash or ''} }}")

    def segments(self) -> list[str]:
        """The preferred segments, in order (preferred_segments, then preferred_segment)."""
        preferred = [name for name in self.preferred_segments if name]
        if self.preferred_segment and self.preferred_segment not in preferred:
            preferred.append(self.preferred_segment)
        return preferred

    def soft_pinned(self) -> bool:
        """Whether a put with this config soft-pins its object."""
        return self.soft_pin_action == SoftPinAction.ENABLE and self.soft_pin_ttl_ms != 0

    def config_error(self, namespace_ttl_ms: int) -> str | None:
        """Why a put must refuse this config (INVALID_PARAMS), or None."""
        if self.replica_num == 0:
            return "replica_num must be at least 1"
        if self.soft_pin_ttl_ms is not None:
            if self.soft_pin_action != SoftPinAction.ENABLE:
                return "soft_pin_ttl_ms is valid only with soft_pin_action ENABLE"
            if self.soft_pin_ttl_ms > MAX_SOFT_PIN_TTL_MS:
                return f"soft_pin_ttl_ms exceeds the maximum of {MAX_SOFT_PIN_TTL_MS} ms"
            if self.soft_pin_ttl_ms not in (0, namespace_ttl_ms):
                return (f"soft_pin_ttl_ms={self.soft_pin_ttl_ms} differs from the namespace's "
                        f"soft_pin_ttl_ms={namespace_ttl_ms}: a TTL is per namespace here "
                        "(mooncake-redis config set soft_pin_ttl_ms=...)")
        if self.dfs_replica_num or self.nof_replica_num:
            return "no NVMe-oF or DFS replicas here: set nof_replica_num and " \
                   "dfs_replica_num to 0"
        return None


def check_config(config: Any) -> ReplicateConfig:
    return instance_or_default(config, ReplicateConfig, "config")
