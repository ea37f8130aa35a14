"""Sends queued script calls and commands to Redis in order, one pipeline per node, for a
single Redis and Redis Cluster alike (a single Redis is a cluster of one node).

Ordering contract: every call queued before a `barrier()` completes before any call
queued after it runs. On one node, one connection runs the whole queue in order, so a
batch is ONE round trip whatever its barriers; on a cluster the segments between barriers
go one after the other, each as parallel per-node pipelines.

Nothing is re-sent blindly. The executor writes and reads the protocol on a connection
itself (never through redis-py's retrying paths, so a client built with a retry policy
cannot make it re-send): a call that could not be sent (no connection, MOVED, ASK,
TRYAGAIN, CLUSTERDOWN) is re-sent after the slot map is refreshed; a call whose reply was
lost is re-sent only if running it twice is harmless (reads, and writes carrying this
client's writer token); otherwise the batch raises OutcomeUnknown.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

import redis
from redis.cluster import ClusterNode, RedisCluster

from .errors import (
    ClusterUnavailable,
    CrossSlotCall,
    MooncakeRedisError,
    OutcomeUnknown,
    PermissionDenied,
    RedisUnavailable,
    ReplicationIncomplete,
    ScriptError,
    StoreFull,
    from_script_error,
)
from .observers import script_observers

hiredis: Any
try:
    import hiredis
except ImportError:  # redis[hiredis] is a dependency; redis-py packs without it too
    hiredis = None

MAX_BACKOFF_MS = 2000
"""The pause between retries doubles from cluster_retry_backoff_ms up to this."""

NOT_SENT = object()
"""Reply placeholder: no connection to the node could be made, so nothing ran."""

LOST = object()
"""Reply placeholder: the call was sent but its reply never came; it may have run."""

CONNECTION_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
"""What a lost connection raises (redis-py's, or the socket's own)."""

REROUTE_ERRORS = (redis.exceptions.MovedError, redis.exceptions.AskError)
NOT_RUN_ERRORS = (*REROUTE_ERRORS, redis.exceptions.TryAgainError,
                  redis.exceptions.ClusterDownError, redis.exceptions.ReadOnlyError,
                  redis.exceptions.BusyLoadingError)
"""Replies saying the command did not run: re-sending it is always safe."""

READ_ONLY_COMMANDS = frozenset({
    "EXISTS", "GET", "HEXISTS", "HGET", "HGETALL", "HKEYS", "HLEN", "HMGET", "SCAN", "TIME", "TYPE",
    "XLEN", "XRANGE", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCOUNT", "MEMORY", "SMEMBERS",
})
KEYLESS_COMMANDS = frozenset({"TIME", "SCAN"})
ASKING = ("ASKING",)


@dataclass(frozen=True)
class LuaScript:
    """One script of lua/, with the helpers prepended, and its SHA1 for EVALSHA."""

    name: str
    source: str
    sha: str


@dataclass(frozen=True)
class Policy:
    """How a batch copes with lost connections, Cluster and replication (ClientOptions)."""

    retries: int = 6
    backoff_ms: int = 100
    wait_acks: int = 0
    wait_timeout_ms: int = 1000


class Queued(NamedTuple):
    """One call: its name, the command as sent, the key that routes it (None = any node),
    whether re-sending it after it may have run is harmless, whether it may write (WAIT
    covers it), its barrier segment, and for a shard script its NodeCall (scripts.py: what
    the call is for, to send it again shard by shard). A tuple: a read pipeline queues a
    thousand."""

    name: str
    args: tuple[Any, ...]
    routing_key: str | None
    retry_safe: bool
    writes: bool
    segment: int
    call: Any = None


_first, _second = itemgetter(0), itemgetter(1)


def tag_of(key: str) -> str:
    """The Redis Cluster hash tag of a key (the part its slot is computed from)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


