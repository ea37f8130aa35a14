"""What eviction removed from a namespace, read from its events streams as it happens.

Every script that stores or removes an object appends one entry to its shard's stream
(`<ns>:{xy}:events`: type, hash, suffix, size; docs/ARCHITECTURE.md), capped at
`events_max_len` entries per shard. The feed reads every shard's new entries after each
eviction job, hands back the evicted objects and trims what it read, so a stream only
ever holds what happened since the last job. That is exact as long as no stream reaches
its cap between two reads: `events_cap` sizes it for a pool, and every read checks its
counts against what the caller knows (the objects it completed, the objects the job
reported), so an entry lost anyway raises EventsLost instead of skewing a count.

The alternative, asking the store which of the pages the job could have touched are
still there, needs a probe of every stored page per job (any leaf may be the oldest):
O(capacity) per job where the streams cost O(objects that changed).
"""

from __future__ import annotations

from mooncake_redis.errors import EventsLost
from mooncake_redis.index import Index
from mooncake_redis.settings import Settings
from mooncake_redis.store.events import EVICTED, STORED, Event, events_of


def events_cap(capacity_objects: int) -> int:
    """An events_max_len no shard can reach between two reads when the feed is read after
    every eviction job of a pool of `capacity_objects` objects: puts between two jobs
    store at most a pool's worth (the pool is never over capacity) and one job evicts at
    most a pool's worth, even if every object hashes to one shard."""
    return max(Settings.events_max_len, 2 * capacity_objects + 1)


def _next_id(entry_id: str) -> str:
    """The smallest stream ID after this one (XTRIM MINID keeps IDs >= it)."""
    milliseconds, _, sequence = entry_id.partition("-")
    return f"{milliseconds}-{int(sequence) + 1}"


class EventFeed:
    """Reads one namespace's events streams; the caller is the namespace's only writer."""

    def __init__(self, index: Index) -> None:
        self._index = index
        self._streams = {shard: index.schema.shard_keys(shard).events
                         for shard in index.schema.shards}
        self._stored_expected = 0

    def skip_history(self) -> None:
        """Forget every event so far (an emptied namespace still holds its removals)."""
        batch = self._index.batch()
        for stream in self._streams.values():
            batch.command("XTRIM", stream, "MAXLEN", 0, retry_safe=True)
        batch.execute()
        self._stored_expected = 0

    def expect_stored(self, objects: int) -> None:
        """The caller completed (put_end) this many objects since the last read."""
        self._stored_expected += objects

    def read(self, evicted_objects: int) -> list[Event]:
        """The objects evicted since the last read; `evicted_objects` is how many the jobs
        since then reported. Raises EventsLost when the counts do not match."""
        batch = self._index.batch()
        for stream in self._streams.values():
            batch.command("XRANGE", stream, "-", "+")
        stored, evicted, other = 0, [], []
        trim = self._index.batch()
        for (shard, stream), entries in zip(self._streams.items(), batch.execute()):
            if not entries:
                continue
            trim.command("XTRIM", stream, "MINID", _next_id(entries[-1][0]), retry_safe=True)
            for entry_id, fields in entries:
                for event in events_of(shard, entry_id, fields):
                    if event.type == STORED:
                        stored += 1
                    elif event.type == EVICTED:
                        evicted.append(event)
                    else:
                        other.append(event.type)
        if len(trim):
            trim.execute()
        expected_stored, self._stored_expected = self._stored_expected, 0
        if other or stored != expected_stored or len(evicted) != evicted_objects:
            raise EventsLost(
                f"the events streams of {self._index.namespace!r} hold {stored} stored "
                f"and {len(evicted)} evicted objects since the last read (expected "
                f"{expected_stored} and {evicted_objects}) and {len(other)} other events: "
                "raise events_max_len, or keep other clients off the namespace")
        return evicted
