"""The ingest loop: batches from the feed, decoded, applied to the index for one pod, with
a log line every N batches."""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict

from mooncake_redis.errors import InvalidEvent
from mooncake_redis.index import Index

from .feed import Feed
from .kv_events import decode_batch
from .pods import Applied, PodWriter

log = logging.getLogger("mooncake_redis.engines.vllm")


def stored_position(index: Index, pod: str) -> tuple[int, str | None] | None:
    """The last batch an earlier run of the pod's ingester applied, with its digest (None
    from releases that stored the number alone), as "<seq> <digest>"; None: none, or
    forgotten by --reset."""
    stored = index.client.get(index.schema.ingest_position(pod))
    seq, _, digest = str(stored or "").partition(" ")
    return (int(seq), digest or None) if seq.isdigit() else None


class Ingester:
    def __init__(self, feed: Feed, writer: PodWriter, log_every: int = 1000):
        self.feed = feed
        self.writer = writer
        self.log_every = log_every
        self.position_key = writer.index.schema.ingest_position(writer.pod)
        self.applied = Applied()
        self.batches = 0
        """Batches applied."""
        self.bad_batches = 0
        """Batches skipped because they are not KV event batches at all."""

    def step(self, timeout_ms: int = 200) -> int:
        """Apply what the feed delivers within timeout_ms; returns how many batches."""
        applied = 0
        for delivery in self.feed.receive(timeout_ms):
            if delivery.restarted:
                self.applied.cleared += self.writer.clear()
            position = ("SET", self.position_key, f"{delivery.seq} {delivery.digest}")
            try:
                batch = decode_batch(delivery.payload)
            except InvalidEvent as error:
                self.bad_batches += 1
                log.warning("skipping batch %d: %s", delivery.seq, error)
                self.writer.index.client.set(*position[1:])
                continue
            if batch.invalid:
                log.warning("batch %d: %d malformed events skipped, the other %d applied: %s",
                            delivery.seq, batch.invalid, len(batch.events),
                            "; ".join(batch.problems))
            self.applied.add(self.writer.apply(batch, position))
            applied += 1
            self.batches += 1
            if self.batches % self.log_every == 0:
                log.info("%s", self.summary())
        return applied

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