class _Replies:
    """What one send of a segment's pending calls came back with, sorted call by call:
    results, calls to send again (after the slot map is read again: `reroute`; after a
    pause: `pause`), shard calls to send again split per shard, commands to follow to the
    node an ASK names, and calls whose reply was lost and may not be sent again."""

    def __init__(self, queued: Sequence[Queued], results: list[Any], resent: set[int],
                 unknown: list[int]):
        self.queued, self.results, self.resent, self.unknown = queued, results, resent, unknown
        self.resend: list[int] = []
        self.splits: list[int] = []
        self.asks: list[tuple[int, Any]] = []
        self.reroute = self.pause = False

    def sort(self, position: int, reply: Any, follow: bool = True) -> None:
        item = self.queued[position]
        if reply is LOST and not item.retry_safe:
            self.unknown.append(position)
        elif item.call is not None and slot_moved(reply) and item.call.splittable():
            self.splits.append(position)
        elif follow and isinstance(reply, redis.exceptions.AskError) and \
                item.args[0] != "EVALSHA":
            # a key the migrating slot's source no longer has: a command reads or writes
            # it on the target (where the key is, or where it is created), as ASK says;
            # a script's other keys may still be on the source, so it waits (below)
            self.asks.append((position, reply))
        elif reply is NOT_SENT or reply is LOST or isinstance(reply, NOT_RUN_ERRORS) or \
                not_local(reply):
            self.resend.append(position)
            if reply is LOST:
                self.resent.add(position)
            self.reroute = True
            # MOVED: the slot map read again says where to go; anything else (a slot
            # migrating, a failover) needs time
            self.pause = self.pause or not isinstance(reply, redis.exceptions.MovedError)
        elif isinstance(reply, redis.exceptions.NoScriptError):
            self.resend.append(position)  # the scripts were just loaded on that node
        else:
            self.results[position] = reply


class Batch:
    """Calls queued in order, with barriers; execute() sends them (see the module doc)."""

    def __init__(self, executor: Executor):
        self._executor = executor
        self._queued: list[Queued] = []
        self._segment = 0
        self._preamble = 0
        self.resent: set[int] = set()
        """After execute(): positions of calls sent again after a lost reply."""

    def __len__(self) -> int:
        return len(self._queued) - self._preamble

    def preamble(self, *args: Any) -> None:
        """Queue an idempotent write whose reply nobody reads (a deferred cleanup); it
        takes no position in execute()'s results. Only before any other call."""
        if len(self._queued) != self._preamble:
            raise AssertionError("preamble commands go first")
        self.command(*args, retry_safe=True)
        self._preamble += 1

    def call(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any],
             retry_safe: bool = False, read_only: bool = False, one_tag: bool = False) -> int:
        """Queue a script call; returns its position in execute()'s results. one_tag: the
        caller built every key from one shard (ShardCall checks it per node key)."""
        if not one_tag:
            tag = tag_of(keys[0]) if keys else None
            if any(tag_of(k) != tag for k in keys):
                raise CrossSlotCall(f"script {script.name} got keys of shard tags "
                                    f"{sorted({tag_of(k) for k in keys})}")
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        return self._queue(script.name, command, keys[0] if keys else None,
                           retry_safe or read_only, not read_only)

    def node_call(self, call: Any) -> int:
        """Queue a shard script's call (scripts.NodeCall, as_queued); returns its position in
        execute()'s results. A call Redis Cluster refuses whole because a slot moved is sent
        again shard by shard (Executor._run_split)."""
        self._queued.append(call.as_queued(self._segment))
        return len(self._queued) - 1 - self._preamble

    def command(self, *args: Any, retry_safe: bool = False) -> int:
        """Queue a plain command (key first); reads are retry-safe, writes only if told."""
        name = str(args[0]).upper()
        routing_key = None if name in KEYLESS_COMMANDS else str(args[1])
        read_only = name in READ_ONLY_COMMANDS
        return self._queue(name, (name, *args[1:]), routing_key, read_only or retry_safe,
                           not read_only)

    def reads(self, commands: Sequence[tuple[Any, ...]]) -> int:
        """Queue many read-only commands at once, each (NAME, key, *args) with NAME upper
        case; returns the position of the first (the others follow in order). The lean
        form of `command` for the hot read paths (match_prefix, batch_is_exist): every
        Queued built in C (zip, then tuple.__new__ without Queued's Python-level __new__)."""
        check_reads(commands)
        first = len(self._queued) - self._preamble
        self._queued += map(tuple.__new__, repeat(Queued), zip(
            map(_first, commands), commands, map(_second, commands), repeat(True),
            repeat(False), repeat(self._segment), repeat(None)))
        return first

    def barrier(self) -> None:
        """Calls queued after this run only once every call before it has completed."""
        if self._queued and self._queued[-1].segment == self._segment:
            self._segment += 1

    def _queue(self, name: str, args: tuple[Any, ...], routing_key: str | None,
               retry_safe: bool, writes: bool) -> int:
        self._queued.append(Queued(name, args, routing_key, retry_safe, writes, self._segment))
        return len(self._queued) - 1 - self._preamble

    def execute(self) -> list[Any]:
        """Results in queue order. A call refused by Redis or a script holds the mapped
        exception in its slot (never raised here: callers decide which refusals matter).
        Raised: OutcomeUnknown, RedisUnavailable (ClusterUnavailable on a cluster),
        ReplicationIncomplete."""
        queued, self._queued, self._segment = self._queued, [], 0
        preamble, self._preamble = self._preamble, 0
        if not queued:
            return []
        started = time.perf_counter()
        results, resent = self._executor.run(queued)
        if script_observers:
            observe_scripts(queued, time.perf_counter() - started)
        self.resent = {position - preamble for position in resent if position >= preamble}
        return results[preamble:]


