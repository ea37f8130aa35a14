"""Healing after a failover: the monitor notices that the Redis node serving a shard is no
longer the replication history that last served it, and runs fsck's repair over the
namespace, a few shards per check, until a sweep of it mends no link.

Why a sweep and not just the node's shards: a replica promoted before it received its
master's last writes (asynchronous replication) lacks a suffix of them, and the links of
those writes that cross to other masters are left half made: a child on another master
naming a parent whose link step was lost, or a parent on another master listing a child
whose write was lost (tests/test_cluster.py FAILOVER_LOSSES). Both are found only from
the surviving end, in shards of any node; so the repair is fsck --repair (operations/
fsck.py `check`) over every shard of the namespace, `shards_per_pass` shards per check,
resumed at the next check (a new failover during a sweep starts it again). A sweep that
mended a link is followed by another: the old master may take writes for a moment after
its replica's promotion (until the cluster's gossip reaches it), and those are lost too,
perhaps after the first sweep read their shards. The heal ends with a sweep that mends no
link.

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

from mooncake_redis.connection import is_in_process
from mooncake_redis.context import Context
from mooncake_redis.executor import Batch

from .fsck import SHARDS_PER_STEP, check

log = logging.getLogger(__name__)

RECORD_FIELD = "replid"
"""The field of each shard's stats hash holding the replication ID last seen serving it."""

SHARDS_PER_PASS = SHARDS_PER_STEP
"""Shards a check repairs after a failover (every node of those shards read whole, and the
links from them checked): the namespace's 16 shards in one check at the default layout."""

LINK_REPAIRS = ("link", "dangling_link", "cycle")
"""fsck's repairs of links: a sweep that made any is followed by another one."""


@dataclass
class FailoverPass:
    """What one check did: the nodes seen to have failed over (address -> replication ID),
    the shards checked and what their repair mended, and whether the heal ended."""

    failovers: dict[str, str] = field(default_factory=dict)
    checked: int = 0
    repaired: Counter[str] = field(default_factory=Counter)
    healed: bool = False
    seconds: float = 0.0
    """For a heal that ended: seconds since the failover that started it was seen."""
    sweeps: int = 0
    """For a heal that ended: how many sweeps it took."""


failover_observers: list[Callable[[str, FailoverPass], None]] = []
"""Called with (namespace, pass) after every check that saw a failover or repaired shards
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
        client.nodes_manager.initialize()
        nodes = {}
        for shard in ctx.all_shards():
            slot = key_slot(ctx.schema.shard_keys(shard).stats.encode())
            node = client.nodes_manager.get_node_from_slot(slot)
            nodes[shard] = (node.name, node.redis_connection)
        return nodes
    options = client.connection_pool.connection_kwargs
    name = options.get("path") or f"{options.get('host')}:{options.get('port')}"
    return dict.fromkeys(ctx.all_shards(), (name, client))


class FailoverHealer:
    """The monitor's failover watch; `step` once per check. What it keeps between checks
    (the sweep in progress, the IDs it saw) is in memory; the records are in Redis."""

    def __init__(self, shards_per_pass: int = SHARDS_PER_PASS,
                 clock: Callable[[], float] = time.monotonic):
        self.shards_per_pass = shards_per_pass
        self.clock = clock
        self._seen: dict[str, str] = {}
        """shard -> the replication ID this process last saw serving it."""
        self._healing: dict[str, str] = {}
        """shard -> the ID it is to be recorded under once the heal ends."""
        self._cursor = 0
        self._started = 0.0
        self._repaired: Counter[str] = Counter()
        self._mended = 0
        """Links the sweep in progress mended."""
        self._sweeps = 0

    @property
    def healing(self) -> bool:
        return bool(self._healing)

    def step(self, ctx: Context) -> FailoverPass:
        result = FailoverPass()
        nodes = serving_nodes(ctx)
        if not nodes:
            return result
        ids = {}
        for name, client in dict(nodes.values()).items():
            info = client.info("replication")
            if info.get("role") == "master" and info.get("master_replid"):
                ids[name] = str(info["master_replid"])
        current = {shard: ids[name] for shard, (name, _) in nodes.items() if name in ids}
        records = self._read_records(ctx, list(current))
        unrecorded = []
        for shard, replid in current.items():
            if shard not in records:
                continue  # no stats yet: a shard nothing wrote holds no links
            known = records[shard] or self._seen.get(shard)
            if known and known != replid and self._healing.get(shard) != replid:
                node = nodes[shard][0]
                result.failovers[node] = replid
                self._healing[shard] = replid
            elif records[shard] != replid and shard not in self._healing:
                unrecorded.append(shard)
            self._seen[shard] = replid
        if result.failovers:
            self._start_sweep(ctx, result, records, nodes)
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
                     records: dict[str, str | None], nodes: dict[str, tuple[str, Any]]
                     ) -> None:
        """A failover seen: the sweep starts (again) from the first shard, since links
        checked before it may have broken since; its time counts from the first one."""
        self._started = self._started or self.clock()
        self._cursor = self._mended = 0
        for name, replid in sorted(result.failovers.items()):
            shards = sorted(s for s, (n, _) in nodes.items() if n == name and s in records)
            before = sorted({records[s] or self._seen.get(s) or "?" for s in shards})
            log.warning("failover: %s serves shards %s of namespace %s under replication ID "
                        "%s, not %s: fsck --repair of the namespace, %d shards per check",
                        name, ",".join(shards), ctx.schema.namespace, replid,
                        ",".join(before), self.shards_per_pass)

    def _sweep(self, ctx: Context, result: FailoverPass, current: dict[str, str]) -> None:
        todo = list(ctx.all_shards())
        step = todo[self._cursor:self._cursor + self.shards_per_pass]
        report = check(ctx, repair=True, shards=step)
        result.checked = len(step)
        result.repaired = report.repaired
        self._repaired += report.repaired
        self._mended += sum(report.repaired[kind] for kind in LINK_REPAIRS)
        self._cursor += len(step)
        if self._cursor < len(todo):
            return
        self._cursor = 0
        self._sweeps += 1
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
        log.info("failover healed: namespace %s swept %d times (%d shards), repaired %s, "
                 "%.1f s after the failover was seen", ctx.schema.namespace, self._sweeps,
                 len(todo), dict(self._repaired) or "nothing", result.seconds)
        self._healing.clear()
        self._repaired = Counter()
        self._sweeps = 0
        self._started = 0.0

    def _record(self, ctx: Context, replids: dict[str, str]) -> None:
        def queue(batch: Batch, shard: str) -> None:
            batch.command("HSET", ctx.schema.shard_keys(shard).stats, RECORD_FIELD,
                          replids[shard])

        if replids:
            ctx.per_shard(queue, shards=list(replids), raise_errors=True)
