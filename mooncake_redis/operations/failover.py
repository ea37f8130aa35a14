"""Healing after a failover: the monitor notices that the Redis node serving a shard is no
longer the replication history that last served it, and checks and mends the links of
every node of the namespace, one SCAN page per primary per check, until a sweep of the
namespace mends no link.

Why every node and not just the failed-over node's: a replica promoted before it
received its master's last writes (asynchronous replication) lacks a suffix of them, and
the links of those writes that cross to other masters are left half made: a child on
another master naming a parent whose link step was lost, or a parent on another master
listing a child whose write was lost (tests/test_cluster.py FAILOVER_LOSSES). Both are
found only from the surviving end, which may be in any shard. Nothing else breaks (each
shard's scripts replicate whole: its counters, leaf index and stats stay consistent), so
a sweep checks links only, with fsck's own check and repair (fsck.check_links_of: the
parent each node names lists it, each child it lists names it, at the same epoch,
unless a pending link covers it). The bound: SCAN_COUNT node keys per primary per check
(as the monitor's reclaim sweep), their links read and mended in that check; the cursors
are kept for the next check, and a new failover during a sweep starts it again. A sweep
that mended a link is followed by another: the old master may take writes for a moment
after its replica's promotion (until the cluster's gossip reaches it), and those are
lost too, perhaps after the first sweep read their nodes. The heal ends with a sweep
that mends no link.

How a failover is seen: each shard's stats hash records, in its field `replid`, the
replication ID (INFO replication `master_replid`) of the node that served it when the
monitor last looked. The record is data beside the shard's own keys, so it moves with them:
a replica promoted by a failover (or by `REPLICAOF NO ONE`), a Redis restarted from its
files, or a slot migration serves the shard under another ID than the record holds. Such a
shard starts a heal; once the heal ends, its record is set to the ID now serving it.
A shard without a record (the first check that sees it) is recorded without a sweep, unless
this process saw it under another ID before (the record itself was lost in the failover).
A record that is no ID (junk) only differs from every ID: one sweep, then it is overwritten.
Nothing reads the field but this module; fsck leaves it alone.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import NoPermissionError, RedisClusterException

from mooncake_redis.connection import is_in_process
from mooncake_redis.context import Context
from mooncake_redis.errors import ClusterUnavailable
from mooncake_redis.executor import Batch, server_of
from mooncake_redis.tree.matching import primaries

from .fsck import check_links_of

log = logging.getLogger(__name__)

RECORD_FIELD = "replid"
"""The field of each shard's stats hash holding the replication ID last seen serving it."""

SCAN_COUNT = 1000
"""The bound of a heal: node keys one check asks each primary's SCAN for; the links of
those nodes (both ends) are checked and mended in that check."""

LINK_REPAIRS = ("link", "dangling_link")
"""fsck's repairs of links: a sweep that made any is followed by another one."""


@dataclass
class FailoverPass:
    """What one check did: the Redis nodes seen to have failed over (address ->
    replication ID), the tree nodes whose links it checked and what it mended, and
    whether the heal ended."""

    failovers: dict[str, str] = field(default_factory=dict)
    checked: int = 0
    """Nodes whose links were checked."""
    repaired: Counter[str] = field(default_factory=Counter)
    healed: bool = False
    seconds: float = 0.0
    """For a heal that ended: seconds since the failover that started it was seen."""
    sweeps: int = 0
    """For a heal that ended: how many sweeps it took."""
    sweep_ended: int = 0
    """The number (1, 2, ...) of the heal's sweep that ended in this check; 0 if none."""


failover_observers: list[Callable[[str, FailoverPass], None]] = []
"""Called with (namespace, pass) after every check that saw a failover or checked links
(the metrics exporter's counters)."""


def serving_nodes(ctx: Context) -> dict[str, tuple[str, Any]]:
    """Each shard's serving node: (address, a client of that node). Empty for the
    in-process memory:// store, which has no replication."""
    client = ctx.client
    if is_in_process(client):
        return {}
    if isinstance(client, RedisCluster):
        # the slot map as the cluster says it now (CLUSTER SLOTS), not as cached before a
        # failover
        nodes = {}
        try:
            client.nodes_manager.initialize()
            for shard in ctx.all_shards():
                slot = key_slot(ctx.schema.shard_keys(shard).stats.encode())
                node = client.nodes_manager.get_node_from_slot(slot)
                nodes[shard] = (node.name, node.redis_connection)
        except RedisClusterException as error:  # mid-failover: a slot without a node
            raise ClusterUnavailable(f"the cluster's slot map: {error}") from error
        return nodes
    return dict.fromkeys(ctx.all_shards(), (server_of(client), client))


