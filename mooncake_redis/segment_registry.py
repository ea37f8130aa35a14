"""The segment registry's entries as Python reads them (lua/segment.lua writes them), and
what the namespace's capacity is while segments are registered (segments.py)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InvalidArgument

log = logging.getLogger(__name__)

SEGMENT_NAME = re.compile(r"[A-Za-z0-9_.:@/+=\[\]-]{1,256}")
"""Segment names: host:port, paths, UUIDs; no ',', '|', '%' or spaces, so the packed
values and the stats fields hold them as they are."""

MOUNTED, UNMOUNTING = "mounted", "unmounting"
_ENTRY = re.compile(r"([a-z]+),(\d+),(\d+),(\d+),(.*)")
DONE = "x"
"""A finished SCAN cursor in an unmount's stored progress."""


@dataclass(frozen=True)
class Segment:
    """One registered segment."""

    name: str
    capacity_bytes: int
    state: str
    """"mounted" or "unmounting" (its sweep not finished yet)."""
    mounted_ms: int
    heartbeat_ms: int
    """Redis time of its owner's last heartbeat (or of the mount)."""
    used_bytes: int = 0
    """Bytes of replicas on it (the sum of the shards' counters); filled by usage()."""

    @property
    def mounted(self) -> bool:
        return self.state == MOUNTED


def check_name(name: object) -> str:
    if not isinstance(name, str) or not SEGMENT_NAME.fullmatch(name):
        raise InvalidArgument(f"segment name {name!r} must be 1-256 characters of letters, "
                              "digits and _ . : @ / + = [ ] -")
    return name


def parse_registry(raw: Mapping[str, str]) -> dict[str, Segment]:
    """The registry hash, decoded; an entry this version cannot read is skipped (logged)."""
    segments = {}
    for name, value in raw.items():
        match = _ENTRY.fullmatch(value)
        if match is None or match.group(1) not in (MOUNTED, UNMOUNTING):
            log.warning("ignoring unreadable segment registry entry %r: %r", name, value)
            continue
        state, capacity, mounted_ms, heartbeat_ms, _ = match.groups()
        segments[name] = Segment(name, int(capacity), state, int(mounted_ms), int(heartbeat_ms))
    return segments


def segment_capacity(segments: Mapping[str, Segment]) -> int | None:
    """The namespace's capacity while segments are registered: the sum of the mounted ones
    (at least 1 byte: with every segment unmounting there is no room, not unlimited room);
    None without segments (capacity_bytes applies)."""
    if not segments:
        return None
    return max(1, sum(s.capacity_bytes for s in segments.values() if s.mounted))


