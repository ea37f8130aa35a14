"""Events: what changed in a namespace, read from its shards' streams (docs/EVENTS.md).

Every script that stores or deletes objects appends one entry per call to each shard's
stream it changed (`<ns>:{xy}:events`), naming every object of the change, in the same
atomic step, so a reader sees exactly the changes, in order per shard. A `Consumer` reads
them, one Event per object:

- with a consumer group, at least once: each entry goes to one consumer of the group and
  stays pending until acked; a restarted consumer first gets its own pending entries
  again, then new ones;
- without one, from a position kept in memory (tailing: at most once).

Each read is one `read_events` script per shard (lua/read_events.lua) that also tells,
in the same atomic step, whether the stream's cap trimmed entries the reader had not read:
the consumer then yields an `EventsLost` marker for that shard, and `list_shard` gives
its current objects to start again from. On a single Redis one blocking XREAD over all
its streams waits for news; on a cluster (where a multi-key XREAD across slots is
CROSSSLOT) and in process, one XRANGE per shard, sent per node, polls.
"""

from __future__ import annotations

import inspect
import json
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.cluster import RedisCluster

from mooncake_redis.connection import is_in_process
from mooncake_redis.context import Context
from mooncake_redis.errors import EventsLost, InvalidArgument, OutcomeUnknown
from mooncake_redis.executor import Batch
from mooncake_redis.models import Replica
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.validation import check_text
from mooncake_redis.values import decode_object, decode_replicas, split_node, to_int

STORED, REMOVED, REVOKED, EVICTED = "stored", "removed", "revoked", "evicted"
"""The event types the scripts emit today (lua/put_end.lua, delete.lua, evict.lua)."""

KNOWN_FIELDS = frozenset({"type", "hash", "suffix", "size", "parent", "replicas"})
"""Entry fields Event names; any other field lands in Event.extra."""

STARTS = ("latest", "earliest")
DEFAULT_BLOCK_MS = 5000
DEFAULT_COUNT = 100
MAX_COUNT = 10_000
DEFAULT_POLL_MS = 100
PENDING_FROM = "0"
"""A consumer's own pending entries are read from the start of its list."""


@dataclass(frozen=True)
class Event:
    """One entry of a shard's events stream."""

    id: str
    """The stream entry ID (Redis ms-seq): unique and increasing within its shard."""
    shard: str
    type: str
    key: str
    """The object key: hash + suffix."""
    hash: str
    """The prefix hash of the object's node."""
    suffix: str
    size: int
    parent: str | None
    """The node's parent hash, where the entry names one."""
    replicas_raw: str | None
    """The object's replicas as the entry encodes them, where it has them."""
    extra: dict[str, str] = field(default_factory=dict)
    """Any other field of the entry, as written."""

    @property
    def replicas(self) -> tuple[Replica, ...]:
        """The replicas the entry names (the ones to free, for a removal), decoded."""
        return decode_replicas(self.replicas_raw, self.size) if self.replicas_raw else ()

    @classmethod
    def from_entry(cls, shard: str, entry_id: str, fields: Mapping[str, str]) -> Event:
        """The one event of an entry of one object (as 0.1 wrote them: hash, suffix, size,
        parent, replicas and any other field)."""
        prefix_hash, suffix = fields.get("hash", ""), fields.get("suffix", "")
        return cls(entry_id, shard, fields.get("type", ""), prefix_hash + suffix, prefix_hash,
                   suffix, to_int(fields.get("size")), fields.get("parent") or None,
                   fields.get("replicas"),
                   {name: value for name, value in fields.items() if name not in KNOWN_FIELDS})


