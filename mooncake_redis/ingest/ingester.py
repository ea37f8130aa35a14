"""The ingest loop: batches from the feed, decoded, applied to the index for one pod, with
a log line every N batches."""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict

from ..errors import InvalidArgument
from ..index import Index
from .feed import Feed
from .pods import Applied, PodWriter
from .vllm_events import InvalidEvent, decode_batch

log = logging.getLogger("mooncake_redis.ingest")


def stored_position(index: Index, pod: str) -> int | None:
    """The last batch an earlier run of the pod's ingester applied (None: none, or
    forgotten by --reset)."""
    stored = index.client.get(index.ctx.schema.ingest_position(pod))
    return int(stored) if stored is not None and str(stored).isdigit() else None


class Ingester:
    def __init__(self, feed: Feed, writer: PodWriter, log_every: int = 1000):
        self.feed = feed
        self.writer = writer
        self.log_every = log_every
        self.position_key = writer.index.ctx.schema.ingest_position(writer.pod)
        self.applied = Applied()
        self.batches = 0
        """Batches applied."""
        self.bad_batches = 0
        """Batches skipped because they could not be decoded or applied as they are."""

    def step(self, timeout_ms: int = 200) -> int:
        """Apply what the feed delivers within timeout_ms; returns how many batches."""
        applied = 0
        for delivery in self.feed.receive(timeout_ms):
            if delivery.restarted:
                self.applied.cleared += self.writer.clear()
            try:
                self.applied.add(self.writer.apply(decode_batch(delivery.payload)))
            except (InvalidEvent, InvalidArgument) as error:
                self.bad_batches += 1
                log.warning("skipping batch %d: %s", delivery.seq, error)
                continue
            applied += 1
            self.batches += 1
            self.save_position(delivery.seq)
            if self.batches % self.log_every == 0:
                log.info("%s", self.summary())
        return applied

    def save_position(self, seq: int) -> None:
        """Record the batch applied (after it was, so a crash in between re-applies it: the
        pod's writer token makes the re-applied puts re-sends, removals find nothing)."""
        self.writer.index.client.set(self.position_key, seq)

    def run(self, stop: threading.Event, max_batches: int | None = None) -> None:
        """Until stop is set (or max_batches have been applied)."""
        while not stop.is_set() and (max_batches is None or self.batches < max_batches):
            self.step()

    def summary(self) -> str:
        counts = {**asdict(self.applied), **asdict(self.feed.counters),
                  "bad_batches": self.bad_batches}
        counts.pop("batches")
        return f"pod {self.writer.pod}: {self.batches} batches applied, " + ", ".join(
            f"{name} {value}" for name, value in counts.items())
