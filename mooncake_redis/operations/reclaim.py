"""Reclaiming unfinished puts: a processing object whose put_start is older than
put_start_release_timeout_ms (its writer died or gave up) is deleted by the monitor at any
usage, not only when an eviction job runs above the high watermark (and eviction takes
only leaves: an unfinished put in an interior node would wait for ever).

There is no index of processing objects (it would cost every put_start and put_end a
write), so the monitor sweeps the namespace: one SCAN page per primary per check, the
nodes' `np` counters, then only nodes with processing objects read whole. A sweep of N
nodes takes about N / scan_count checks. Each deletion is lua/delete.lua in mode
`reclaim`, which checks again in the script that the object is still processing and past
the timeout (a put_end that came meanwhile wins); each is announced as `revoked`.
"""

from __future__ import annotations

import logging

from mooncake_redis.context import Context
from mooncake_redis.store.deletion import Target, delete_objects
from mooncake_redis.tree.matching import primaries
from mooncake_redis.values import decode_object, split_node, to_int

log = logging.getLogger(__name__)

SCAN_COUNT = 1000
"""Node keys one check asks each primary's SCAN for."""


class Reclaimer:
    """A sweep over the namespace's nodes that resumes where the last check stopped."""

    def __init__(self, scan_count: int = SCAN_COUNT):
        self.scan_count = scan_count
        self._cursors: dict[str, int] = {}

    def step(self, ctx: Context) -> int:
        """One page per primary: delete the unfinished puts past the release timeout among
        its nodes. Returns how many were reclaimed."""
        keys: list[str] = []
        for client in primaries(ctx.client):
            name = str(client)
            cursor, page = client.scan(self._cursors.get(name, 0),
                                       match=ctx.schema.node_pattern(), count=self.scan_count)
            self._cursors[name] = cursor
            keys += page
        if not keys:
            return 0
        release = ctx.settings.put_start_release_timeout_ms
        batch = ctx.batch()
        for key in keys:
            batch.command("HGET", key, "np")
        busy = [key for key, np in zip(keys, batch.execute())
                if not isinstance(np, Exception) and to_int(np) > 0]
        if not busy:
            return 0
        now_ms = ctx.redis_time_ms()
        batch = ctx.batch()
        for key in busy:
            batch.command("HGETALL", key)
        targets: list[Target] = []
        for key, fields in zip(busy, batch.execute()):
            if isinstance(fields, Exception):
                continue  # not a node (fsck --repair drops it)
            prefix_hash = ctx.schema.hash_of_node_key(key)
            for suffix, value in split_node(fields).objects.items():
                stored = decode_object(value)
                if stored is not None and not stored.complete \
                        and stored.time_ms + release <= now_ms:
                    targets.append((prefix_hash + suffix, prefix_hash, suffix))
        reclaimed = sum(result.ok for result in delete_objects(ctx, targets, "reclaim"))
        if reclaimed:
            log.info("reclaimed %d unfinished puts older than put_start_release_timeout_ms "
                     "(%d ms) in namespace %s", reclaimed, release, ctx.schema.namespace)
        return reclaimed