def events_of(shard: str, entry_id: str, fields: Mapping[str, str]) -> list[Event]:
    """The events of one stream entry, an entry's fields taken as a map (redis-py's XRANGE
    and XREAD give them so): one per object it names. An entry of a call's objects has
    `type` and `objects`, a JSON array that names, per node, 'h' <hash> ('p' <parent>) and
    per object 's' <suffix> 'z' <size> ('r' <replicas>) and that type's own fields
    (lua/_lib.lua event); an entry of one object (0.1) names it in fields of its own. A
    value no script wrote gives no event."""
    packed = fields.get("objects")
    if packed is None:
        return [Event.from_entry(shard, entry_id, fields)]
    try:
        values = json.loads(packed)
    except ValueError:
        return []
    if not isinstance(values, list):
        return []
    kind = fields.get("type", "")
    events: list[Event] = []
    node = parent = ""
    current: dict[str, Any] | None = None
    for position in range(0, len(values) - 1, 2):
        name, value = values[position], str(values[position + 1])
        if name == "s":
            if current is not None:
                events.append(_event(entry_id, shard, kind, node, parent, current))
            current = {"s": value, "extra": {}}
        elif name == "h":
            if current is not None:
                events.append(_event(entry_id, shard, kind, node, parent, current))
                current = None
            node, parent = value, ""
        elif name == "p":
            parent = value
        elif current is not None:
            if name in ("z", "r"):
                current[name] = value
            else:
                current["extra"][str(name)] = value
    if current is not None:
        events.append(_event(entry_id, shard, kind, node, parent, current))
    return events


def _event(entry_id: str, shard: str, kind: str, node: str, parent: str,
           fields: dict[str, Any]) -> Event:
    suffix = fields["s"]
    return Event(entry_id, shard, kind, node + suffix, node, suffix, to_int(fields.get("z")),
                 parent or None, fields.get("r"), fields["extra"])


Item = Event | EventsLost
"""What a consumer yields: events, and a marker where a shard's events were lost."""


@dataclass(frozen=True)
class ShardObject:
    """One object as a shard holds it now (list_shard)."""

    key: str
    hash: str
    suffix: str
    parent: str | None
    size: int | None
    """None for a value written by a newer release (unreadable here)."""
    state: str | None
    """"complete" or "processing" (None: unreadable)."""
    replicas: tuple[Replica, ...] = ()


def list_shard(ctx: Context, shard: str) -> Iterator[ShardObject]:
    """Every object of one shard now: a SCAN of its node keys on the node that serves it,
    each node read whole. Not a snapshot: objects that change meanwhile are as they were
    when their node was read (the events after a loss fix them up: docs/EVENTS.md)."""
    return _listed(ctx, scan_node_keys(ctx, check_shard(ctx, shard)))


def list_all(ctx: Context) -> Iterator[ShardObject]:
    """Every object of the namespace now: list_shard of every shard at once (one SCAN per
    primary, not one per shard)."""
    return _listed(ctx, scan_node_keys(ctx))


def _listed(ctx: Context, pages: Iterator[list[str]]) -> Iterator[ShardObject]:
    for page in pages:
        batch = ctx.batch()
        for node_key in page:
            batch.command("HGETALL", node_key)
        for node_key, fields in zip(page, batch.execute()):
            if isinstance(fields, Exception):
                raise fields
            prefix_hash = ctx.schema.hash_of_node_key(node_key)
            node = split_node(fields)
            for suffix, value in sorted(node.objects.items()):
                stored = decode_object(value)
                yield ShardObject(prefix_hash + suffix, prefix_hash, suffix, node.parent,
                                  stored.size if stored else None,
                                  stored.state if stored else None,
                                  stored.replicas if stored else ())


def check_shard(ctx: Context, shard: Any) -> str:
    """A shard of the namespace's layout ("0".."f", or 0.1's "00".."ff")."""
    shards = ctx.all_shards()
    if not isinstance(shard, str) or shard not in shards:
        raise InvalidArgument(f"shard must be one of the namespace's {len(shards)} shards "
                              f"({shards[0]!r}..{shards[-1]!r}), got {shard!r}")
    return shard