class Executor:
    """Runs batches on one client (plain Redis or RedisCluster)."""

    def __init__(self, client: Any, scripts: Sequence[LuaScript], policy: Policy):
        self._client = client
        self._scripts = scripts
        self._policy = policy
        self._cluster = isinstance(client, RedisCluster)
        self._last_failure = ""
        """The last connection error a pipeline met, for the error that gives up."""
        self._map_reads = 0
        """How many times this client has read the slot map again (_refresh)."""
        self.at_maxmemory = False
        """Redis refused a write of this client for memory (OOM) and has not taken a
        growing script (put_start, register) since: scripts are then told to free the
        events streams before they add to them (Context.header, lua/_lib.lua emit)."""

    def batch(self) -> Batch:
        return Batch(self)

    @property
    def cluster(self) -> bool:
        return self._cluster

    def node_name(self, key: str) -> str:
        """The name of the cluster node serving a key's slot, as the slot map has it now
        ('' when no node serves it)."""
        try:
            node = self._client.nodes_manager.get_node_from_slot(self._client.keyslot(key))
        except redis.exceptions.SlotNotCoveredError:
            return ""
        return str(node.name)

    def reads(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Replies of read-only commands (as Batch.reads takes them), in order, errors in
        place. On one Redis they go out as one pipeline, whose replies are the answer when
        all came and none is an error; otherwise (a cluster, a lost connection, an error
        reply) they go through a batch and its retries: a read is safe to send again."""
        check_reads(commands)
        if not self._cluster and commands:
            pipeline = Pipeline.start(self._client, list(commands))
            replies = pipeline.finish()
            if pipeline.clean:
                return replies
            if pipeline.error is not None:
                self._last_failure = f"{type(pipeline.error).__name__}: {pipeline.error}"
        batch = self.batch()
        batch.reads(commands)
        return batch.execute()

    def run(self, queued: Sequence[Queued]) -> tuple[list[Any], set[int]]:
        """Replies in queue order (errors mapped), and the positions of calls that were sent
        again after their first reply was lost: they may have run twice (so their reply
        may differ from what the first run would have said)."""
        results: list[Any] = [None] * len(queued)
        resent: set[int] = set()
        since = self._map_reads
        if not self._cluster:  # one connection keeps the queue's order: one round trip
            self._run_segment(queued, list(range(len(queued))), results, resent, since)
        else:
            segments: dict[int, list[int]] = defaultdict(list)
            for position, item in enumerate(queued):
                segments[item.segment].append(position)
            for segment in sorted(segments):
                self._run_segment(queued, segments[segment], results, resent, since)
        failed = any(issubclass(kind, Exception) for kind in set(map(type, results)))
        if failed or self.at_maxmemory:  # a batch without errors cannot enter full mode
            for item, result in zip(queued, results):
                if isinstance(result, redis.exceptions.OutOfMemoryError):
                    self.at_maxmemory = True
                elif item.name in GROWING_SCRIPTS and not isinstance(result, Exception):
                    self.at_maxmemory = False
        if failed:
            results = [map_error(r) if isinstance(r, Exception) else r for r in results]
        return results, resent

    def _run_segment(self, queued: Sequence[Queued], positions: list[int],
                     results: list[Any], resent: set[int], since: int) -> None:
        """Send the calls at `positions` until each has its reply (see the module doc);
        `since`: the count of slot map reads when the calls were built."""
        pending = positions
        unknown: list[int] = []
        unconfirmed: list[int] = []
        shortfalls: list[ReplicationIncomplete] = []
        retries = reloads = 0
        while pending:
            if self._map_reads != since:  # shard calls may name shards moved since
                pending = self._split_stale(queued, pending, results, resent, since)
            step = _Replies(queued, results, resent, unknown)
            groups = self._by_node(queued, pending)
            replies = self._send_groups(groups, queued, shortfalls)
            for (_, group), (group_replies, clean, wait_lost) in zip(groups, replies):
                if wait_lost:
                    unconfirmed += unconfirmed_writes(queued, group, group_replies)
                if clean:  # every reply came and none is an error: nothing to sort out
                    for position, reply in zip(group, group_replies):
                        results[position] = reply
                    continue
                for position, reply in zip(group, group_replies):
                    step.sort(position, reply)
            if step.asks:  # commands of a migrating slot, on the node importing it
                asks = self._ask_groups(step.asks)
                followed = self._send_groups(asks, queued, shortfalls, asking=True)
                for (_, group), (group_replies, _, wait_lost) in zip(asks, followed):
                    if wait_lost:
                        unconfirmed += unconfirmed_writes(queued, group, group_replies)
                    for position, reply in zip(group, group_replies):
                        step.sort(position, reply, follow=False)
            if unknown or unconfirmed:
                break
            if step.splits:  # a call of several slots Redis refused whole: nothing of it ran
                self._refresh(0)
                for position in step.splits:
                    self._run_split(queued[position], position, results, resent, since)
            pending = sorted(step.resend)
            if pending and step.reroute:
                retries += 1
                if retries > self._policy.retries:
                    break
                self._refresh(retries if step.pause else 0)
            elif pending:
                reloads += 1
                if reloads > 1:  # NOSCRIPT right after loading: give up, do not spin
                    break
        if unknown:
            calls = ", ".join(describe(queued[i]) for i in unknown[:3])
            raise OutcomeUnknown(f"connection lost after sending {len(unknown)} call(s) that are "
                                 f"not safe to re-send ({calls}); they may or may not have run")
        if unconfirmed:
            calls = ", ".join(describe(queued[i]) for i in unconfirmed[:3])
            raise OutcomeUnknown(
                f"connection lost waiting for the reply of WAIT after {len(unconfirmed)} "
                f"write(s) ({calls}): they ran on the primary, but whether wait_acks="
                f"{self._policy.wait_acks} Redis replicas have them is unknown; send them "
                "again if they are safe to re-send (puts are), else look first")
        if pending:
            unavailable = ClusterUnavailable if self._cluster else RedisUnavailable
            where = "Redis Cluster" if self._cluster else f"Redis at {server_of(self._client)}"
            raise unavailable(f"{where} did not serve {len(pending)} call(s) after "
                              f"{self._policy.retries} retries (first: "
                              f"{describe(queued[pending[0]])}; last error: "
                              f"{self._last_failure or 'none'})")
        if shortfalls:
            raise shortfalls[0]

    def _split_stale(self, queued: Sequence[Queued], pending: list[int], results: list[Any],
                     resent: set[int], since: int) -> list[int]:
        """Shard calls built for shards of which some are no longer on the node the call
        routes to (the slot map was read again since) go split per shard now rather than
        whole to a node that would refuse them; the other positions stay pending."""
        keep = []
        for position in pending:
            call = queued[position].call
            if call is not None and call.splittable() and not call.placed():
                self._run_split(queued[position], position, results, resent, since)
            else:
                keep.append(position)
        return keep

    def _run_split(self, item: Queued, position: int, results: list[Any],
                   resent: set[int], since: int) -> None:
        """A shard script's call that Redis Cluster refused whole (a slot it names moved,
        or a key it touched is not served by that node: nothing of it ran), sent again as
        calls of one shard each, which reroute as any call; its reply is merged back."""
        parts = item.call.split()
        sub = [part.as_queued(item.segment) for part in parts]
        sub_results: list[Any] = [None] * len(sub)
        sub_resent: set[int] = set()
        self._run_segment(sub, list(range(len(sub))), sub_results, sub_resent, since)
        if sub_resent:
            resent.add(position)
        results[position] = item.call.merge(
            parts, [map_error(r) if isinstance(r, Exception) else r for r in sub_results])

    def _by_node(self, queued: Sequence[Queued],
                 positions: list[int]) -> list[tuple[Any, list[int]]]:
        """Positions grouped by the node serving them (None: no node serves the slot now),
        each group in queue order. Grouped by node name: redis-py's ClusterNode is
        hashable only from 7.2."""
        if not self._cluster:
            return [(self._client, list(positions))]
        groups: dict[str | None, list[int]] = defaultdict(list)
        nodes: dict[str | None, ClusterNode | None] = {None: None}
        manager = self._client.nodes_manager
        for position in positions:
            key = queued[position].routing_key
            slot = 0 if key is None else self._client.keyslot(key)
            try:
                node: ClusterNode | None = manager.get_node_from_slot(slot)
            except redis.exceptions.SlotNotCoveredError:
                node = None
            name = None if node is None else node.name
            nodes[name] = node
            groups[name].append(position)
        return [(nodes[name], group) for name, group in groups.items()]

    def _ask_groups(self, asks: list[tuple[int, Any]]) -> list[tuple[Any, list[int]]]:
        """Positions that met ASK grouped by the node the ASK names (None: one this client
        does not know, so they are sent again after the slot map is read)."""
        groups: dict[str, list[int]] = defaultdict(list)
        for position, ask in asks:
            groups[f"{ask.host}:{ask.port}"].append(position)
        manager = self._client.nodes_manager
        return [(manager.get_node(node_name=name), group) for name, group in groups.items()]

    def _send_groups(self, groups: list[tuple[Any, list[int]]], queued: Sequence[Queued],
                     shortfalls: list[ReplicationIncomplete], asking: bool = False
                     ) -> list[tuple[list[Any], bool, bool]]:
        """Writes every node's pipeline first, then reads the replies: the nodes work in
        parallel. Per node: its replies, whether all came and none is an error, and whether
        the reply of its WAIT was lost (sent after its writes, it never came).
        asking: each command goes after an ASKING (a slot the node is importing)."""
        sessions = []
        for node, group in groups:
            client = None if node is None else (node if not self._cluster
                                                 else node.redis_connection)
            commands = [queued[i].args for i in group]
            if asking:
                commands = [command for args in commands for command in (ASKING, args)]
            wait = self._policy.wait_acks > 0 and any(queued[i].writes for i in group)
            if wait:
                commands.append(("WAIT", self._policy.wait_acks,
                                 self._policy.wait_timeout_ms))
            sessions.append((node, client, wait, group, Pipeline.start(
                client, commands, self._policy.wait_timeout_ms if wait else 0)))
        replies = []
        for node, client, wait, group, pipeline in sessions:
            got = pipeline.finish()
            if pipeline.error is not None:
                self._last_failure = f"{type(pipeline.error).__name__}: {pipeline.error}"
            acknowledged = got.pop() if wait else None
            if wait and acknowledged is not NOT_SENT and acknowledged is not LOST and \
                    not acks_enough(acknowledged, self._policy):
                writes = ", ".join(describe(queued[i]) for i in group if queued[i].writes)
                shortfalls.append(replication_incomplete(acknowledged, self._policy,
                                                         name_of(node), writes))
            if asking:
                got = got[1::2]
            clean = pipeline.clean
            if not clean and client is not None and any(
                    isinstance(r, redis.exceptions.NoScriptError) for r in got):
                try:
                    load_scripts(client, self._scripts)
                except CONNECTION_ERRORS as error:  # the refused calls wait for a retry
                    self._last_failure = f"{type(error).__name__}: {error}"
                    got = [NOT_SENT if isinstance(r, redis.exceptions.NoScriptError) else r
                           for r in got]
            replies.append((got, clean, acknowledged is LOST))
        return replies

    def _refresh(self, retry: int) -> None:
        """Pause (doubling per retry; none when a redirect said where to go); on a cluster,
        ask which node serves which slot now."""
        if retry:
            backoff_ms = self._policy.backoff_ms * 2 ** (retry - 1)
            time.sleep(min(backoff_ms, MAX_BACKOFF_MS) / 1000)
        if self._cluster:
            self._map_reads += 1
            with contextlib.suppress(redis.exceptions.RedisError,
                                     redis.exceptions.RedisClusterException):
                self._client.nodes_manager.initialize()


class Pipeline:
    """One node's commands on one connection: sent together, replies read in order.
    Tells apart a connection that could not be made (NOT_SENT: nothing ran) from one lost
    after sending (LOST for each reply that never came: those calls may have run)."""

    def __init__(self, client: Any, commands: list[tuple[Any, ...]], wait_ms: int = 0):
        self.client = client
        self.commands = commands
        self.wait_ms = wait_ms
        """How long the last command (a WAIT) may block on the server: replies are read
        with the socket timeout plus this, so that a WAIT's reply is not taken for lost."""
        self.connection: Any = None
        self.failed: Any = None
        self.error: BaseException | None = None
        """The connection error that made it fail, if one did."""
        self.clean = False
        """After finish(): every reply came and none is an error."""

    @classmethod
    def start(cls, client: Any, commands: list[tuple[Any, ...]], wait_ms: int = 0) -> Pipeline:
        pipeline = cls(client, commands, wait_ms)
        if client is None:
            pipeline.failed = NOT_SENT
            return pipeline
        pool = client.connection_pool
        try:
            pipeline.connection = idle_connections.take(pool)
            if pipeline.connection._sock is None:
                pipeline.connection.connect()
        except CONNECTION_ERRORS \
                as error:
            if pipeline.connection is not None:
                pool.release(pipeline.connection)
                pipeline.connection = None
            pipeline.failed, pipeline.error = NOT_SENT, error
            return pipeline
        try:
            connection = pipeline.connection
            connection.send_packed_command(pack(connection, commands))
        except CONNECTION_ERRORS \
                as error:
            pipeline.failed, pipeline.error = LOST, error  # part may have reached the server
        return pipeline

    def finish(self) -> list[Any]:
        if self.failed is not None:
            self._release(broken=True)
            return [self.failed] * len(self.commands)
        replies: list[Any] = []
        try:
            if self.wait_ms:
                read_timeout(self.connection, self.wait_ms)
            lean = LeanReader.of(self.connection)
            if lean is not None:
                self.clean = lean.read(self.client, self.connection, self.commands, replies)
            else:
                self.clean = True
                for command in self.commands:
                    try:
                        replies.append(self.client.parse_response(self.connection, command[0]))
                    except (redis.exceptions.ResponseError,
                            redis.exceptions.BusyLoadingError) as error:
                        replies.append(error)
                        self.clean = False
        except CONNECTION_ERRORS \
                as error:
            self.clean = False
            self.error = error
            replies += [LOST] * (len(self.commands) - len(replies))
            self._release(broken=True)
            return replies
        self._release(broken=False)
        return replies

    def _release(self, broken: bool) -> None:
        if self.connection is None:
            return
        if broken:
            self.connection.disconnect()
            self.client.connection_pool.release(self.connection)
        else:
            if self.wait_ms:
                read_timeout(self.connection, 0)
            idle_connections.keep(self.client.connection_pool, self.connection)
        self.connection = None


