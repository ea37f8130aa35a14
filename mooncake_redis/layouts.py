"""The ARGV layout of every shard script, declared once.

A shard script's ARGV is the common header (lua/_lib.lua, HEADER_WIDTH values), then the
script's own arguments (`args`, from ARGV[HEADER_WIDTH + 1]), then its items from
ARGV[first]: `item` fields each. A counted item ends with a count k and is followed by k
parts of `each` fields (a node's key suffixes, put_start's objects).

ShardCall checks each call against this table when it is queued (per call, not per item),
and tests/test_layouts.py checks every script's '-- ARGV:' comment and item loops against
it, so the Python builders, the Lua loops and the comments cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEADER_WIDTH = 3


@dataclass(frozen=True)
class Layout:
    args: tuple[str, ...] = ()
    item: tuple[str, ...] = ()
    each: tuple[str, ...] = ()

    @property
    def first(self) -> int:
        """The 1-based ARGV index (as Lua counts) of the first item."""
        return HEADER_WIDTH + len(self.args) + 1

    @property
    def width(self) -> int:
        """An item's fields (a counted item's, before its parts)."""
        return len(self.item)

    def problem(self, header: Sequence[Any], script_args: Sequence[Any]) -> str | None:
        """Why a call's header and script arguments do not fit, or None."""
        if len(header) != HEADER_WIDTH or len(script_args) != len(self.args):
            return (f"{len(header)} header and {len(script_args)} script arguments, not "
                    f"{HEADER_WIDTH} and {len(self.args)}")
        return None

    def items_problem(self, args: Sequence[Any]) -> str | None:
        """Why a call's items (args: its whole ARGV, header included) do not fit, or None."""
        at, end = self.first - 1, len(args)
        if not self.each:
            if (end - at) % max(1, self.width):
                return f"{end - at} item arguments, not a multiple of {self.width}"
            return None
        width, part = self.width, len(self.each)  # read once, not per item
        while at < end:  # counted items: walk the counts (one step per item, not per part)
            at += width + part * int(args[at + width - 1])
        return None if at == end else f"counted items end at ARGV[{at}], not ARGV[{end}]"


LAYOUTS: dict[str, Layout] = {
    "link": Layout(
        ("batch id",),
        ("parent key index", "parent hash", "child hash", "the child's field name", "epoch",
         "whether this batch also writes the parent")),
    "put_start": Layout(
        ("batch id", "put_start_discard_timeout", "the shard's default byte limit", "mode",
         "writer token", "link epoch"),
        ("node key index", "node hash", "parent hash", "cycle-checked", "count k"),
        ("key suffix", "size", "pins", "replicas")),
    "register": Layout(
        ("batch id",),
        ("node key index", "node hash", "parent hash", "link epoch", "cycle-checked",
         "key count k"),
        ("suffixes",)),
    "put_end": Layout(
        ("writer token",), ("node key index", "node hash", "count k"), ("key suffixes",)),
    "grant_lease": Layout(
        ("lease ttl", "probe"), ("node key index", "node hash", "count k"), ("key suffixes",)),
    "delete": Layout(
        ("mode",), ("node key index", "node hash", "key suffix", "writer token")),
    "evict": Layout(
        ("soft pins allowed", "soft_pin_ttl_ms", "the index evicted from", "cutoff score",
         "byte allowance"),
        ("node key index", "node hash", "the score the caller saw", "mode",
         "the parent the caller found", "that parent's key index")),
    "unlink": Layout(
        (), ("parent key index", "parent hash", "child hash", "the child's field name",
             "epoch", "pending entry to drop")),
    "resolve": Layout(
        (), ("node key index", "child hash", "parent hash", "epoch", "mode")),
    "repair_node": Layout(("node hash",)),
    "recount_shard": Layout(("the write counter seen before the scan",), ("node hash",)),
    "trim_fences": Layout(),
    "invalidate": Layout(("segment",), ("node key index", "node hash")),
    "scrub": Layout(("node hash",), ("field", "value")),
}
