"""Mooncake trace files (FAST'25 JSONL): one request a line, its prefix blocks as hash ids
(and, in our generated traces, the session it belongs to)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from mooncake_redis.errors import TraceFormatError

TRACE_BLOCK_TOKENS = 512
"""Tokens per hash id in Mooncake's published traces: one id per 512-token prefix block."""

REQUIRED_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceRequest(NamedTuple):
    """One request of a trace, with the line it came from (for errors found later)."""

    line: int
    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    session: int | None = None
    """The conversation it belongs to, where the trace says (an optional `session` field,
    which our generated traces carry; Mooncake's do not)."""


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not an id


def parse_request(text: str, line: int) -> TraceRequest:
    """One JSONL line as a request; ValueError saying what is wrong (without the line)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    missing = [name for name in REQUIRED_FIELDS if name not in record]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    timestamp = record["timestamp"]
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool):
        raise ValueError(f"timestamp {timestamp!r} is not a number")
    for name in ("input_length", "output_length"):
        if not _is_integer(record[name]) or record[name] < 0:
            raise ValueError(f"{name} {record[name]!r} is not a non-negative integer")
    hash_ids = record["hash_ids"]
    if not isinstance(hash_ids, list):
        raise ValueError(f"hash_ids is {type(hash_ids).__name__}, not a list")
    for position, block_id in enumerate(hash_ids):
        if not _is_integer(block_id):
            raise ValueError(f"hash_ids[{position}] {block_id!r} is not an integer")
    session = record.get("session")
    if session is not None and not _is_integer(session):
        raise ValueError(f"session {session!r} is not an integer")
    return TraceRequest(line, timestamp, record["input_length"], record["output_length"],
                        tuple(hash_ids), session)


def iter_trace(path: Path, limit: int | None = None) -> Iterator[TraceRequest]:
    """The requests of a trace file in order, at most `limit` of them; blank lines are skipped.

    Raises TraceFormatError (file:line: problem) at the first malformed line, OSError when
    the file cannot be read."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    served = 0
    with path.open("rb") as handle:  # bytes, so that bad UTF-8 is reported with its line too
        for line, raw in enumerate(handle, start=1):
            if limit is not None and served == limit:
                return
            if not raw.strip():
                continue
            try:
                request = parse_request(raw.decode("utf-8"), line)
            except ValueError as error:  # UnicodeDecodeError is one
                raise TraceFormatError(str(path), line, str(error)) from None
            yield request
            served += 1
