"""KV-cache entry keys: fixed-width strings and packed 64-bit integers, both order-preserving."""

from __future__ import annotations

from typing import NamedTuple

# Field widths are chosen so that BOTH encodings hold every valid key: the decimal widths
# bound the values, the bit widths are at least as wide (16+10+8+30 = 64 bits).
SEQUENCE_DIGITS, LAYER_DIGITS, HEAD_DIGITS, POSITION_DIGITS = 4, 3, 2, 6
SEQUENCE_BITS, LAYER_BITS, HEAD_BITS, POSITION_BITS = 16, 10, 8, 30
PACKED_KEY_BITS = SEQUENCE_BITS + LAYER_BITS + HEAD_BITS + POSITION_BITS
STRING_KEY_LENGTH = SEQUENCE_DIGITS + LAYER_DIGITS + HEAD_DIGITS + POSITION_DIGITS + 3

MAX_SEQUENCE = 10**SEQUENCE_DIGITS - 1
MAX_LAYER = 10**LAYER_DIGITS - 1
MAX_HEAD = 10**HEAD_DIGITS - 1
MAX_POSITION = 10**POSITION_DIGITS - 1

_HEAD_SHIFT = POSITION_BITS
_LAYER_SHIFT = HEAD_BITS + POSITION_BITS
_SEQUENCE_SHIFT = LAYER_BITS + HEAD_BITS + POSITION_BITS


class CacheKey(NamedTuple):
    """One cached KV entry: a token position of one attention head in one layer.

    `sequence` names whose tokens these are: 0 is the system prompt shared by every chat
    session (prefix caching shares its KV), 1..n are the sessions' own turns.
    """

    sequence: int
    layer: int
    head: int
    position: int


class BitPrefix(NamedTuple):
    """The leading `length` bits of a packed key, right-aligned in `value`."""

    value: int
    length: int


def validate_key(key: CacheKey) -> None:
    """Raise ValueError naming the field when `key` does not fit the fixed-width schema."""
    limits = (MAX_SEQUENCE, MAX_LAYER, MAX_HEAD, MAX_POSITION)
    for field, value, limit in zip(CacheKey._fields, key, limits):
        if not 0 <= value <= limit:
            raise ValueError(f"{field} {value} of {key} is outside 0..{limit}")


def format_key(key: CacheKey) -> str:
    """`0001:012:08:000456`: zero-padded so that string order equals numeric order."""
    return f"{key.sequence:04d}:{key.layer:03d}:{key.head:02d}:{key.position:06d}"


def parse_key(text: str) -> CacheKey:
    """Inverse of format_key."""
    sequence, layer, head, position = text.split(":")
    return CacheKey(int(sequence), int(layer), int(head), int(position))


def string_prefix(sequence: int, layer: int | None = None, head: int | None = None) -> str:
    """The string prefix shared by every key of a sequence (or of one of its layers or heads)."""
    prefix = f"{sequence:04d}:"
    if layer is not None:
        prefix += f"{layer:03d}:"
        if head is not None:
            prefix += f"{head:02d}:"
    return prefix


def pack_key(key: CacheKey) -> int:
    """Sequence, layer, head and position as bit fields, most significant first."""
    return (
        (key.sequence << _SEQUENCE_SHIFT)
        | (key.layer << _LAYER_SHIFT)
        | (key.head << _HEAD_SHIFT)
        | key.position
    )


def unpack_key(packed: int) -> CacheKey:
    """Inverse of pack_key."""
    return CacheKey(
        packed >> _SEQUENCE_SHIFT,
        (packed >> _LAYER_SHIFT) & ((1 << LAYER_BITS) - 1),
        (packed >> _HEAD_SHIFT) & ((1 << HEAD_BITS) - 1),
        packed & ((1 << POSITION_BITS) - 1),
    )


def packed_prefix(sequence: int, layer: int | None = None, head: int | None = None) -> BitPrefix:
    """The bit prefix shared by every packed key of a sequence (or of one layer or head)."""
    if layer is None:
        return BitPrefix(sequence, SEQUENCE_BITS)
    if head is None:
        return BitPrefix((sequence << LAYER_BITS) | layer, SEQUENCE_BITS + LAYER_BITS)
    value = (((sequence << LAYER_BITS) | layer) << HEAD_BITS) | head
    return BitPrefix(value, SEQUENCE_BITS + LAYER_BITS + HEAD_BITS)