class IdleConnections:
    """Connections that pipelines took from a client's redis-py pool, kept between
    pipelines instead of going back: redis-py 8's pool costs about 18 µs a get and release
    (its observability counters), as much as a loopback round trip. A kept connection is
    checked as the pool checks one it hands out (something unread, or the server closed
    it: reconnected); one whose pipeline broke goes back to the pool disconnected. A
    forked child never uses its parent's (their sockets are the parent's): it takes new
    ones from the pool, which resets itself after a fork. Thread-safe: list pop and append
    are atomic."""

    def __init__(self) -> None:
        self._kept: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    def take(self, pool: Any) -> Any:
        kept = self._kept.get(pool)
        while kept:
            try:
                connection = kept.pop()
            except IndexError:
                break
            if connection.pid != os.getpid():
                continue  # the parent's, copied by a fork: not ours to use or close
            try:
                if connection._sock is not None and connection.can_read():
                    raise redis.exceptions.ConnectionError("connection has unread data")
            except CONNECTION_ERRORS:
                connection.disconnect()  # Pipeline.start connects it again
            return connection
        return pool.get_connection()

    def keep(self, pool: Any, connection: Any) -> None:
        kept = self._kept.get(pool)
        if kept is None:
            kept = self._kept.setdefault(pool, [])
        kept.append(connection)


