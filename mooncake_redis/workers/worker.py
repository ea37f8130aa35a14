"""Runs RQ workers on the eviction queue."""

from __future__ import annotations

from urllib.parse import urlsplit

from .jobs import eviction_queue, import_rq


def run_worker(queue_url: str, burst: bool = False, logging_level: str = "INFO",
               in_process: bool = False) -> bool:
    """Work the eviction queue (until empty, with burst). The in-process memory:// queue
    needs a worker that does not fork, so jobs see the same in-process Redis; so does a
    worker that counts its jobs in metrics (in_process: a forked job's counters would die
    with it)."""
    queue = eviction_queue(queue_url)
    rq = import_rq()
    forks = not in_process and urlsplit(queue_url).scheme != "memory"
    worker_class = rq.Worker if forks else rq.SimpleWorker
    worker = worker_class([queue], connection=queue.connection)
    return worker.work(burst=burst, logging_level=logging_level)
