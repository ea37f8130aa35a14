"""Every shard script's '-- ARGV:' comment and item loops agree with its layout in
mooncake_redis/layouts.py (the Python side checks its calls against the same table in
NodeCall), and the checker reports a planted mismatch."""

from __future__ import annotations

import dataclasses
import re

import pytest

from mooncake_redis.layouts import HEADER_WIDTH, LAYOUTS, Layout
from mooncake_redis.scripts import SHARD_SCRIPTS, read_lua

# Where a script's items start in its packed argument A: a loop from a literal index, or a
# `local a = N` before a while loop.
STARTS = [re.compile(p, re.MULTILINE) for p in (
    r"for a = (\d+), #A", r"^\s*local a(?:, last)? = (\d+)")]
# Steps over whole items (a counted item: to its parts).
ITEM_STRIDES = [re.compile(p) for p in (
    r"for a = \d+, #A, (\d+) do", r"stop = (?:a|stop) \+ (\d+)", r"local first = a \+ (\d+)")]
# Steps over the parts of a counted item.
PART_STRIDES = [re.compile(p) for p in (
    r"for \w+ = first, [^,\n]+, (\d+) do", r"a = first \+ (\d+) \* k")]
ITEM_OFFSETS = re.compile(r"A\[(?:a|b) \+ (\d+)\]")
PART_OFFSETS = re.compile(r"A\[at \+ (\d+)\]")
LITERAL = re.compile(r"\bA\[(\d+)\]")
CODE_COMMENT = re.compile(r"--.*$", re.MULTILINE)
COUNT = re.compile(r"(\d+) per (item|object)")


def argv_comment(source: str) -> str:
    """The '-- ARGV:' comment up to '-- Returns:', as one line."""
    lines = source.split("-- ARGV:", 1)[1].split("-- Returns:", 1)[0]
    return " ".join(line.strip().removeprefix("--").strip() for line in lines.splitlines())


def in_order(text: str, names: tuple[str, ...], at: int) -> tuple[list[str], int]:
    """Problems for names not found in text in this order from `at`, and where the last
    one ended."""
    problems = []
    for name in names:
        found = text.find(name, at)
        if found < 0:
            problems.append(f"comment lacks {name!r} (in order)")
        else:
            at = found + len(name)
    return problems, at


def problems(source: str, layout: Layout) -> list[str]:
    """Where the script's source disagrees with its layout."""
    found: list[str] = []
    comment = argv_comment(source)
    if not comment.startswith(f"1 JSON: 1-{HEADER_WIDTH} header (_lib.lua)"):
        found.append(f"comment does not start with the header: {comment[:40]!r}")
    missing, at = in_order(comment, tuple(f"{HEADER_WIDTH + 1 + i} {name}"
                                          for i, name in enumerate(layout.args)), 0)
    found += missing
    if layout.item:
        then = comment.find("then", at)
        if then < 0:
            found.append("comment has no 'then' before the items")
        missing, at = in_order(comment, layout.item + layout.each, max(then, at))
        found += missing
    for number, what in COUNT.findall(comment):
        want = layout.width if what == "item" else len(layout.each)
        if int(number) != want:
            found.append(f"comment says {number} per {what}, the layout {want}")

    source = CODE_COMMENT.sub("", source)  # the code alone from here on
    found += [f"A[{n}] is past the layout's script arguments"
              for n in map(int, LITERAL.findall(source)) if n > HEADER_WIDTH + len(layout.args)]
    starts = [int(n) for p in STARTS for n in p.findall(source)]
    if layout.item and not starts:
        found.append("no item loop found")
    found += [f"items start at A[{n}], the layout's at {layout.first}"
              for n in starts if n != layout.first]
    part = len(layout.each) if layout.each else layout.width
    found += [f"a loop steps {n} over items of {layout.width}"
              for p in ITEM_STRIDES for n in map(int, p.findall(source)) if n != layout.width]
    found += [f"a loop steps {n} over parts of {part}"
              for p in PART_STRIDES for n in map(int, p.findall(source)) if n != part]
    for pattern, width in ((ITEM_OFFSETS, layout.width), (PART_OFFSETS, len(layout.each))):
        offsets = [int(n) for n in pattern.findall(source)]
        if offsets and max(offsets) != width - 1:
            found.append(f"offsets up to + {max(offsets)} in items of {width}")
    return found