idle_connections = IdleConnections()


class LeanReader:
    """Replies read with the connection's own hiredis reader, without redis-py's per-reply
    layers (its read_response, parse_response, the client's callbacks): what
    `client.parse_response` returns for a command without a response callback (HMGET,
    HKEYS, EVALSHA ...), at a third of the cost. Commands with a callback (HGETALL, ZSCORE,
    TIME ...) still go through parse_response; RESP3 push messages go to the parser's
    push handler, as read_response sends them. Only where the parser is redis-py's hiredis
    parser, reading a real socket, and holds no reply of its own; otherwise (no hiredis,
    fakeredis's in-process socket, a redis-py whose parser looks different) `of` gives
    None and the pipeline reads through parse_response."""

    _sentinels: dict[type, Any] = {}

    def __init__(self, parser: Any, not_enough_data: Any):
        self.parser = parser
        self.not_enough_data = not_enough_data
        self.push = getattr(parser, "_hiredis_PushNotificationType", None)
        """hiredis's type of RESP3 push messages (None where hiredis has none)."""

    @classmethod
    def of(cls, connection: Any) -> LeanReader | None:
        parser = getattr(connection, "_parser", None)
        if not isinstance(getattr(connection, "_sock", None), socket.socket) or \
                getattr(parser, "_reader", None) is None or \
                not callable(getattr(parser, "read_from_socket", None)) or \
                getattr(parser, "_next_response", False) is not False:
            return None
        kind = type(parser)
        if kind not in cls._sentinels:
            module = sys.modules.get(kind.__module__)
            # redis-py gives hiredis a sentinel for "no complete reply yet" where it has one;
            # older ones let it answer False, which no RESP2 reply is
            cls._sentinels[kind] = getattr(module, "NOT_ENOUGH_DATA", False)
        return cls(parser, cls._sentinels[kind])

    def read(self, client: Any, connection: Any, commands: Sequence[tuple[Any, ...]],
             replies: list[Any]) -> bool:
        """Append one reply per command (an error reply as its exception, as the pipeline
        keeps them); raise the connection's errors as redis-py's read_response does. True
        if no reply is an error."""
        callbacks = client.response_callbacks
        try:
            # redis-py's callback table upper-cases every lookup: once per name
            if any(name in callbacks for name in set(map(_first, commands))):
                return self._read_each(client, connection, commands, replies, callbacks)
            return self._read_plain(len(commands), replies)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            raise
        except OSError as error:  # what read_response turns into ConnectionError
            connection.disconnect()
            raise redis.exceptions.ConnectionError(f"Error while reading: {error}") from error
        except BaseException:
            connection.disconnect()  # as read_response does: the stream is out of step
            raise
        finally:
            interval = getattr(connection, "health_check_interval", 0)
            if interval:
                connection.next_health_check = time.monotonic() + interval

    def _settle(self, reply: Any) -> Any:
        """The first reply from this one on that is a reply: more bytes read while the
        reader has none complete, push messages handed to the parser's handler."""
        parser, missing, push = self.parser, self.not_enough_data, self.push
        while reply is missing or reply.__class__ is push:
            if reply is missing:
                parser.read_from_socket()
            else:
                parser.handle_push_response(reply)
            reply = parser._reader.gets()
        return reply

    def _read_plain(self, count: int, replies: list[Any]) -> bool:
        """`count` replies of commands without callbacks, read in a tight loop, then
        checked all at once."""
        missing, push = self.not_enough_data, self.push
        gets, append, settle = self.parser._reader.gets, replies.append, self._settle
        start = len(replies)
        for _ in range(count):
            reply = gets()
            if reply is missing or reply.__class__ is push:
                reply = settle(reply)
            append(reply)
        return self._checked(replies, start)

    @staticmethod
    def _checked(replies: list[Any], start: int) -> bool:
        """Whether the replies from `start` on hold no error, their types seen in one pass.
        A connection error (a reply, or first in a reply, as redis-py checks) is raised,
        with the replies before it kept; other error replies stay in place."""
        got = replies[start:]
        kinds = set(map(type, got))
        if list in kinds:
            lists = got if kinds == {list} else [r for r in got if r.__class__ is list]
            kinds.update(map(type, map(_first, filter(None, lists))))
        if not any(issubclass(kind, Exception) for kind in kinds):
            return True
        for position, reply in enumerate(got):
            first = reply[0] if reply.__class__ is list and reply else None
            for error in (reply, first):
                if isinstance(error, redis.exceptions.ConnectionError) and not \
                        isinstance(error, redis.exceptions.BusyLoadingError):
                    del replies[start + position:]
                    raise error
        return not any(isinstance(reply, Exception) for reply in got)

    def _read_each(self, client: Any, connection: Any, commands: Sequence[tuple[Any, ...]],
                   replies: list[Any], callbacks: Any) -> bool:
        """Commands of which some have response callbacks: those through parse_response,
        the others read as in _read_plain, one by one."""
        clean = True
        for command in commands:
            if command[0] not in callbacks:
                clean = self._read_plain(1, replies) and clean
                continue
            try:
                replies.append(client.parse_response(connection, command[0]))
            except (redis.exceptions.ResponseError, redis.exceptions.BusyLoadingError) as error:
                replies.append(error)
                clean = False
            if self.parser._reader is None:  # parse_response disconnected
                raise redis.exceptions.ConnectionError("connection closed while reading")
        return clean


