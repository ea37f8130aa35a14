"""The watermark monitor: enqueues an eviction job whenever usage is above the high watermark."""

from __future__ import annotations

import time
from collections.abc import Callable

from mooncake_redis.index import Index

from .jobs import request_eviction


def watch(index: Index, interval_s: float = 1.0, iterations: int | None = None,
          say: Callable[[str], None] = print) -> int:
    """Check usage every interval_s seconds (forever, or `iterations` times); returns how
    many jobs it enqueued."""
    enqueued = 0
    tick = 0
    while iterations is None or tick < iterations:
        usage = index.usage()
        config = index.config
        above = usage.capacity_bytes and usage.ratio > config.high_watermark
        if above and request_eviction(index):
            enqueued += 1
            say(f"usage {usage.ratio:.1%} above high watermark {config.high_watermark:.0%}: "
                "eviction job enqueued")
        tick += 1
        if iterations is None or tick < iterations:
            time.sleep(interval_s)
    return enqueued
