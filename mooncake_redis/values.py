"""The fields of a node hash and the packed object value, as Python reads them.

lua/_lib.lua writes them; this module is the reader's half of the same format, kept
short because every byte of a node hash is paid once per node (docs/ARCHITECTURE.md).

An object value is `1<state>,<size>,<time>,<pins>,<token>` and then, for each replica,
`|<segment>,<location>,<medium>`:

- `1` is the format version; `<state>` is `p` (processing) or `c` (complete);
- `<time>` is the put_start time while processing and the lease end once complete
  (milliseconds of Redis time);
- `<pins>` is 0, 1 (soft), 2 (hard) or 3 (both);
- `<token>` is the writer token of the put_start that made it;
- a replica names its segment, where the bytes are in it (an address or offset, a path or
  a URI: the data plane's words) and its medium (`m` memory, `d` disk); segment and
  location are escaped (`%`, `,` and `|` as `%25`, `%2C`, `%7C`) so scripts can split the
  value and compare segment names without decoding them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import ScriptError
from .models import Replica
from .prefix import is_digest

OBJECT_PREFIX = "o:"
CHILD_PREFIX = "c:"
"""Children whose hash is not a 64-hex digest are stored as c:<hash>; a 64-hex child is
stored under its bare hash, which keeps the field at Redis's 64-byte listpack limit."""

COUNTERS = ("nc", "no", "np", "ps", "psn", "nh", "ns", "b", "lm")
"""Node counters (absent = 0): children, objects, processing objects, latest processing
start and how many processing objects share it, hard pins, soft pins, bytes, and the
latest lease end of complete objects."""

NODE_FIELDS = ("p", "pe", *COUNTERS)
"""Every non-child, non-object field."""

SHELL_MARKER = "?"
"""A shell made by a link whose children all came from one batch holds `?<batch id>` in
`p` instead of a parent (lua/_lib.lua): it has no parent yet."""

SOFT_PIN, HARD_PIN = 1, 2
STATE_NAMES = {"p": "processing", "c": "complete"}

_VALUE = re.compile(r"1([pc]),(\d+),(\d+),(\d),([^|]*)(.*)", re.S)
_ESCAPES = {"%": "%25", ",": "%2C", "|": "%7C"}
_UNESCAPE = re.compile(r"%(25|2C|7C)")
MEDIA = {"memory": "m", "disk": "d"}
MEDIUM_NAMES = {code: name for name, code in MEDIA.items()}


def to_int(value: object, default: int = 0) -> int:
    """An integer read from Redis, or `default` for a missing or malformed value (anyone
    who can write the namespace can write anything: readers must not crash on it; fsck
    reports what does not add up)."""
    if value is None:
        return default
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return int(number) if number == number and abs(number) < 2 ** 63 else default


def child_field(child_hash: str) -> str:
    return child_hash if is_digest(child_hash) else CHILD_PREFIX + child_hash


def child_field_argument(child_hash: str) -> str:
    """How scripts are told a child's field: '' when it is the bare hash (the usual case,
    sparing Lua a pattern scan), else the c:<hash> name."""
    return "" if is_digest(child_hash) else CHILD_PREFIX + child_hash


def child_of_field(field: str) -> str | None:
    """The child hash a node field names, or None if the field is not a child."""
    if field.startswith(CHILD_PREFIX):
        return field[len(CHILD_PREFIX):]
    if is_digest(field):
        return field
    return None


def object_field(suffix: str) -> str:
    return OBJECT_PREFIX + suffix


def escape(text: str) -> str:
    """A segment name or location as the packed value holds it (no ',' or '|')."""
    return "".join(_ESCAPES.get(char, char) for char in text)


def unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def pack_replicas(replicas: Sequence[Replica]) -> str:
    """The replicas' part of a packed value ('' for none)."""
    return "".join(f"|{escape(r.segment)},{escape(r.location)},{MEDIA[r.medium]}"
                   for r in replicas)


def decode_replicas(packed: str, size: int) -> tuple[Replica, ...]:
    """The replicas a packed value (or an event's `replicas` field) names; each holds the
    whole object, so each has the object's size. Parts this version cannot read are
    skipped."""
    replicas = []
    for part in packed.split("|")[1:]:
        fields = part.split(",")
        if len(fields) == 3 and fields[2] in MEDIUM_NAMES:
            replicas.append(Replica(unescape(fields[0]), unescape(fields[1]),
                                    MEDIUM_NAMES[fields[2]], size))
    return tuple(replicas)


@dataclass(frozen=True)
class StoredObject:
    """One object's packed metadata, decoded."""

    state: str
    size: int
    time_ms: int
    pins: int
    token: str
    replicas: tuple[Replica, ...] = ()

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def charged(self) -> int:
        """The bytes it occupies: its size once per replica, or once without replicas."""
        return self.size * max(1, len(self.replicas))