def check_reads(commands: Sequence[tuple[Any, ...]]) -> None:
    names = set(map(_first, commands))
    if not names <= READ_ONLY_COMMANDS or names & KEYLESS_COMMANDS:
        raise AssertionError(f"reads() takes keyed read-only commands, got {sorted(names)}")


def pack(connection: Any, commands: list[tuple[Any, ...]]) -> Any:
    """The commands in the Redis protocol: hiredis's packer straight away (our arguments
    are str and int), else redis-py's (twice as slow: it re-checks every argument)."""
    if hiredis is not None:
        try:
            return [b"".join([hiredis.pack_command(command) for command in commands])]
        except TypeError:
            pass
    return connection.pack_commands(commands)


def observe_scripts(queued: Sequence[Queued], seconds: float) -> None:
    """Each script the batch carried, once, with the batch's time (observers.py)."""
    for name in dict.fromkeys(item.name for item in queued if item.args[0] == "EVALSHA"):
        for observer in script_observers:
            observer(name, seconds)


def server_of(client: Any) -> str:
    """host:port (or the socket path) a plain client connects to, for error messages."""
    kwargs = client.connection_pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def name_of(node: Any) -> str:
    return getattr(node, "name", "redis")


def read_timeout(connection: Any, extra_ms: int) -> None:
    """Set a connection's socket to read with its socket timeout plus extra_ms (none when
    it has no timeout, or no real socket: fakeredis)."""
    sock = getattr(connection, "_sock", None)
    timeout = getattr(connection, "socket_timeout", None)
    if timeout and isinstance(sock, socket.socket):
        sock.settimeout(timeout + extra_ms / 1000)


