"""Namespace settings (shared through `<ns>:settings`) and client options (per process).

Settings are data: numbers, flags and the NAME of a prefix extractor, each validated
against its range; this module defines them, their defaults, ranges, environment
variables and stored form, and writes nothing. Only `set_config` / `reset_config`
(configuration.py) change a stored setting. Opening an Index (Context.open) fills in
settings not stored yet from its arguments and the environment, and reports (warning, or
error with strict=True) where they differ from what is stored: the stored value wins.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ConfigurationError
from .prefix import LEGACY_SHARD_COUNT, NEW_SHARD_COUNT, SHARD_COUNTS, extractor_named

log = logging.getLogger(__name__)

ENV_PREFIX = "MOONCAKE_REDIS_"
ENV_URL = ENV_PREFIX + "URL"
ENV_NAMESPACE = ENV_PREFIX + "NAMESPACE"
DEFAULT_URL = "memory://"
"""The in-process default: fakeredis with Lua, no server needed, gone with the process."""
DEFAULT_NAMESPACE = "mc"


@dataclass(frozen=True)
class Settings:
    """The settings of one namespace; every client and worker of it reads the same."""

    capacity_bytes: int = 0
    """Bytes the KV-cache pool holds; put_start is refused past it (per shard, see
    admission.py). 0 = unlimited. Human sizes are accepted: "64GiB", "512MB"."""

    high_watermark: float = 0.90
    """Eviction starts when used/capacity passes this (Mooncake's default)."""

    eviction_ratio: float = 0.05
    """An eviction job frees down to high_watermark - eviction_ratio (Mooncake's default)."""

    lease_ttl_ms: int = 10_000
    """How long a get holds an object against eviction and removal."""

    enable_radix_tree: bool = True
    """False: no parent links, every node is a leaf, eviction is lease-ordered per node
    (the RFC's switch). Turning it off on a non-empty namespace is refused."""

    prefix_extractor: str = "rfc"
    """The NAME of the rule mapping an object key to its prefix hash: a shipped one
    (prefix.py) or one registered in this process. Changing it on a non-empty namespace
    is refused."""

    probe_extends_lease: bool = False
    """Whether is_exist/batch_is_exist grant leases (off: Mooncake issue #2187)."""

    allow_soft_pin_eviction: bool = True
    """Whether eviction may take soft-pinned leaves in its second pass."""

    allow_path_breaking_eviction: bool = False
    """Whether eviction may, as a last resort, take the objects of nodes that still have
    children (they stay as shells; match_prefix stops there)."""

    put_start_discard_timeout_ms: int = 30_000
    """A put_start of a key whose unfinished put_start is older than this takes it over
    (Mooncake's put_start_discard_timeout_sec)."""

    put_start_release_timeout_ms: int = 600_000
    """An unfinished object older than this becomes evictable and its bytes reclaimable
    (Mooncake's put_start_release_timeout_sec)."""

    put_wait_ms: int = 0
    """How long put_start/batch_put_start wait, when items are refused for space, for
    eviction to make room before they report NoSpace (their wait_ms argument overrides
    it). 0 = refuse at once. Waiting holds the caller (docs/ARCHITECTURE.md, admission)."""

    eviction_lock_ttl_ms: int = 30_000
    """The one-job-per-namespace lock expires this long after its job's last round, so a
    killed worker blocks eviction no longer than this."""

    max_rounds_per_job: int = 16
    """Eviction rounds one job runs before it hands over to a follow-up job."""

    leaves_per_round: int = 1024
    """Leaves one eviction round takes from the heap at most (smaller: closer to an exact
    LRU order, but fewer leaves a script call; parents that the round leaves as leaves no
    younger than its choice go in the same round). 1024 puts about 64 leaves in a call at
    16 shards, half the Redis CPU per evicted object of 64 (docs/BENCHMARKS.md section
    11), for 0.2 points of usable hit rate on the trace (docs/SIMULATION.md)."""

    max_depth: int = 100_000
    """Bound on every walk up or down the tree (cycle checks, cascades, subtree reads)."""

    max_key_length: int = 4096
    """Longest object key or prefix hash accepted."""

    max_object_size: int = 1 << 50
    """Largest object size accepted, in bytes."""

    link_epoch_horizon_ms: int = 60_000
    """A link's second step is refused (and retried) when its epoch is older than this;
    fences older than this are dropped. Bounds the memory that fences take."""

    resolver_grace_ms: int = 10_000
    """The resolver settles pending links and unfinished unlinks older than this."""

    events_max_len: int = 128
    """Events kept per shard stream (approximate, MAXLEN ~); 0 = no events. The
    shard_count streams together hold about shard_count x this many entries (~270 B
    each); a consumer that
    reads slower than that must raise it (docs/ARCHITECTURE.md, events)."""

    soft_pin_ttl_ms: int = 1_800_000
    """A soft pin lapses this long after the object's read lease ended (its last get, or
    its put_end): eviction then treats it as unpinned (Mooncake's soft_pin_ttl, 30 min by
    default). 0 = soft pins never lapse."""

    segment_heartbeat_timeout_ms: int = 0
    """A mounted segment whose owner sent no segment_heartbeat for this long is unmounted
    by the monitor; 0 = never (segments stay until unmount_segment)."""

    shard_count: int = NEW_SHARD_COUNT
    """How many shards the namespace's keys spread over (a power of two, 1-256), fixed
    when the namespace is created and stored then, by its first client; a namespace that
    holds nodes but no stored count was created before this setting existed and has 256,
    its layout (its next writable client stores that).
    Fewer shards carry more of a batch per script call; on a cluster they are what
    spreads a namespace over masters (docs/CLUSTER.md)."""

    @property
    def eviction_target_ratio(self) -> float:
        return self.high_watermark - self.eviction_ratio

    def to_redis(self) -> dict[str, str]:
        return {f.name: encode(getattr(self, f.name)) for f in fields(self)}


_RANGES: dict[str, tuple[float, float]] = {
    "capacity_bytes": (0, 1 << 62),
    "high_watermark": (0.01, 1.0),
    "eviction_ratio": (0.0, 0.99),
    "lease_ttl_ms": (0, 24 * 3600 * 1000),
    "put_start_discard_timeout_ms": (0, 24 * 3600 * 1000),
    "put_start_release_timeout_ms": (1, 7 * 24 * 3600 * 1000),
    "put_wait_ms": (0, 60_000),
    "eviction_lock_ttl_ms": (1000, 3600 * 1000),
    "max_rounds_per_job": (1, 100_000),
    "leaves_per_round": (1, 10_000),
    "max_depth": (16, 10_000_000),
    "max_key_length": (64, 65_536),
    "max_object_size": (1, 1 << 62),
    "link_epoch_horizon_ms": (1000, 3600 * 1000),
    "resolver_grace_ms": (0, 3600 * 1000),
    "events_max_len": (0, 10_000_000),
    "soft_pin_ttl_ms": (0, 30 * 24 * 3600 * 1000),
    "segment_heartbeat_timeout_ms": (0, 24 * 3600 * 1000),
    "shard_count": (1, LEGACY_SHARD_COUNT),
}


@dataclass(frozen=True)
class ClientOptions:
    """Options of one process: how it talks to Redis. Never stored in Redis."""

    cluster_retries: int = 6
    """Redis Cluster and connection loss: how many times a batch re-sends calls that did
    not run (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, no connection) or that are safe to run
    again (reads, and writes carrying this client's writer token)."""

    cluster_retry_backoff_ms: int = 100
    """Pause before the first retry; it doubles per retry (up to 2 s)."""

    wait_acks: int = 0
    """After writes on a node, WAIT until this many Redis replicas acknowledged them
    (0 = off); fewer raise ReplicationIncomplete. Was `wait_replicas` (still accepted, with
    a DeprecationWarning): "replica" now means only Mooncake's data replicas."""

    wait_timeout_ms: int = 1000
    """How long WAIT waits for the wait_acks acknowledgements."""

    settings_refresh_seconds: float = 5.0
    """How often a client re-reads `<ns>:settings` to pick up changes made by others."""

    queue_url: str = ""
    """Redis URL of the RQ queue for eviction jobs ("" = none: run evict() yourself, or a
    monitor). Also MOONCAKE_REDIS_QUEUE_URL. Kept in this process only: never written to
    Redis, job arguments or output."""


_OPTION_RANGES: dict[str, tuple[float, float]] = {
    "cluster_retries": (0, 100),
    "cluster_retry_backoff_ms": (0, 60_000),
    "wait_acks": (0, 100),
    "wait_timeout_ms": (1, 600_000),
    "settings_refresh_seconds": (0, 3600),
}

SETTING_NAMES = tuple(f.name for f in fields(Settings))
OPTION_NAMES = tuple(f.name for f in fields(ClientOptions))
_TYPES: dict[str, str] = {f.name: str(f.type) for f in (*fields(Settings), *fields(ClientOptions))}
_RANGES_ALL = {**_RANGES, **_OPTION_RANGES}

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*", re.I)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str) -> int:
    """Bytes from "1048576", "64GiB" (powers of 1024) or "512MB" (powers of 1000)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(text)
    number, unit, binary = match.groups()
    base = 1024 if binary or not unit else 1000
    value = float(number) * base ** _SIZE_POWERS[unit.lower()]
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


def encode(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def coerce(name: str, value: Any) -> Any:
    """A setting or option value of the right type and within its range."""
    if name not in _TYPES:
        raise ConfigurationError(
            f"unknown setting {name!r}; settings: {', '.join(SETTING_NAMES)}; "
            f"client options: {', '.join(OPTION_NAMES)}")
    kind = _TYPES[name]
    try:
        result = _coerce_type(name, kind, value)
    except (ValueError, TypeError, OverflowError):
        raise ConfigurationError(f"setting {name} expects {kind}, got {value!r}") from None
    bounds = _RANGES_ALL.get(name)
    if bounds is not None and not bounds[0] <= result <= bounds[1]:
        raise ConfigurationError(f"setting {name}={result!r} is outside [{bounds[0]:g}, "
                                 f"{bounds[1]:g}]")
    if name == "prefix_extractor":
        extractor_named(result)
    if name == "shard_count" and result not in SHARD_COUNTS:
        raise ConfigurationError(f"setting shard_count={result!r} must be a power of two "
                                 f"from 1 to {LEGACY_SHARD_COUNT}")
    return result


def _coerce_type(name: str, kind: str, value: Any) -> Any:
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
        if isinstance(value, str):
            return parse_size(value) if name.endswith("_bytes") or name.endswith("_size") \
                else int(value.strip())
        return int(value)
    if kind == "float":
        if isinstance(value, bool):
            raise ValueError(value)
        result = float(value)
        if result != result or result in (float("inf"), float("-inf")):
            raise ValueError(value)
        return result
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def check_settings(settings: Settings) -> Settings:
    """Cross-setting rules."""
    if settings.eviction_ratio >= settings.high_watermark:
        raise ConfigurationError(
            f"eviction_ratio ({settings.eviction_ratio}) must be below high_watermark "
            f"({settings.high_watermark})")
    return settings


def read_stored(values: Mapping[str, str], fallback: Settings | None = None
                ) -> tuple[Settings, dict[str, str]]:
    """The settings a namespace's stored values give, and the stored values that cannot
    be read (a wrong type, out of range, an extractor this process does not know, or a
    pair that breaks a cross-setting rule): each of those takes its value in `fallback`
    (what this client read before; default: the defaults), so one bad value shuts nobody
    out. Unknown stored names are kept out (a newer version may have written them)."""
    known: dict[str, Any] = {}
    unreadable: dict[str, str] = {}
    for name, value in values.items():
        if name not in SETTING_NAMES:
            continue
        try:
            known[name] = coerce(name, value)
        except ConfigurationError:
            unreadable[name] = value
    try:
        return _with_fallback(known, unreadable, fallback), unreadable
    except ConfigurationError:  # the watermark pair: both ends fall back
        for name in ("high_watermark", "eviction_ratio"):
            if name in known:
                unreadable[name] = values[name]
                del known[name]
        return _with_fallback(known, unreadable, fallback), unreadable


def _with_fallback(known: Mapping[str, Any], unreadable: Mapping[str, str],
                   fallback: Settings | None) -> Settings:
    """The defaults with the values read, and the fallback's values of unreadable ones."""
    kept = {name: getattr(fallback, name) for name in unreadable} if fallback else {}
    return check_settings(dataclasses.replace(Settings(), **kept, **known))


def settings_from(values: Mapping[str, Any], base: Settings | None = None) -> Settings:
    """`base` (default: the defaults) with `values` applied; unknown stored names are kept
    out (a newer version may have written them)."""
    known = {k: coerce(k, v) for k, v in values.items() if k in SETTING_NAMES}
    return check_settings(dataclasses.replace(base or Settings(), **known))


def options_from(values: Mapping[str, Any]) -> ClientOptions:
    return ClientOptions(**{k: coerce(k, v) for k, v in values.items()})


OPTION_ALIASES: dict[str, str] = {"wait_replicas": "wait_acks"}
"""Old option names still accepted, with a DeprecationWarning: old name -> new name."""


def _renamed(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`values` with old option names replaced by their new ones; both given is an error."""
    renamed = dict(values)
    for old, new in OPTION_ALIASES.items():
        if old not in renamed:
            continue
        if new in renamed:
            raise ConfigurationError(f"{old} and {new} given as {source}s: {old} is the old "
                                     f"name of {new}; give only {new}")
        warnings.warn(f"{old} is now {new}; the old {source} name will be removed",
                      DeprecationWarning, stacklevel=4)
        renamed[new] = renamed.pop(old)
    return renamed


def split_arguments(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword arguments -> (settings, client options); anything else is an error."""
    settings, options = {}, {}
    for name, value in _renamed(arguments, "keyword argument").items():
        if name in SETTING_NAMES:
            settings[name] = coerce(name, value)
        elif name in OPTION_NAMES:
            options[name] = coerce(name, value)
        else:
            coerce(name, value)  # raises, naming the known settings
    return settings, options


def from_environment(environ: Mapping[str, str] | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """MOONCAKE_REDIS_<NAME> for every setting and client option. Other variables with
    the prefix (an orchestrator's MOONCAKE_REDIS_PORT, say) are ignored, with a debug log."""
    environ = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    options: dict[str, Any] = {}
    named = {variable[len(ENV_PREFIX):].lower(): (variable, value)
             for variable, value in environ.items()
             if variable.startswith(ENV_PREFIX) and variable not in (ENV_URL, ENV_NAMESPACE)}
    for name, (variable, value) in _renamed(named, "environment variable").items():
        if name not in SETTING_NAMES and name not in OPTION_NAMES:
            log.debug("ignoring %s: not a mooncake-redis setting", variable)
            continue
        try:
            (settings if name in SETTING_NAMES else options)[name] = coerce(name, value)
        except ConfigurationError as error:  # say where the value came from
            raise ConfigurationError(f"environment variable {variable}: {error}") from None
    return settings, options