def unpack_value(value: str) -> tuple[str, int, int, int, str, str] | None:
    """A packed value's parts: state letter (`p`/`c`), size, time, pins, token and the
    replicas' tail ('' for none); None for a value this version cannot read (a newer
    format)."""
    match = _VALUE.fullmatch(value)
    if match is None:
        return None
    state, size, time_ms, pins, token, replicas = match.groups()
    return state, int(size), int(time_ms), int(pins), token, replicas


def decode_object(value: str) -> StoredObject | None:
    """None for a value this version cannot read (a newer format)."""
    parts = unpack_value(value)
    if parts is None:
        return None
    state, size, time_ms, pins, token, replicas = parts
    return StoredObject(STATE_NAMES[state], size, time_ms, pins, token,
                        decode_replicas(replicas, size) if replicas else ())


MAX_EXACT = 2 ** 53
"""Scripts hold numbers as Lua doubles: a size, time or epoch past this is not exact there
(a 400-digit size is inf), so no script writes one."""

_EPOCH = re.compile(r"[0-9]{1,16}")
_REPLICA_PART = re.compile(r"\|[^,|]*,[^,|]*,[a-z]")
_SEGMENT_OF_PART = re.compile(r"\|([^,|]*)")


def is_epoch_text(value: object) -> bool:
    """Whether a stored link epoch (a child field's value, `pe`) is one a script wrote."""
    return isinstance(value, str) and _EPOCH.fullmatch(value) is not None \
        and int(value) < MAX_EXACT


_INTEGER = re.compile(r"-?[0-9]{1,18}")


def is_counter_text(value: object) -> bool:
    """Whether a stored counter (a shard stats field) is an integer HINCRBY can add to."""
    return isinstance(value, str) and _INTEGER.fullmatch(value) is not None


def object_value_damage(value: str) -> str | None:
    """None for a value of this format that the scripts read as this module does;
    "newer" for a value of a later format version (it starts with another version digit:
    left alone); "damaged" for a value no version wrote (left for fsck --repair to drop)."""
    match = _VALUE.fullmatch(value)
    if match is None:
        return "newer" if value[:1].isdigit() and value[:1] != "1" else "damaged"
    _, size, time_ms, pins, _, replicas = match.groups()
    if int(size) >= MAX_EXACT or int(time_ms) >= MAX_EXACT or int(pins) > 3:
        return "damaged"
    if _REPLICA_PART.sub("", replicas):
        return "damaged"
    return None


def replicas_as_scripts_count(value: str) -> tuple[int, list[str]] | None:
    """An object's size and the segments of its replicas as the scripts count them
    (lua/_lib.lua: every `|` part is a replica, su:<segment> keyed by the name as stored,
    escaped), or None for a value they cannot read."""
    match = _VALUE.fullmatch(value)
    if match is None:
        return None
    return int(match.group(2)), _SEGMENT_OF_PART.findall(match.group(6))


def parent_of(p: str | None) -> str | None:
    """The parent named by a node's `p` field (None for none, or a shell's batch marker)."""
    return None if p is None or p.startswith(SHELL_MARKER) else p


COMPLETE_PREFIX = "1c,"
"""What a complete object's packed value starts with (format 1, state c)."""


def is_complete_value(value: str | None) -> bool:
    return value is not None and value.startswith(COMPLETE_PREFIX)


@dataclass(frozen=True)
class NodeFields:
    """A node hash split into its parts."""

    attributes: dict[str, str]
    children: dict[str, int]
    """child hash -> link epoch"""
    objects: dict[str, str]
    """suffix -> packed value"""

    def counter(self, name: str) -> int:
        return to_int(self.attributes.get(name))

    @property
    def parent(self) -> str | None:
        return parent_of(self.attributes.get("p"))


def split_node(fields: Mapping[str, str] | Exception) -> NodeFields:
    """A node's HGETALL reply split into its parts; a refused read (a key of another type
    at a node key, which a namespace writer can plant) raises a clear error."""
    if isinstance(fields, Exception):
        raise ScriptError(f"a node key holds no node ({fields}); `mooncake-redis fsck "
                          "--repair` drops it")
    attributes: dict[str, str] = {}
    children: dict[str, int] = {}
    objects: dict[str, str] = {}
    for field, value in fields.items():
        if field.startswith(OBJECT_PREFIX):
            objects[field[len(OBJECT_PREFIX):]] = value
            continue
        child = child_of_field(field)
        if child is None:
            attributes[field] = value
        else:
            children[child] = to_int(value)
    return NodeFields(attributes, children, objects)