def unconfirmed_writes(queued: Sequence[Queued], group: list[int],
                       replies: list[Any]) -> list[int]:
    """The positions of a group whose WAIT reply was lost that wrote and ran: applied on
    the primary (their replies came), their replication unknown."""
    return [position for position, reply in zip(group, replies)
            if queued[position].writes and reply is not LOST and reply is not NOT_SENT
            and not isinstance(reply, (*NOT_RUN_ERRORS, redis.exceptions.NoScriptError))]


def acks_enough(acknowledged: Any, policy: Policy) -> bool:
    """Whether a WAIT reply counts wait_acks acknowledgements."""
    return isinstance(acknowledged, int) and acknowledged >= policy.wait_acks


def replication_incomplete(acknowledged: Any, policy: Policy, where: str,
                           calls: str) -> ReplicationIncomplete:
    """The error for a WAIT reply that counts too few acknowledgements."""
    return ReplicationIncomplete(
        f"{where}: WAIT counted {acknowledged!r} of wait_acks={policy.wait_acks} Redis "
        f"replica acknowledgements within {policy.wait_timeout_ms} ms for {calls}; these "
        "writes are applied on the primary but a failover now could lose them")


def load_scripts(client: Any, scripts: Sequence[LuaScript]) -> None:
    """SCRIPT LOAD each script. Raises a connection error as redis-py gives it (the caller
    retries), any other refusal as the library's error (PermissionDenied, ScriptError)."""
    pipe = client.pipeline(transaction=False)
    for script in scripts:
        pipe.script_load(script.source)
    try:
        shas = pipe.execute()
    except redis.exceptions.ResponseError as error:
        raise map_error(error) from None
    for script, sha in zip(scripts, shas):
        if sha != script.sha:
            raise ScriptError(f"Redis computed SHA {sha} for {script.name}, expected {script.sha}")