def test_every_shard_script_has_a_layout() -> None:
    assert set(LAYOUTS) == set(SHARD_SCRIPTS)


@pytest.mark.parametrize("name", SHARD_SCRIPTS)
def test_script_agrees_with_its_layout(name: str) -> None:
    assert problems(read_lua(name), LAYOUTS[name]) == []


# (script, a change to its source or None, the layout field to drop the last name of or None,
#  what the checker then says)
PLANTS = [
    ("evict", ("13, #A, 5 do", "13, #A, 4 do"), None, "steps 4 over items of 5"),
    ("evict", ("13, #A, 5 do", "12, #A, 5 do"), None, "start at A[12]"),
    ("evict", ("A[a + 4]", "A[a + 5]"), None, "offsets up to + 5"),
    ("resolve", ("parent hash, epoch", "parent, epoch"), None, "lacks 'parent hash'"),
    ("resolve", ("then 5 per item", "then 4 per item"), None, "says 4 per item"),
    ("delete", ("stop = a + 4", "stop = a + 3"), None, "steps 3 over items of 4"),
    ("unlink", ("8, #A, 5 do", "8, #A, 6 do"), None, "steps 6 over items of 5"),
    ("link", ("9, #A, 6 do", "9, #A, 5 do"), None, "steps 5 over items of 6"),
    ("register", ("local first = a + 7", "local first = a + 6"), None,
     "steps 6 over items of 7"),
    ("put", ("first, a - 1, 4 do", "first, a - 1, 3 do"), None, "steps 3 over parts of 4"),
    ("put", ("  local a, last = 15", "  local a, last = 14"), None, "start at A[14]"),
    ("recount_shard", ("for a = 10, #A do", "for a = 11, #A do"), None, "start at A[11]"),
    ("scrub", None, "item", "steps 2 over items of 1"),
    ("put_end", None, "args", "A[8] is past"),
    ("put", None, "each", "says 4 per object, the layout 3"),
]


@pytest.mark.parametrize(("name", "edit", "field", "says"), PLANTS)
def test_checker_reports_a_planted_mismatch(name: str, edit: tuple[str, str] | None,
                                            field: str | None, says: str) -> None:
    source, layout = read_lua(name), LAYOUTS[name]
    if edit:
        assert edit[0] in source
        source = source.replace(edit[0], edit[1])
    if field:
        layout = dataclasses.replace(layout, **{field: getattr(layout, field)[:-1]})
    assert any(says in problem for problem in problems(source, layout))


def test_calls_are_checked_against_the_layout(index) -> None:
    """A builder that sends an item one field short, or the wrong script arguments, is
    refused before Redis reads it."""
    calls = index.ctx.calls("resolve")
    calls.item(index.ctx.shard("a" * 64), 0, "a" * 64, "", 1)
    with pytest.raises(ValueError, match="resolve: 4 item fields, not a multiple of 5"):
        calls.queue(index.ctx.batch())
    with pytest.raises(ValueError, match="delete: 7 header and 0 script arguments"):
        index.ctx.calls("delete").item(index.ctx.shard("a" * 64), 0, "a" * 64, "_0_k", "t")
    puts = index.ctx.calls("put_end", index.ctx.token)
    puts.items(index.ctx.shard("a" * 64), [0], "a" * 64, 2, "x")
    with pytest.raises(ValueError, match="put_end: counted items end"):
        puts.queue(index.ctx.batch())
