"""Argument and field types as Mooncake's pybind11 binding converts them: a value it would
not convert raises TypeError here too, before anything changes.

pybind11 turns a Python int (or a bool, an int subclass, or anything with __index__, such
as a numpy integer) into an unsigned C++ integer when it fits: a negative one, one of 2**64
or more, or a float raises TypeError. A C++ bool takes True/False, None (False) and
numbers (their truth).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, TypeVar

UINT64_END = 1 << 64


def uint64(value: Any, what: str = "value") -> int:
    """An unsigned 64-bit integer (uint64_t, size_t)."""
    if isinstance(value, float) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    number = operator.index(value)
    if not 0 <= number < UINT64_END:
        raise TypeError(f"{what} must be an int in [0, 2**64), got {number}")
    return number


def optional_uint64(value: Any, what: str = "value") -> int | None:
    return None if value is None else uint64(value, what)


def boolean(value: Any, what: str = "value") -> bool:
    if value is None or isinstance(value, (bool, int, float)) or (
            hasattr(value, "__bool__") and hasattr(value, "__index__")):
        return bool(value)
    raise TypeError(f"{what} must be a bool, got {type(value).__name__}")


def text(value: Any, what: str = "value") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


def texts(value: Any, what: str = "value") -> list[str]:
    """A list of str (pybind takes any sequence but a str or bytes)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{what} must be a list of str, got {type(value).__name__}")
    return [text(item, what) for item in value]


def optional_texts(value: Any, what: str = "value") -> list[str] | None:
    return None if value is None else texts(value, what)


def optional_text_lists(value: Any, what: str = "value") -> list[list[str]] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{what} must be a list of lists of str, got "
                        f"{type(value).__name__}")
    return [texts(item, what) for item in value]


T = TypeVar("T")


def instance_or_default(value: Any, kind: type[T], what: str) -> T:
    """An argument of a pybind class type: None is a default-made one."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise TypeError(f"{what} must be a {kind.__name__}, got {type(value).__name__}")
    return value


# -- method arguments --------------------------------------------------------------------


def check_key(key: Any) -> str:
    if isinstance(key, bytes):
        key = key.decode("utf-8", errors="strict")
    if not isinstance(key, str):
        raise TypeError(f"a key must be a str, got {type(key).__name__}")
    return key


def check_keys(keys: Any) -> list[str]:
    return [check_key(key) for key in check_list(keys, "keys")]


def check_list(values: Any, what: str) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list, got {type(values).__name__}")
    return list(values)


def check_3d(values: Any, what: str) -> list[list[list[int]]]:
    return [[[check_int(v, what) for v in check_list(inner, what)]
             for inner in check_list(row, what)] for row in check_list(values, what)]


def check_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{what} must be an int >= 0, got {value!r}")
    return int(value)


def check_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool, got {type(value).__name__}")
    return value


def bytes_of(value: Any) -> memoryview:
    """A value's bytes (any buffer-protocol object, as Mooncake's binding takes)."""
    try:
        data = memoryview(value)
    except TypeError:
        raise TypeError(f"a value must support the buffer protocol, got "
                        f"{type(value).__name__}") from None
    if not data.c_contiguous:
        data = memoryview(data.tobytes())
    return data.cast("B")
