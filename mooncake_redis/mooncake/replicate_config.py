"""`ReplicateConfig` and `SoftPinAction`: Mooncake's per-put options, as mooncake.store
0.3.13.post1 names them (`soft_pin_action`, `soft_pin_ttl_ms`), also under 0.3.12's name
(`with_soft_pin`), plus this project's `parent_block_hash` (the RFC's path A).

Attributes are typed as Mooncake's pybind class types them: assigning a value of the
wrong type raises TypeError there and here. Values are checked when a put uses the
config; a bad one gets INVALID_PARAMS (config_error).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

MAX_SOFT_PIN_TTL_MS = 24 * 3600 * 1000
"""Mooncake master's default max_kv_soft_pin_ttl: longer requested TTLs are refused."""


class SoftPinAction(IntEnum):
    """What a put does to the object's soft pin (Mooncake's SoftPinAction)."""

    PRESERVE = 0
    """No soft pin for a new object; an upsert keeps the old object's pin."""
    ENABLE = 1
    DISABLE = 2


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"expected an int >= 0, got {value!r}")
    return int(value)


def _optional_ttl(value: Any) -> int | None:
    return None if value is None else _non_negative_int(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {value!r}")
    return value


def _texts(value: Any) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(item, str) for item in value):
        raise TypeError(f"expected a list of str, got {value!r}")
    return list(value)


def _optional_texts(value: Any) -> list[str] | None:
    return None if value is None else _texts(value)


def _action(value: Any) -> SoftPinAction:
    if not isinstance(value, SoftPinAction):
        raise TypeError(f"expected a SoftPinAction, got {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


_FIELDS: dict[str, tuple[Any, Any]] = {
    # name: (default, converter that raises TypeError as pybind does)
    "replica_num": (1, _non_negative_int),
    "soft_pin_action": (SoftPinAction.PRESERVE, _action),
    "soft_pin_ttl_ms": (None, _optional_ttl),
    "with_hard_pin": (False, _flag),
    "preferred_segment": ("", _text),
    "preferred_segments": ([], _texts),
    "parent_block_hash": (None, _optional_text),
    # accepted so code that sets them runs; there is no NVMe-oF, DFS or node grouping here
    "nof_replica_num": (0, _non_negative_int),
    "dfs_replica_num": (0, _non_negative_int),
    "preferred_nof_segments": ([], _texts),
    "prefer_alloc_in_same_node": (False, _flag),
    "group_ids": (None, _optional_texts),
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

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "with_soft_pin":  # a property
            object.__setattr__(self, name, value)
        elif name not in _FIELDS:
            raise AttributeError(f"'ReplicateConfig' object has no attribute {name!r}")
        else:
            object.__setattr__(self, name, _FIELDS[name][1](value))

    @property
    def with_soft_pin(self) -> bool:
        """Mooncake 0.3.12's name: True is soft_pin_action ENABLE."""
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value: bool) -> None:
        self.soft_pin_action = SoftPinAction.ENABLE if _flag(value) else SoftPinAction.PRESERVE

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
