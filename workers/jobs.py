"""RQ eviction jobs: how they are requested (at most one queued per namespace) and run."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import rq

from mooncake_redis.connection import connect
from mooncake_redis.errors import ConfigurationError
from mooncake_redis.index import Index

QUEUE_NAME = "mooncake-redis-eviction"
REQUEST_TTL_MS = 10_000
"""A request marker lives this long, so a job lost before it started does not block the
next request for more than this."""
JOB_TIMEOUT_S = 600


def eviction_queue(queue_url: str) -> rq.Queue:
    if not queue_url:
        raise ConfigurationError("queue_url is not set: set it (e.g. MOONCAKE_REDIS_QUEUE_URL="
                                 "redis://localhost:6379/1) to run eviction in RQ workers")
    return rq.Queue(QUEUE_NAME, connection=connect(queue_url, decode_responses=False))


def request_eviction(index: Index, target_ratio: float | None = None,
                     follow_up: bool = False) -> bool:
    """Enqueue an eviction job for the namespace unless one is already queued. Called by
    put_start when refused for space, by the monitor above the watermark, and by a job
    that stopped at its round limit (follow_up: always enqueued). Returns whether a job
    was enqueued."""
    if index.url is None:
        raise ConfigurationError("this Index was built from a client, not a URL; a worker "
                                 "could not reach it. Use Index.from_url")
    marker = index.schema.eviction_requested
    if not follow_up and not index.client.set(marker, "1", nx=True, px=REQUEST_TTL_MS):
        return False
    eviction_queue(index.config.queue_url).enqueue(
        eviction_job, index.url, index.schema.namespace, target_ratio,
        job_timeout=JOB_TIMEOUT_S, description=f"evict namespace {index.schema.namespace}")
    return True


def eviction_job(index_url: str, namespace: str,
                 target_ratio: float | None = None) -> dict[str, Any]:
    """One eviction job (run by an RQ worker): bounded rounds under the namespace's lock;
    a follow-up job is enqueued when it stopped at its round limit above target."""
    index = Index.from_url(index_url, namespace=namespace)
    index.client.delete(index.schema.eviction_requested)
    report = index.evict(target_ratio)
    if report.more_work and index.config.queue_url:
        request_eviction(index, target_ratio, follow_up=True)
    return asdict(report) | {"summary": report.summary()}
