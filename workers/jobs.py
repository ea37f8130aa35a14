"""RQ eviction jobs: how they are requested (at most one queued per namespace) and run.

A job carries only the namespace and the target: each process reads the URLs it needs
(MOONCAKE_REDIS_URL, MOONCAKE_REDIS_QUEUE_URL) from its own environment, so no password
ever sits in the queue.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

import rq

from mooncake_redis.capacity.eviction import Evictor
from mooncake_redis.connection import connect
from mooncake_redis.context import Context
from mooncake_redis.errors import ConfigurationError
from mooncake_redis.settings import DEFAULT_URL, ENV_PREFIX, ENV_URL

QUEUE_NAME = "mooncake-redis-eviction"
ENV_QUEUE_URL = ENV_PREFIX + "QUEUE_URL"
REQUEST_TTL_MS = 10_000
"""A request marker lives this long, so a job lost before it started does not block the
next request for more than this."""
JOB_TIMEOUT_S = 600


def eviction_queue(queue_url: str) -> rq.Queue:
    if not queue_url:
        raise ConfigurationError(f"no eviction queue: set {ENV_QUEUE_URL} (e.g. "
                                 "redis://localhost:6379/1) to run eviction in RQ workers")
    if urlsplit(queue_url).scheme == "redis+cluster":
        raise ConfigurationError(
            f"the eviction queue needs a plain Redis (RQ does not run on Redis Cluster): set "
            f"{ENV_QUEUE_URL} to a redis:// or rediss:// URL, e.g. one master's or another "
            "Redis's")
    return rq.Queue(QUEUE_NAME, connection=connect(queue_url, decode_responses=False))


def request_eviction(ctx: Context, target_ratio: float | None = None,
                     follow_up: bool = False) -> bool:
    """Enqueue an eviction job for the namespace unless one is already queued. Called when
    put_start is refused for space, by the monitor above the watermark, and by a job that
    stopped at its round limit (follow_up: always enqueued). Returns whether it enqueued."""
    queue = eviction_queue(ctx.options.queue_url)  # no queue: refuse before the marker
    marker = ctx.schema.eviction_requested
    if not follow_up and not ctx.client.set(marker, "1", nx=True, px=REQUEST_TTL_MS):
        return False
    try:
        queue.enqueue(eviction_job, ctx.schema.namespace, target_ratio,
                      job_timeout=JOB_TIMEOUT_S,
                      description=f"evict namespace {ctx.schema.namespace}")
    except Exception:
        ctx.client.delete(marker)  # a failed request must not block the next one
        raise
    return True


def eviction_job(namespace: str, target_ratio: float | None = None) -> dict[str, Any]:
    """One eviction job (run by an RQ worker) on the index at MOONCAKE_REDIS_URL; a
    follow-up job is enqueued when it stopped at its round limit above target."""
    url = os.environ.get(ENV_URL) or DEFAULT_URL
    ctx = Context.open(connect(url), namespace, read_only=True)
    ctx.client.delete(ctx.schema.eviction_requested)
    report = Evictor(ctx).run(target_ratio)
    if report.more_work and ctx.options.queue_url:
        request_eviction(ctx, target_ratio, follow_up=True)
    result = asdict(report) | {"summary": report.summary()}
    result["resolver"] = asdict(report.resolver)
    return result
