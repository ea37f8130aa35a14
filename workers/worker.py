"""Runs RQ workers on the eviction queue."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import rq

from .jobs import eviction_queue

COMMAND_READ_S = 1.0
"""How long the worker's command-channel thread blocks in one read. rq 3.0 reads for 60 s
at a time, and redis-py 8's PubSubWorkerThread.stop() waits for the read to end, so a
worker that had finished (a --burst run, a SIGTERM) took up to a minute to exit. A read
that ends every second costs one wake-up a second and nothing in Redis; commands sent to
the worker still arrive at once (the read returns on a message)."""


class _PromptExit:
    """Subscribes to rq's command channel as rq does, with reads of COMMAND_READ_S."""

    def subscribe(self: Any) -> None:
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(
            sleep_time=COMMAND_READ_S, daemon=True,
            # rq 3.0 keeps the thread alive through connection errors; rq 1.x has no handler
            exception_handler=getattr(self, "_pubsub_exception_handler", None))


class ForkingWorker(_PromptExit, rq.Worker):
    """rq's Worker (a work horse forked per job) that exits as soon as it is done."""


class InProcessWorker(_PromptExit, rq.SimpleWorker):
    """rq's SimpleWorker (jobs in the worker's own process) that exits as soon as it is
    done."""


def run_worker(queue_url: str, burst: bool = False, logging_level: str = "INFO",
               in_process: bool = False) -> bool:
    """Work the eviction queue (until empty, with burst). The in-process memory:// queue
    needs a worker that does not fork, so jobs see the same in-process Redis; so does a
    worker that counts its jobs in metrics (in_process: a forked job's counters would die
    with it)."""
    queue = eviction_queue(queue_url)
    forks = not in_process and urlsplit(queue_url).scheme != "memory"
    worker_class = ForkingWorker if forks else InProcessWorker
    worker = worker_class([queue], connection=queue.connection)
    return worker.work(burst=burst, logging_level=logging_level)
