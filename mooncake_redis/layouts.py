"""The packed argument of every shard script, declared once.

A shard script gets ONE argument, a JSON array (lua/_lib.lua decodes it as `A`): the common
header (HEADER_WIDTH values), then the script's own arguments (`args`, from
A[HEADER_WIDTH + 1]), then its items from A[first]: `item` fields each. A counted item
ends with a count k and is followed by k parts of `each` fields (a node's key suffixes,
put's objects). In a script that works in several shards (`per_shard` False: one call
per Redis node), every item starts with its shard's tag, which the builder adds; a
script of one shard (`per_shard` True) takes the tag as its first own argument.

NodeCall checks each call against this table when it is queued (per call, not per item),
and tests/test_layouts.py checks every script's '-- ARGV:' comment and item loops against
it, so the Python builders, the Lua loops and the comments cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEADER_WIDTH = 7
"""namespace, release timeout, events cap, link epoch horizon, tag width, shard count, the
shards the node serves (lua/_lib.lua)."""

SHARD_TAG = "shard tag"


@dataclass(frozen=True)
class Layout:
    args: tuple[str, ...] = ()
    item: tuple[str, ...] = ()
    each: tuple[str, ...] = ()
    per_shard: bool = False
    """One shard per call, its tag the first own argument (fsck's repairs, trims)."""
    reply: str = "items"
    """The reply's shape: 'items' (one value per item, in order), 'parts' (a list whose
    first part has one value per item, the next ones lists to join, evict's fourth three
    counts to add), 'one' (a single value: scripts of one shard)."""
    per_part: bool = False
    """A counted item answers once per part (put: per object; put_end, grant_lease: per
    key suffix), not once."""
    any_shard: bool = False
    """The call may touch shards its items do not name, any its Redis node serves: a node
    it deletes takes its parents along (the cascade), a link it writes walks up from the
    parent for a cycle."""

    @property
    def first(self) -> int:
        """The 1-based index (as Lua counts) of the first item in the packed argument."""
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

    def items_problem(self, fields: Sequence[Any]) -> str | None:
        """Why a call's items (their fields, flat, shard tags included) do not fit, or
        None: checked once a call, not per item."""
        if not self.each:
            if len(fields) % max(1, self.width):
                return f"{len(fields)} item fields, not a multiple of {self.width}"
            return None
        spans = self.spans(fields)
        end = spans[-1][1] if spans else 0
        return None if end == len(fields) else \
            f"counted items end at field {end}, not {len(fields)}"

    def spans(self, fields: Sequence[Any]) -> list[tuple[int, int]]:
        """(start, end) of each item in a call's flat item fields, a counted item with its
        parts (the walk stops where a count runs past the end)."""
        width, part = max(1, self.width), len(self.each)
        spans, at, end = [], 0, len(fields)
        while at < end:
            stop = at + width
            if part:
                if stop > end:
                    break
                stop += part * int(fields[stop - 1])
            spans.append((at, stop))
            at = stop
        return spans


OBJECT_PARTS = ("key suffix", "size", "pins", "replicas")
LINKED_NODE = (SHARD_TAG, "node hash", "parent hash", "the parent's shard tag",
               "the node's field name in its parent", "cycle-checked")

LAYOUTS: dict[str, Layout] = {
    "link": Layout(
        ("batch id",),
        (SHARD_TAG, "parent hash", "child hash", "the child's field name", "epoch",
         "whether this batch also writes the parent")),
    "put": Layout(
        ("mode", "writer token", "link epoch", "put_start_discard_timeout",
         "a shard's default byte limit", "batch id", "max_depth"),
        (*LINKED_NODE, "count k"), OBJECT_PARTS, per_part=True, any_shard=True),
    "register": Layout(
        ("batch id", "link epoch", "max_depth"), (*LINKED_NODE, "key count k"),
        ("suffixes",), any_shard=True),
    "put_end": Layout(
        ("writer token",), (SHARD_TAG, "node hash", "count k"), ("key suffixes",),
        per_part=True),
    "grant_lease": Layout(
        ("lease ttl", "probe"), (SHARD_TAG, "node hash", "count k"), ("key suffixes",),
        per_part=True),
    "delete": Layout(
        ("mode",), (SHARD_TAG, "node hash", "key suffix", "writer token"), reply="parts",
        any_shard=True),
    "evict": Layout(
        ("soft pins allowed", "soft_pin_ttl_ms", "the index evicted from", "cutoff score",
         "byte allowance"),
        (SHARD_TAG, "node hash", "the score the caller saw", "mode", "the child to unlink"),
        reply="parts", any_shard=True),
    "unlink": Layout(
        (), (SHARD_TAG, "parent hash", "child hash", "epoch", "pending entry to drop"),
        reply="parts", any_shard=True),
    "resolve": Layout(
        (), (SHARD_TAG, "child hash", "parent hash", "epoch", "mode")),
    "invalidate": Layout(("segment",), (SHARD_TAG, "node hash"), reply="parts",
                         any_shard=True),
    "repair_node": Layout(("the node's shard tag", "node hash"), per_shard=True, reply="one"),
    "recount_shard": Layout(("the shard's tag", "the write counter seen before the scan"),
                            ("node hash",), per_shard=True, reply="one"),
    "trim_fences": Layout(("the shard's tag",), per_shard=True, reply="one"),
    "scrub": Layout(("the node's shard tag", "node hash"), ("field", "value"), per_shard=True,
                    reply="one"),
}
