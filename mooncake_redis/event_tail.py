"""A minimal reader of the 256 shard event streams, for the data planes in this package.

TO BE REPLACED BY Index.events: the consumer API (consumer groups, at-least-once, the
cap's losses reported) is built on another branch; until it lands, FileByteStore's users
(examples/file_data_plane.py, hicache.py) tail the streams with this. It keeps one
position per shard in memory (at most once: a process that dies forgets where it was)
and does not notice entries the stream's cap (events_max_len) trimmed before it read
them: read often, or raise events_max_len.
"""

from __future__ import annotations

from typing import Any

from .context import Context

EVENTS_PER_READ = 1000
"""Entries read per shard stream per call at most."""


class EventTail:
    """Reads new entries of every shard's events stream, as dicts of their fields."""

    def __init__(self, ctx: Context, start: str = "0"):
        """start: '0' reads each stream from its oldest entry still kept, '$' only entries
        added after the first read."""
        self.ctx = ctx
        self.positions = dict.fromkeys(ctx.all_shards(), start)

    def read(self) -> list[dict[str, str]]:
        """The entries added since the last call, in order within each shard: one XREAD per
        stream, sent in one pipeline (per node on a cluster)."""
        shards = list(self.positions)
        pipeline = self.ctx.client.pipeline(transaction=False)
        for shard in shards:
            stream = self.ctx.schema.shard_keys(shard).events
            position = self.positions[shard]
            if position == "$":  # resolve "$" once, so no entry between two reads is missed
                pipeline.xrevrange(stream, count=1)
            else:
                pipeline.xread({stream: position}, count=EVENTS_PER_READ)
        events: list[dict[str, str]] = []
        for shard, reply in zip(shards, pipeline.execute()):
            if self.positions[shard] == "$":
                self.positions[shard] = _entry_id(reply[0]) if reply else "0"
                continue
            for entry_id, fields in _entries(reply):
                events.append(dict(fields))
                self.positions[shard] = entry_id
        return events


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """XREAD's reply for one stream, as RESP2 (a list) or RESP3 (a dict) shapes it."""
    if not reply:
        return []
    if isinstance(reply, dict):
        (entries,) = reply.values()
        entries = entries[0] if entries and isinstance(entries[0], list) else entries
    else:
        entries = reply[0][1]
    return [(_entry_id(entry), entry[1]) for entry in entries]


def _entry_id(entry: Any) -> str:
    return str(entry[0])