def _count(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{what} must be an int from {low} to {high}, got {value!r}")
    return value


class Consumer:
    """Reads a namespace's events. Iterate it: events come in order per shard, with an
    EventsLost marker where a shard's events were lost. With a group, an event is acked
    once the loop body has run for it (when the loop asks for the next one) and before
    the next read, and by close(): a consumer killed mid-batch gets the rest again when
    it restarts with the same group and consumer name. `read()` and `ack()` are the same
    steps for callers that want to ack themselves."""

    def __init__(self, ctx: Context, group: str | None = None, consumer: str | None = None,
                 *, start: str = "latest", block_ms: int = DEFAULT_BLOCK_MS,
                 count: int = DEFAULT_COUNT, poll_ms: int = DEFAULT_POLL_MS,
                 follow: bool = True):
        """group: a consumer group (at least once), or None (a plain reader, at most
        once). consumer: this consumer's name in the group (default: the host name; a
        restart must use the same name to get its pending events back). start: where a
        new group or reader begins, "latest" (new events only) or "earliest" (every
        event still kept). block_ms: how long one read waits for news (0: not at all).
        count: events read per shard per read. poll_ms: the pause between polls where
        reads cannot block (Redis Cluster, in process). follow=False: iteration ends
        once every stream is read to its end."""
        limit = ctx.settings.max_key_length
        self.ctx = ctx
        self.group = None if group is None else check_text(group, "group", limit)
        if consumer is not None and group is None:
            raise InvalidArgument("a consumer name needs a group")
        self.consumer = check_text(consumer or socket.gethostname(), "consumer", limit)
        if start not in STARTS:
            raise InvalidArgument(f"start must be one of {', '.join(STARTS)}, got {start!r}")
        self.start = start
        self.block_ms = _count(block_ms, "block_ms", 0, 3_600_000)
        self.count = _count(count, "count", 1, MAX_COUNT)
        self.poll_ms = _count(poll_ms, "poll_ms", 1, 60_000)
        self.follow = follow
        self._streams = {shard: ctx.schema.shard_keys(shard).events
                         for shard in ctx.all_shards()}
        self._shard_of = {stream: shard for shard, stream in self._streams.items()}
        self._position: dict[str, str] = {}
        """Per shard: the group's last delivered ID, or this reader's last ID."""
        self._read: dict[str, int] = {}
        """Per shard: entries this reader has read (plain readers only)."""
        self._pending: dict[str, str] = {}
        """Per shard: where this consumer's pending entries are read from next, until
        they are all read again (a group's first reads, and after a lost reply)."""
        self._hot: set[str] = set()
        """Shards whose last read filled `count`: more is waiting."""
        self._done: list[Event] = []
        self._idle = False
        """The last read looked for news and found none."""
        self._blocks = not isinstance(ctx.client, RedisCluster) and \
            not is_in_process(ctx.client)
        self._longest_block_ms = longest_block_ms(ctx.client) if self._blocks else None
        """One XREAD BLOCK waits at most this long: well inside the client's socket
        timeout, which would otherwise end it as a lost reply (follow mode reads again)."""

    # -- reading -------------------------------------------------------------------------

    def read(self) -> list[Item]:
        """One read: the events (and loss markers) of every shard that had news, waiting
        up to block_ms for some. Empty if none came."""
        looking = False
        if not self._position:  # the first read: every shard, groups made where missing
            shards: Iterable[str] = self._streams
            if self.group is not None:
                self._pending = dict.fromkeys(self._streams, PENDING_FROM)
        elif self._pending:
            shards = list(self._pending)
        else:
            shards, looking = self._news(), True
        try:
            items = self._read_shards(sorted(shards))
        except OutcomeUnknown:
            if self.group is not None:  # what the lost reply delivered is pending: reread
                self._pending = dict.fromkeys(self._streams, PENDING_FROM)
            raise
        self._idle = looking and not items and not self._hot
        return items

    def _news(self) -> set[str]:
        """The shards with entries after their position, plus the hot ones."""
        hot, self._hot = self._hot, set()
        wait = self.block_ms if self.follow and not hot else 0
        if wait and self._longest_block_ms is not None:
            wait = min(wait, self._longest_block_ms)
        if self._blocks:
            batch = self.ctx.batch()
            streams = list(self._streams.values())
            blocking = ("BLOCK", wait) if wait else ()
            batch.command("XREAD", *blocking, "COUNT", 1, "STREAMS", *streams,
                          *(self._position[shard] for shard in self._streams),
                          retry_safe=True)
            (reply,) = batch.execute()
            news = {self._shard_of[name] for name, _ in _raise(reply) or ()}
        else:
            replies = self.ctx.per_shard(lambda batch, shard: batch.command(
                "XRANGE", self._streams[shard], "(" + self._position[shard], "+", "COUNT", 1),
                shards=self._streams, raise_errors=True)
            news = {shard for shard, (reply,) in replies if reply}
            if not news and not hot and wait:
                time.sleep(min(self.poll_ms, wait) / 1000)
        return news | hot

    def _read_shards(self, shards: Sequence[str]) -> list[Item]:
        script = self.ctx.scripts["read_events"]

        def queue(batch: Batch, shard: str) -> None:
            pending = self._pending.get(shard)
            if self.group is not None:
                source = pending if pending is not None else ">"
            else:
                source = self._position.get(shard, "")
            batch.call(script, [self._streams[shard]],
                       [self.group or "", self.consumer, source, self.count, self.start,
                        self._read.get(shard, 0)])

        items: list[Item] = []
        gone: dict[str, list[str]] = {}
        for shard, (reply,) in self.ctx.per_shard(queue, shards=shards):
            created, position, read, lost, trimmed_pending, entries = _raise(reply)
            if created and shard in self._position:
                items.append(_lost(shard, None, "its stream or consumer group was deleted"))
            self._position[shard] = position
            if self.group is None:
                self._read[shard] = int(read)
            if lost:
                items.append(_lost(shard, None if lost < 0 else int(lost),
                                   "the stream's cap trimmed them before they were read"))
            if trimmed_pending:
                gone[shard] = list(trimmed_pending)
            for entry_id, fields in _entries(entries):
                items += events_of(shard, entry_id, _pairs(fields))
            delivered = len(entries) // 2 + len(trimmed_pending)
            if shard in self._pending:
                if delivered < self.count:
                    del self._pending[shard]
                else:
                    self._pending[shard] = _last_id(entries, trimmed_pending)
            elif delivered >= self.count:
                self._hot.add(shard)
        if gone:
            self._ack_ids(gone)
        return items

    # -- acknowledging -------------------------------------------------------------------

    def ack(self, items: Iterable[Item]) -> None:
        """Ack events of a group (markers and plain readers' events need none): they are
        not delivered again."""
        ids: dict[str, list[str]] = {}
        for item in items:
            if isinstance(item, Event):
                ids.setdefault(item.shard, []).append(item.id)
        if ids and self.group is not None:
            self._ack_ids(ids)

    def _ack_ids(self, ids: Mapping[str, list[str]]) -> None:
        self.ctx.per_shard(lambda batch, shard: batch.command(
            "XACK", self._streams[shard], self.group, *ids[shard], retry_safe=True),
            shards=ids, raise_errors=True)

    def __iter__(self) -> Iterator[Item]:
        while True:
            self._ack_done()
            items = self.read()
            if self._idle and not self.follow:
                return
            for item in items:
                yield item
                if isinstance(item, Event):  # the loop body ran for it
                    self._done.append(item)

    def _ack_done(self) -> None:
        self.ack(self._done)
        self._done = []  # only once acked: close() tries again after an interrupted ack

    def close(self) -> None:
        """Ack the events the loop has finished with; the consumer stays usable."""
        self._ack_done()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- recovery ------------------------------------------------------------------------

    def list_shard(self, shard: str) -> Iterator[ShardObject]:
        """The shard's objects now, to start again from after an EventsLost marker."""
        return list_shard(self.ctx, shard)

    def list_all(self) -> Iterator[ShardObject]:
        """Every object of the namespace now (list_all)."""
        return list_all(self.ctx)


def longest_block_ms(client: Any) -> int | None:
    """Half the socket timeout the client's connections read with (None: they wait as
    long as it takes). redis-py's default changed from none to 5 s (6.0); a URL or the
    caller may set any."""
    pool = client.connection_pool
    timeout = pool.connection_kwargs.get("socket_timeout", _default_socket_timeout(pool))
    return None if not timeout else max(1, int(timeout * 1000 / 2))


def _default_socket_timeout(pool: Any) -> float | None:
    """The socket_timeout a connection of the pool gets when none is given."""
    for cls in pool.connection_class.__mro__:
        parameter = inspect.signature(cls.__init__).parameters.get("socket_timeout")
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            return parameter.default  # type: ignore[no-any-return]
    return None


def _raise(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def _lost(shard: str, count: int | None, why: str) -> EventsLost:
    how_many = "an unknown number of" if count is None else str(count)
    return EventsLost(f"shard {shard}: {how_many} events lost ({why}); resynchronise the "
                      "shard from list_shard (docs/EVENTS.md)", shard=shard, count=count)


def _entries(flat: Sequence[Any]) -> Iterator[tuple[str, Sequence[str]]]:
    for position in range(0, len(flat), 2):
        yield flat[position], flat[position + 1]


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    return dict(zip(flat[0::2], flat[1::2]))


def _last_id(entries: Sequence[Any], trimmed: Sequence[str]) -> str:
    ids = [*trimmed, *(entries[position] for position in range(0, len(entries), 2))]
    return max(ids, key=lambda entry_id: tuple(int(part) for part in entry_id.split("-")))
