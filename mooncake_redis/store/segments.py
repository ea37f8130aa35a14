"""Segments: the storage that replicas live on, as Mooncake's master knows it.

A data plane mounts a segment (a node's memory pool, a disk directory) with its capacity;
from then on put_start accepts replicas on it, counts their bytes against it, and the
namespace's capacity is the sum of its mounted segments. Who allocates bytes inside a
segment stays with the data plane: the store records where each replica is and tells
the data plane, through the events streams, when bytes can be freed.

The registry (`<ns>:segments`, lua/segment.lua) says which segments exist and their
state; every shard's stats hold a flag `m:<segment>` that put_start checks in its own
script, so a put on a segment that is not mounted is refused at once on every shard.

Unmounting (a node died, or is leaving) marks the segment unmounting, clears its flag in
every shard (no new replica can land on it after that), then sweeps the namespace's nodes
with SCAN, a page per script call (lua/invalidate.lua): each replica on the segment is
dropped, an object left without replicas is deleted and its node unregistered with
cascade, and every object touched is announced. The SCAN cursors are stored in the
registry after every page, so a sweep cut short (max_nodes, or a crash) resumes where it
stopped; the segment leaves the registry when its sweep is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mooncake_redis.capacity.admission import read_segments, rebalance
from mooncake_redis.context import Context
from mooncake_redis.errors import (
    InvalidArgument,
    MooncakeRedisError,
    SegmentExists,
    SegmentNotMounted,
    SegmentUnmounting,
)
from mooncake_redis.segment_registry import DONE, Segment, check_name
from mooncake_redis.tree.links import Intent, cascade, triples
from mooncake_redis.tree.matching import SCAN_COUNT, primaries
from mooncake_redis.validation import check_count, check_size

log = logging.getLogger(__name__)


@dataclass
class UnmountReport:
    """What one unmount_segment call did."""

    segment: str
    done: bool = False
    """True once the sweep finished and the segment left the registry."""
    nodes: int = 0
    """Nodes swept by this call."""
    objects: int = 0
    """Objects that lost a replica."""
    deleted: int = 0
    """Objects deleted because no replica was left."""
    bytes: int = 0
    """Bytes freed (each dropped replica's share)."""


def mount(ctx: Context, name: str, capacity_bytes: int, *, remount: bool = False) -> Segment:
    """Register a segment (or, with remount, change a mounted one's capacity), then flag it
    in every shard so put_start accepts replicas on it."""
    register(ctx, name, capacity_bytes, remount=remount)
    segment = registered(ctx, name)
    flag_mounted(ctx, segment)
    _capacity_changed(ctx)
    return segment


def register(ctx: Context, name: str, capacity_bytes: int, *, remount: bool = False) -> None:
    """A mount's first step: the registry entry."""
    name = check_name(name)
    capacity = check_size(capacity_bytes, 1 << 62)
    if capacity == 0:
        raise InvalidArgument("a segment's capacity_bytes must be positive")
    reply = _registry(ctx, "remount" if remount else "mount", name, capacity)
    if reply == "EXISTS unmounting":
        reply = "UNMOUNTING"
    if reply.startswith("EXISTS"):
        raise SegmentExists(f"segment {name} is registered already ({reply[7:]}); "
                            "remount_segment changes a mounted segment's capacity")
    if reply == "UNMOUNTING":
        raise SegmentUnmounting(f"segment {name} is being unmounted; run unmount_segment "
                                "to the end before mounting it again")


def registered(ctx: Context, name: str) -> Segment:
    """A mount's second step: the entry the registry holds now (its generation)."""
    segment = read_segments(ctx).get(name)
    if segment is None or not segment.mounted:
        raise SegmentUnmounting(f"segment {name} was unmounted while it was being mounted")
    return segment


def flag_mounted(ctx: Context, segment: Segment) -> None:
    """A mount's last step: the flags of the segment's generation in every shard. An
    unmount of that generation that got there first wins: its tombstones refuse them."""
    if not _set_flags(ctx, segment.name, True, segment.mounted_ms):
        raise SegmentUnmounting(f"segment {segment.name} was unmounted while it was being "
                                "mounted")


def heartbeat(ctx: Context, name: str) -> None:
    """The segment's owner is alive (see segment_heartbeat_timeout_ms)."""
    reply = _registry(ctx, "heartbeat", check_name(name))
    if reply == "ABSENT":
        raise SegmentNotMounted(f"segment {name} is not mounted")
    if reply == "UNMOUNTING":
        raise SegmentUnmounting(f"segment {name} is being unmounted")


def unmount(ctx: Context, name: str, max_nodes: int | None = None,
            on_page: Callable[[UnmountReport], None] | None = None) -> UnmountReport:
    """Unmount a segment: from now on no replica can be put on it; sweep the namespace
    (resuming an earlier call's sweep) until done or max_nodes nodes were swept."""
    name = check_name(name)
    if max_nodes is not None:
        check_count(max_nodes, "max_nodes", minimum=1)
    reply = _registry(ctx, "unmount", name)
    if reply == "ABSENT":
        raise SegmentNotMounted(f"segment {name} is not registered")
    generation, stored_cursors = reply
    _set_flags(ctx, name, False, int(generation))
    _capacity_changed(ctx)
    report = UnmountReport(name)
    clients = primaries(ctx.client)
    cursors = stored_cursors.split(";") if stored_cursors else []
    if len(cursors) != len(clients):  # first call, or the cluster changed: start over
        cursors = ["0"] * len(clients)
    for number, client in enumerate(clients):
        while cursors[number] != DONE:
            if max_nodes is not None and report.nodes >= max_nodes:
                return report
            cursor, keys = client.scan(int(cursors[number]), match=ctx.schema.node_pattern(),
                                       count=SCAN_COUNT)
            _sweep(ctx, name, keys, report)
            cursors[number] = DONE if int(cursor) == 0 else str(cursor)
            _registry(ctx, "progress", name, ";".join(cursors))
            if on_page is not None:
                on_page(report)
    _registry(ctx, "done", name)
    _capacity_changed(ctx)  # the last segment gone: capacity_bytes applies again
    report.done = True
    log.info("segment %s unmounted: %d nodes swept, %d objects lost a replica, %d deleted, "
             "%d bytes freed", name, report.nodes, report.objects, report.deleted, report.bytes)
    return report


def unmount_silent(ctx: Context, on_page: Callable[[UnmountReport], None] | None = None
                   ) -> list[UnmountReport]:
    """Unmount every segment whose owner's last heartbeat is older than
    segment_heartbeat_timeout_ms (0 = never): a mounted one, and one whose unmount was cut
    short (whoever ran it died mid-sweep: the sweep resumes where it stopped). The monitor
    runs this every interval, a drop-in store's keeper every round (on_page: called after
    each page of a sweep, as unmount's)."""
    timeout = ctx.settings.segment_heartbeat_timeout_ms
    if not timeout:
        return []
    now = ctx.redis_time_ms()
    silent = [s for s in read_segments(ctx).values() if s.heartbeat_ms + timeout < now]
    reports = []
    for segment in silent:
        name = segment.name
        log.warning("segment %s missed its heartbeats for %d ms: %s", name, timeout,
                    "unmounting it" if segment.mounted else "finishing its unmount")
        try:
            reports.append(unmount(ctx, name, on_page=on_page))
        except SegmentNotMounted:  # another keeper (or the monitor) finished it meanwhile
            continue
    return reports


def _sweep(ctx: Context, name: str, node_keys: list[str], report: UnmountReport) -> None:
    if not node_keys:
        return
    calls = ctx.calls("invalidate", name)
    for node_key in node_keys:
        prefix_hash = ctx.schema.hash_of_node_key(node_key)
        calls.item(ctx.shard(prefix_hash), prefix_hash, prefix_hash)
    batch = ctx.batch()
    calls.queue(batch)
    results = batch.execute()
    intents: list[Intent] = []
    for _, reply in calls.replies(results):
        if isinstance(reply, MooncakeRedisError):
            raise reply
        intents += triples(reply[1])
        for outcome in reply[0]:
            touched, deleted, freed = (int(x) for x in outcome.split(":"))
            report.objects += touched
            report.deleted += deleted
            report.bytes += freed
    report.nodes += len(node_keys)
    cascade(ctx, intents)


def _set_flags(ctx: Context, name: str, mounted: bool, generation: int) -> bool:
    """Set (mount) or clear (unmount) the segment's flag in every shard, for the mount of
    this generation (lua/segment_flag.lua); False if a mount was refused in any shard (an
    unmount of this generation got there first)."""
    replies = ctx.per_shard(lambda batch, shard: batch.call(
        ctx.scripts["segment_flag"], [ctx.schema.shard_keys(shard).stats],
        ["mount" if mounted else "unmount", name, generation], retry_safe=True),
        raise_errors=True)
    return all(int(reply) for _, (reply,) in replies)


def _capacity_changed(ctx: Context) -> None:
    """The namespace's capacity follows its mounted segments: re-read, and give the
    shards their new limits."""
    ctx.reload_settings()
    rebalance(ctx)


def _registry(ctx: Context, operation: str, name: str, *args: object) -> Any:
    batch = ctx.batch()
    batch.call(ctx.scripts["segment"], [ctx.schema.segments], [operation, name, *args],
               retry_safe=operation in ("unmount", "progress", "done", "heartbeat"))
    (reply,) = batch.execute()
    if isinstance(reply, MooncakeRedisError):
        raise reply
    return reply if isinstance(reply, list) else str(reply)