class FailoverHealer:
    """The monitor's failover watch; `step` once per check. What it keeps between checks
    (the sweep in progress, the IDs it saw) is in memory; the records are in Redis."""

    def __init__(self, scan_count: int = SCAN_COUNT,
                 clock: Callable[[], float] = time.monotonic):
        self.scan_count = scan_count
        self.clock = clock
        self._seen: dict[str, str] = {}
        """shard -> the replication ID this process last saw serving it."""
        self._healing: dict[str, str] = {}
        """shard -> the ID it is to be recorded under once the heal ends."""
        self._cursors: dict[str, int] = {}
        """primary -> its SCAN cursor in the sweep in progress."""
        self._swept: set[str] = set()
        """The primaries this sweep has scanned to the end."""
        self._started = 0.0
        self._repaired: Counter[str] = Counter()
        self._checked = 0
        self._mended = 0
        """Links the sweep in progress mended."""
        self._sweeps = 0
        self._refused = False
        """Whether INFO was refused (said once)."""

    def step(self, ctx: Context) -> FailoverPass:
        result = FailoverPass()
        nodes = serving_nodes(ctx)
        if not nodes:
            return result
        ids = {}
        for name, client in dict(nodes.values()).items():
            try:
                info = client.info("replication")
            except NoPermissionError:  # -@dangerous (docs/RELIABILITY.md, ACL) refuses it
                if not self._refused:
                    log.warning("failover healing is off: the Redis user may not run INFO "
                                "(give it +info; after a failover run fsck --repair)")
                self._refused = True
                return result
            if info.get("role") == "master" and info.get("master_replid"):
                ids[name] = str(info["master_replid"])
        current = {shard: ids[name] for shard, (name, _) in nodes.items() if name in ids}
        records = self._read_records(ctx, list(current))
        unrecorded = []
        failed_over: dict[str, dict[str, str]] = {}
        """Redis node -> each of its shards that failed over -> the ID it was known by."""
        for shard, replid in current.items():
            if shard not in records:
                continue  # no stats yet: a shard nothing wrote holds no links
            known = records[shard] or self._seen.get(shard)
            if known and known != replid and self._healing.get(shard) != replid:
                result.failovers[nodes[shard][0]] = replid
                failed_over.setdefault(nodes[shard][0], {})[shard] = known
                self._healing[shard] = replid
            elif records[shard] != replid and shard not in self._healing:
                unrecorded.append(shard)
            self._seen[shard] = replid
        if result.failovers:
            self._start_sweep(ctx, result, failed_over)
        if unrecorded:
            self._record(ctx, {shard: current[shard] for shard in unrecorded})
        if self._healing:
            self._sweep(ctx, result, current)
        if result.failovers or result.checked:
            for observer in failover_observers:
                observer(ctx.schema.namespace, result)
        return result

    def _read_records(self, ctx: Context, shards: list[str]) -> dict[str, str | None]:
        """shard -> its record (None if none) for the shards whose stats exist."""
        def queue(batch: Batch, shard: str) -> None:
            stats = ctx.schema.shard_keys(shard).stats
            batch.command("EXISTS", stats)
            batch.command("HGET", stats, RECORD_FIELD)

        return {shard: record for shard, (exists, record)
                in ctx.per_shard(queue, shards=shards, raise_errors=True) if exists}

    def _start_sweep(self, ctx: Context, result: FailoverPass,
                     failed_over: dict[str, dict[str, str]]) -> None:
        """A failover seen: the sweep starts (again) from the beginning, since links
        checked before it may have broken since; the heal's time counts from the first."""
        self._started = self._started or self.clock()
        self._cursors, self._swept, self._mended = {}, set(), 0
        for name, replid in sorted(result.failovers.items()):
            shards = sorted(failed_over[name])
            before = sorted(set(failed_over[name].values()))
            log.warning("failover: %s serves shards %s of namespace %s under replication ID "
                        "%s, not %s: checking and mending the namespace's links, %d node "
                        "keys per primary per check", name, ",".join(shards),
                        ctx.schema.namespace, replid, ",".join(before), self.scan_count)

    def _sweep(self, ctx: Context, result: FailoverPass, current: dict[str, str]) -> None:
        """One SCAN page per primary not swept yet: the links of its nodes checked and
        mended (fsck.check_links_of)."""
        keys: list[str] = []
        names = []
        for client in primaries(ctx.client):
            name = server_of(client)
            names.append(name)
            if name in self._swept:
                continue
            cursor, page = client.scan(self._cursors.get(name, 0),
                                       match=ctx.schema.node_pattern(), count=self.scan_count)
            self._cursors[name] = cursor
            if not cursor:
                self._swept.add(name)
            keys += page
        report = check_links_of(ctx, keys, repair=True)
        result.checked = len(keys)
        result.repaired = report.repaired
        self._checked += len(keys)
        self._repaired += report.repaired
        self._mended += sum(report.repaired[kind] for kind in LINK_REPAIRS)
        if not self._swept.issuperset(names):
            return
        self._cursors, self._swept = {}, set()
        self._sweeps += 1
        result.sweep_ended = self._sweeps
        if self._mended:  # links the old master took after the promotion may break still
            log.info("failover sweep %d of namespace %s mended %d links: sweeping again",
                     self._sweeps, ctx.schema.namespace, self._mended)
            self._mended = 0
            return
        # a shard whose node changed again meanwhile keeps its old record: the next check
        # sees that failover and sweeps again
        self._record(ctx, {shard: replid for shard, replid in self._healing.items()
                           if current.get(shard) == replid})
        result.healed = True
        result.seconds = self.clock() - self._started
        result.sweeps = self._sweeps
        log.info("failover healed: namespace %s swept %d times (%d node links checked), "
                 "repaired %s, %.1f s after the failover was seen", ctx.schema.namespace,
                 self._sweeps, self._checked, dict(self._repaired) or "nothing",
                 result.seconds)
        self._healing.clear()
        self._repaired = Counter()
        self._sweeps = self._checked = 0
        self._started = 0.0

    def _record(self, ctx: Context, replids: dict[str, str]) -> None:
        def queue(batch: Batch, shard: str) -> None:
            batch.command("HSET", ctx.schema.shard_keys(shard).stats, RECORD_FIELD,
                          replids[shard])

        if replids:
            ctx.per_shard(queue, shards=list(replids), raise_errors=True)
