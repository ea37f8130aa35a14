"""Numbers in words for what the package prints (the CLI's views, doctor's findings):
counts with their noun, byte sizes in binary units."""

from __future__ import annotations


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """'1 child', '2 children', '0 keys'."""
    word = singular if count == 1 else (plural_form or singular + "s")
    return f"{count} {word}"


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
