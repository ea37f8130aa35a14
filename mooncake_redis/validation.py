"""Checks of caller input, done before anything is sent, so bad input writes nothing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from .errors import InvalidArgument
from .models import NodeItem, PutRow, Replica
from .segment_registry import check_name
from .values import MEDIA


def check_text(value: Any, what: str, max_length: int) -> str:
    """A non-empty str of at most max_length characters that encodes as UTF-8."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must not be empty")
    if len(value) > max_length:
        raise InvalidArgument(
            f"{what} is {len(value)} characters, longer than max_key_length={max_length}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} {value!r} is not valid UTF-8 text") from None
    return value


def plain_texts(values: list[Any], max_length: int) -> bool:
    """Whether every value is a non-empty ASCII str (which always encodes) of at most
    max_length characters: what `check_text` accepts, checked for a whole list at once
    in C. False says only "check each"."""
    return bool(values) and set(map(type, values)) == {str} \
        and min(map(len, values)) > 0 and max(map(len, values)) <= max_length \
        and "".join(values).isascii()


def check_size(value: Any, max_size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"size must be an int, got {type(value).__name__}")
    value = int(value)  # an int subclass (numpy, IntEnum) becomes a plain int
    if value < 0:
        raise InvalidArgument(f"size must be >= 0, got {value}")
    if value > max_size:
        raise InvalidArgument(f"size {value} exceeds max_object_size={max_size}")
    return value


def check_flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a bool, got {type(value).__name__}")
    return value


def check_unique(values: Sequence[str], what: str) -> None:
    if len(set(values)) == len(values):
        return
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise InvalidArgument(f"{what} {value!r} appears twice in one batch")
        seen.add(value)


def check_items(items: Any, what: str, arities: tuple[int, ...]) -> list[tuple[Any, ...]]:
    """A batch's items as tuples of the longest arity (shorter ones padded with None)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgument(f"a batch must be a list of {what}s, got {type(items).__name__}")
    longest = max(arities)
    padding = {arity: (None,) * (longest - arity) for arity in arities}
    if isinstance(items, list) and set(map(type, items)) <= {tuple}:
        lengths = set(map(len, items))  # the common batch: a list of tuples, checked in C
        if lengths <= {longest}:
            return items
        if lengths <= padding.keys():
            return [item + padding[len(item)] for item in items]
    checked = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) not in padding:  # (never a str)
            raise InvalidArgument(f"each {what} must be a tuple of {' or '.join(map(str, arities))}"
                                  f" values, got {item!r:.200}")
        checked.append(tuple(item) + padding[len(item)])
    return checked


def check_put_items(items: Any, what: str) -> list[PutRow]:
    """A put batch's items, each padded to (key, size, parent, replicas); the values are
    checked where they are used, so the hot path builds no object per item."""
    return cast("list[PutRow]", check_items(items, what, (2, 3, 4)))


def plain_rows(rows: list[PutRow], max_size: int) -> bool:
    """Whether every padded put row has an int size within 0..max_size and no replicas:
    checked at once, in C (False says only "check each")."""
    if not rows:
        return True
    _, sizes, _, replicas = zip(*rows)
    return set(map(type, sizes)) == {int} and min(sizes) >= 0 and \
        max(sizes) <= max_size and replicas.count(None) == len(replicas)


def check_node_items(items: Any) -> list[NodeItem]:
    """A register batch's items: each a (prefix hash, parent hash, keys) tuple."""
    return cast("list[NodeItem]", check_items(items, "node registration", (3,)))


def check_count(value: Any, what: str, minimum: int = 0) -> int:
    """An int of at least `minimum` (not a bool), for an argument that may also be None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{what} must be None or an int >= {minimum}, got {value!r}")
    return int(value)


def check_wait_ms(value: Any) -> int:
    return check_count(value, "wait_ms")


def check_depth(value: Any) -> int:
    return check_count(value, "max_depth")


MAX_REPLICAS = 16
MAX_LOCATION_LENGTH = 4096


def check_replicas(value: Any) -> tuple[Replica, ...]:
    """An object's replicas: None, or a list of Replica or (segment, location[, medium])."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Replica)) or not isinstance(value, Iterable):
        raise InvalidArgument("replicas must be a list of Replica or (segment, location"
                              f"[, medium]) tuples, got {type(value).__name__}")
    replicas = []
    for item in value:
        if isinstance(item, Replica):
            segment, location, medium = item.segment, item.location, item.medium
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3):
            segment, location, medium = (*item, "memory")[:3]
        else:
            raise InvalidArgument(f"a replica must be a Replica or a (segment, location"
                                  f"[, medium]) tuple, got {item!r:.200}")
        check_name(segment)
        location = check_text(location, "replica location", MAX_LOCATION_LENGTH)
        if any(ord(char) < 32 for char in location):
            raise InvalidArgument(f"replica location {location!r:.200} holds control "
                                  "characters")
        if medium not in MEDIA:
            raise InvalidArgument(f"replica medium must be one of {sorted(MEDIA)}, got "
                                  f"{medium!r}")
        replicas.append(Replica(segment, location, medium))
    if len(replicas) > MAX_REPLICAS:
        raise InvalidArgument(f"{len(replicas)} replicas; at most {MAX_REPLICAS} per object")
    if len({(r.segment, r.location) for r in replicas}) < len(replicas):
        raise InvalidArgument("the same replica (segment and location) is given twice")
    return tuple(replicas)
