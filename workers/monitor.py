"""The watermark monitor: keeps the shards' admission limits fresh, enqueues an eviction
job whenever usage is above the high watermark, reclaims unfinished puts past
put_start_release_timeout_ms at any usage (reclaim.py), unmounts segments whose owners
stopped heart-beating (segment_heartbeat_timeout_ms), and heals the links a failover broke
(operations/failover.py: a shard served under another replication ID starts a bounded
fsck --repair sweep)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from mooncake_redis.capacity.admission import rebalance
from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError, RedisUnavailable
from mooncake_redis.operations.failover import FailoverHealer
from mooncake_redis.operations.reclaim import Reclaimer
from mooncake_redis.store.segments import unmount_silent

from .jobs import request_eviction

log = logging.getLogger(__name__)


def watch(ctx: Context, interval_s: float = 1.0, iterations: int | None = None,
          stop: threading.Event | None = None,
          on_enqueued: Callable[[int], None] | None = None) -> int:
    """Check every interval_s seconds (forever, or `iterations` times, or until `stop` is
    set); returns how many jobs it enqueued (each also passed to on_enqueued). A Redis that
    is down or restarting is waited for, not fatal; that it is back is logged once. Any
    other failure of a check (a refused write, say) is logged once and tried again."""
    stop = stop or threading.Event()
    enqueued = tick = 0
    unavailable = False
    failing = ""
    reclaimer = Reclaimer()
    healer = FailoverHealer()
    while (iterations is None or tick < iterations) and not stop.is_set():
        try:
            new = _check(ctx, reclaimer)
            enqueued += new
            if new and on_enqueued is not None:
                on_enqueued(new)
            healer.step(ctx)  # last: a failing repair holds up no eviction
            if unavailable:
                log.info("Redis available again")
                unavailable = False
        # redis-py raises ConnectionError; the executor (rebalance) reports a Redis it could
        # not reach within cluster_retries as RedisUnavailable (ClusterUnavailable).
        except (redis.ConnectionError, redis.TimeoutError, RedisUnavailable) as error:
            log.warning("Redis unavailable (%s); retrying in %.1f s", error, interval_s)
            unavailable = True
        except (MooncakeRedisError, redis.RedisError) as error:
            # a value it cannot use, a refused write: said, and tried again next interval
            if str(error) != failing:
                log.error("monitor check failed (%s); retrying every %.1f s", error,
                          interval_s)
            failing = str(error)
        else:
            failing = ""
        tick += 1
        if iterations is None or tick < iterations:
            stop.wait(interval_s)
    return enqueued


def _check(ctx: Context, reclaimer: Reclaimer) -> int:
    settings = ctx.settings
    unmount_silent(ctx)
    reclaimer.step(ctx)
    shards = rebalance(ctx)
    used = sum(s.used_bytes for s in shards)
    capacity = settings.capacity_bytes
    if capacity and used / capacity > settings.high_watermark and request_eviction(ctx):
        log.info("usage %.1f%% above high watermark %.0f%%: eviction job enqueued",
                 100 * used / capacity, 100 * settings.high_watermark)
        return 1
    return 0