GROWING_SCRIPTS = frozenset({"put", "register"})
"""The scripts without `allow-oom`: Redis refuses them whole at maxmemory, and runs them
again only once there is room."""


def slot_moved(reply: Any) -> bool:
    """Whether Redis Cluster refused a script call whole because a slot of a key it names or
    touches is not served by the node it went to (MOVED, ASK, TRYAGAIN, CROSSSLOT, a script
    touching a "non local key"): nothing of the call ran."""
    if isinstance(reply, (*REROUTE_ERRORS, redis.exceptions.TryAgainError)) or not_local(reply):
        return True
    return isinstance(reply, redis.exceptions.ResponseError) and "CROSSSLOT" in str(reply)


def not_local(reply: Any) -> bool:
    """Whether a script was refused at a key its node does not serve now (its slot moved,
    or is migrating and the key is gone from it). Every script touches each key it writes
    before its first write (lua/_lib.lua), so nothing of it ran."""
    return isinstance(reply, redis.exceptions.ResponseError) and "non local key" in str(reply)


def map_error(result: Any) -> Any:
    if isinstance(result, redis.exceptions.NoPermissionError):
        return PermissionDenied(f"NOPERM {result}")
    if isinstance(result, redis.exceptions.OutOfMemoryError):
        return StoreFull(f"Redis refused a write at maxmemory ({result}); nothing of the "
                         "refused call was written: free room (mooncake-redis evict, remove) "
                         "or raise Redis's maxmemory, then send it again")
    if isinstance(result, redis.exceptions.ResponseError):
        return from_script_error(str(result))
    return result


def raise_first_error(results: Sequence[Any]) -> None:
    for result in results:
        if isinstance(result, MooncakeRedisError):
            raise result


def describe(item: Queued) -> str:
    """A short name for a queued call in error messages: the script or command, and its key."""
    return f"{item.name} {item.routing_key or ''}".strip()


def score_pairs(reply: Sequence[Any]) -> list[tuple[str, float]]:
    """(member, score) pairs of a WITHSCORES reply, whether the client already paired them
    or left them flat (RESP2 as sent)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(member, float(score)) for member, score in reply]
    return [(member, float(score)) for member, score in zip(reply[0::2], reply[1::2])]
