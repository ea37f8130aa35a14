"""Runs RQ workers on the eviction queue."""

from __future__ import annotations

from urllib.parse import urlsplit

import rq

from .jobs import eviction_queue


def run_worker(queue_url: str, burst: bool = False, logging_level: str = "INFO") -> bool:
    """Work the eviction queue (until empty, with burst). The in-process memory:// queue
    needs a worker that does not fork, so jobs see the same in-process Redis."""
    queue = eviction_queue(queue_url)
    worker_class = rq.SimpleWorker if urlsplit(queue_url).scheme == "memory" else rq.Worker
    worker = worker_class([queue], connection=queue.connection)
    return worker.work(burst=burst, logging_level=logging_level)
