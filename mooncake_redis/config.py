"""Configuration: defaults, validation, the environment override and the copy in Redis."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigurationError
from .prefix import load_extractor

ENV_PREFIX = "MOONCAKE_REDIS_"
"""Every option can be set from the environment as MOONCAKE_REDIS_<OPTION IN CAPITALS>."""

ENV_URL = ENV_PREFIX + "URL"
DEFAULT_URL = "memory://"
"""The in-process default: fakeredis with Lua, no server needed, gone with the process."""


@dataclass(frozen=True)
class Config:
    """The options of one namespace. Every client of a namespace reads them from
    `<ns>:config`, so they all agree on capacity and eviction."""

    capacity_bytes: int = 0
    """Bytes the KV-cache pool holds; put_start is refused past it. 0 = unlimited."""

    high_watermark: float = 0.90
    """Eviction starts when used/capacity exceeds this (Mooncake's default)."""

    eviction_ratio: float = 0.05
    """An eviction job frees down to high_watermark - eviction_ratio (Mooncake's default)."""

    lease_ttl_ms: int = 10_000
    """How long a get holds an object against eviction and removal."""

    enable_radix_tree: bool = True
    """False gives a plain object store with lease-ordered eviction (the RFC's switch)."""

    prefix_extractor: str = "rfc"
    """`rfc`, or `package.module:function` mapping an object key to its prefix hash."""

    probe_extends_lease: bool = False
    """Whether is_exist/batch_is_exist grant leases (off: Mooncake issue #2187)."""

    allow_soft_pin_eviction: bool = True
    """Whether eviction may take soft-pinned objects in its second pass."""

    allow_path_breaking_eviction: bool = False
    """Whether fallback eviction may evict a node that still has children (the RFC's
    last resort; it leaves those children unreachable by match_prefix)."""

    queue_url: str = ""
    """Redis URL of the RQ queue for eviction jobs ("" = no queue: call evict() yourself).
    RQ needs a plain Redis, so this is its own setting even when the index is on Cluster."""

    eviction_lock_ttl_ms: int = 30_000
    """The one-job-per-namespace lock expires this long after its worker's last round, so a
    killed worker blocks eviction no longer than this."""

    max_rounds_per_job: int = 16
    """Eviction rounds one job runs before it hands over to a follow-up job."""

    leaves_per_round: int = 256
    """How many leaves one eviction round takes at most."""

    max_depth: int = 100_000
    """Bound on every walk up or down the tree (cycle checks, cascades, subtree reads)."""

    max_key_length: int = 4096
    """Longest object key or prefix hash accepted."""

    max_object_size: int = 1 << 50
    """Largest object size accepted, in bytes."""

    cluster_retries: int = 6
    """Redis Cluster: how many times a batch re-sends calls that did not run (MOVED, ASK,
    TRYAGAIN, CLUSTERDOWN, no connection) or that ran but are safe to run again (lost
    replies of reads, link_child, unlink_child, register_node, dry runs), refreshing the
    slot map before each. A call that may have run and is not safe to re-run (put_start,
    put_end, deletions, reserve_bytes) is never re-sent: the batch raises OutcomeUnknown."""

    cluster_retry_backoff_ms: int = 100
    """Pause before the first such retry; it doubles per retry (up to 2 s), so the default
    6 retries wait about 6 s in all: enough for a failover with cluster-node-timeout 1-2 s."""

    wait_replicas: int = 0
    """After a batch's writes on a node, WAIT for this many replicas to acknowledge them
    (0 = off). A batch that gets fewer raises ReplicationIncomplete. It narrows, but does
    not close, the window in which a failover loses acknowledged writes; each write
    round trip waits for a replica too."""

    wait_timeout_ms: int = 1000
    """How long WAIT waits for wait_replicas acknowledgements (0 would wait forever)."""

    config_refresh_seconds: float = 5.0
    """How often a client re-reads `<ns>:config` to pick up changes made by others."""

    def __post_init__(self) -> None:
        _require(self.capacity_bytes >= 0, "capacity_bytes must be >= 0 (0 = unlimited)")
        _require(0 < self.high_watermark <= 1, "high_watermark must be in (0, 1]")
        _require(0 <= self.eviction_ratio < self.high_watermark,
                 "eviction_ratio must be in [0, high_watermark)")
        _require(self.lease_ttl_ms >= 0, "lease_ttl_ms must be >= 0")
        for name in ("max_rounds_per_job", "leaves_per_round", "max_depth", "eviction_lock_ttl_ms",
                     "max_key_length", "max_object_size"):
            _require(getattr(self, name) >= 1, f"{name} must be >= 1")
        for name in ("cluster_retries", "cluster_retry_backoff_ms", "wait_replicas"):
            _require(getattr(self, name) >= 0, f"{name} must be >= 0")
        _require(self.wait_timeout_ms >= 1, "wait_timeout_ms must be >= 1 (WAIT 0 blocks forever)")
        _require(self.config_refresh_seconds >= 0, "config_refresh_seconds must be >= 0")
        load_extractor(self.prefix_extractor)

    @property
    def eviction_target_ratio(self) -> float:
        return self.high_watermark - self.eviction_ratio

    def to_redis(self) -> dict[str, str]:
        return {f.name: _encode(getattr(self, f.name)) for f in fields(self)}

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **_coerce_all(changes))

    @classmethod
    def from_redis(cls, stored: Mapping[str, str]) -> Config:
        known = {f.name for f in fields(cls)}
        return cls(**_coerce_all({k: v for k, v in stored.items() if k in known}))


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options set as MOONCAKE_REDIS_<NAME> in the environment (URL excluded)."""
    environ = os.environ if environ is None else environ
    names = {f.name for f in fields(Config)}
    found = {}
    for variable, value in environ.items():
        if variable.startswith(ENV_PREFIX) and variable != ENV_URL:
            name = variable[len(ENV_PREFIX):].lower()
            if name not in names:
                raise ConfigurationError(
                    f"{variable} is not an option; options: {', '.join(sorted(names))}"
                )
            found[name] = value
    return found


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigurationError(message)


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


_TYPES = {f.name: f.type for f in fields(Config)}


def _coerce_all(values: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(values) - set(_TYPES)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(sorted(unknown))}; options: {', '.join(sorted(_TYPES))}"
        )
    return {name: _coerce(name, value) for name, value in values.items()}


def _coerce(name: str, value: Any) -> Any:
    kind = _TYPES[name]
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    except ValueError:
        raise ConfigurationError(f"option {name} expects {kind}, got {value!r}") from None
