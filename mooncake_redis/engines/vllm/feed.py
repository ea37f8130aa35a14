"""vLLM's ZMQ feed of KV event batches, in sequence order.

vLLM's ZmqEventPublisher sends each batch on its PUB socket as the frames [topic, seq
(8 bytes, big-endian), payload], seq counting from 0, and keeps the last buffer_steps
payloads for its replay ROUTER socket: a request [b"", start seq (8 bytes)] is answered
with one message [b"", topic, seq, payload] per buffered batch from start on, then the end
marker [b"", b"", -1 (8 bytes, signed), b""] (releases before 0.11 leave the topic out).

A feed that knows no position yet (a fresh ingester, or after --reset) starts at batch 0:
it first asks the replay socket from 0, so what the engine buffered before the ingester
started (the last buffer_steps batches) is delivered too; batches published before the
first one it hears that that request did not bring (the engine was not up yet, or a SUB
socket joins late) are asked for then, and counted missed where they cannot be had. A
skipped sequence number is a gap: with a replay endpoint the missing batches are asked for
and delivered before the one that showed the gap; those the engine no longer buffers, or
all of them without a replay endpoint, are counted as missed (the tree then lacks their
blocks until they are stored again or removed). A batch heard again (the same number and
bytes: vLLM promises at least once) is a duplicate, skipped and counted. A sequence number
that goes back otherwise, or comes again with other bytes, means the publisher started
over (the engine restarted, and its cache with it) unless the engine still runs the run
this feed follows: the replay socket still holds the last batch applied, with its bytes
(or, where it cannot be asked, the number lies in a gap this run counted missed). Then the
batch is late: skipped and counted (applied out of order it could undo what a later
batch did). A feed resumed at a stored position tells a restart the same way when the engine
published past that position meanwhile: it asks the replay socket for the stored batch,
and other bytes under its number mean another run.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import blake3
import zmq

from mooncake_redis.errors import ConfigurationError

log = logging.getLogger("mooncake_redis.engines.vllm")

END_SEQ = (-1).to_bytes(8, "big", signed=True)
"""The replay socket's end-of-replay marker (vLLM's ZmqEventPublisher.END_SEQ)."""
RECENT = 1024
"""Batches whose digests a feed keeps, to tell a duplicate from a restart."""
GAPS_KEPT = 64
"""Gaps (runs of missed batches between two delivered ones) a feed remembers, to tell a
late batch from a restart where the replay socket cannot be asked."""


def digest(payload: bytes) -> str:
    """What tells two batches of one sequence number apart (16 hex digits of blake3)."""
    return blake3.blake3(payload).hexdigest(length=8)


@dataclass
class FeedCounters:
    """Running totals, ready to be exported as metrics."""

    batches: int = 0
    """Delivered, replayed ones included."""
    gaps: int = 0
    """Times the sequence skipped numbers."""
    missed: int = 0
    """Batches lost for good: skipped and not replayed."""
    replayed: int = 0
    replay_failures: int = 0
    """Replay requests that got no (complete) answer in time."""
    restarts: int = 0
    """Times the publisher's sequence started over."""
    duplicates: int = 0
    """Batches heard again (same number, same bytes): skipped."""
    late: int = 0
    """Batches of the run followed heard after later ones (counted missed then): skipped."""
    malformed: int = 0
    """Messages that are not [topic, seq, payload]."""


@dataclass(frozen=True)
class Delivery:
    seq: int
    payload: bytes
    restarted: bool = False
    """The first batch of a publisher that started over: blocks it held before are gone."""

    @property
    def digest(self) -> str:
        return digest(self.payload)


class Feed:
    """A subscription to one publisher (one engine, or one data-parallel rank of it)."""

    def __init__(self, endpoint: str, topic: str = "", replay_endpoint: str | None = None,
                 replay_timeout_s: float = 2.0, context: zmq.Context | None = None,
                 last_seq: int | None = None, last_digest: str | None = None,
                 bind: bool = False):
        """bind: listen on endpoint for the publisher to connect (vLLM's connect mode),
        instead of connecting to it; an endpoint with a wildcard host (tcp://*:PORT) is
        always bound. ConfigurationError if the endpoint cannot be bound or used."""
        self._context = context or zmq.Context.instance()
        self._sub = self._context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.binds = bind or is_wildcard(endpoint)
        try:
            (self._sub.bind if self.binds else self._sub.connect)(endpoint)
        except zmq.ZMQError as error:
            self._sub.close(linger=0)
            raise ConfigurationError(f"cannot {'bind' if self.binds else 'connect to'} "
                                     f"{endpoint}: {error.strerror}") from None
        self.replay_endpoint = replay_endpoint
        self._replay_timeout_ms = max(1, int(replay_timeout_s * 1000))
        self._replay: zmq.Socket | None = None
        self.last_seq: int | None = last_seq
        """The last sequence number delivered (None before the first; given, where an
        earlier run of this pod's ingester stopped)."""
        self._recent: OrderedDict[int, str | None] = OrderedDict()
        """seq -> digest of the last RECENT batches delivered (None: not known)."""
        if last_seq is not None:
            self._recent[last_seq] = last_digest
        self._gaps: list[range] = []
        """The last GAPS_KEPT gaps of this run: runs of batches counted missed between
        two delivered ones."""
        self._catch_up = last_seq is None and replay_endpoint is not None
        """Ask the replay socket for everything it buffers before the first batch."""
        self._check_run = last_seq is not None and last_digest is not None and \
            replay_endpoint is not None
        """Whether the first batch past a resumed position must show that the engine's run
        is still the one that published the stored batch."""
        self.counters = FeedCounters()

    def close(self) -> None:
        self._sub.close(linger=0)
        self._close_replay()

    def receive(self, timeout_ms: int) -> list[Delivery]:
        """The next published batch, if one comes within timeout_ms, preceded by any
        batches a gap before it skipped that the replay socket could give back (on the
        first call of a feed without a position: everything the replay socket buffers)."""
        if self._catch_up:
            self._catch_up = False
            caught_up = self._from_the_start()
            if caught_up:
                return caught_up
        if not self._sub.poll(timeout_ms):
            return []
        frames = self._sub.recv_multipart()
        if len(frames) != 3 or len(frames[1]) != 8:
            self.counters.malformed += 1
            log.warning("ignoring a message of %d frames that is not [topic, seq, payload]",
                        len(frames))
            return []
        return self._in_order(int.from_bytes(frames[1], "big"), frames[2])

    def _from_the_start(self) -> list[Delivery]:
        got = self._ask_replay(0, None)
        if not got:
            return []
        deliveries = [Delivery(seq, got[seq]) for seq in sorted(got)]
        oldest = deliveries[0].seq
        self.counters.replayed += len(deliveries)
        self.counters.missed += oldest
        log.info("indexing the %d batches the engine buffers (%d..%d) before following it%s",
                 len(deliveries), oldest, deliveries[-1].seq,
                 f"; batches 0..{oldest - 1} are no longer buffered: their blocks are missing "
                 "from the tree until stored again or removed" if oldest else "")
        return self._delivered(deliveries)

    def _in_order(self, seq: int, payload: bytes) -> list[Delivery]:
        if self.last_seq is None:  # no position: the engine's batches count from 0
            return self._delivered([*self._before_the_first(seq), Delivery(seq, payload)])
        if seq <= self.last_seq:
            return self._went_back(seq, payload)
        got: dict[int, bytes] | None = None
        if self._check_run:
            self._check_run = False
            got = self._ask_replay(self.last_seq, seq)
            if self._another_run(got):
                return self._restarted(seq, payload, f"the engine's batch {self.last_seq} is "
                                                     "not the one applied last")
        deliveries = self._fill(self.last_seq + 1, seq, got) if seq > self.last_seq + 1 \
            else []
        return self._delivered([*deliveries, Delivery(seq, payload)])

    def _before_the_first(self, seq: int) -> list[Delivery]:
        """Batches 0 .. seq-1 of a feed that had no position when it heard seq first, as
        far as the replay socket has them (the rest counted missed, not as a gap)."""
        if not seq:
            return []
        got = self._ask_replay(0, seq) if self.replay_endpoint else {}
        self.counters.replayed += len(got)
        lost = seq - len(got)
        self.counters.missed += lost
        if lost:
            log.warning("%d of the batches published before the first one heard (0..%d) are "
                        "lost (%s): their blocks are missing from the tree until stored again "
                        "or removed", lost, seq - 1,
                        "no replay endpoint" if not self.replay_endpoint
                        else "not buffered by the engine any more, or no answer in time")
        return [Delivery(number, got[number]) for number in sorted(got)]

    def _went_back(self, seq: int, payload: bytes) -> list[Delivery]:
        """A number at or below the last one: a duplicate, a late batch, or a restart."""
        if self._is_duplicate(seq, payload):
            self.counters.duplicates += 1
            log.debug("skipping batch %d: heard before", seq)
            return []
        if self._is_late(seq):
            self.counters.late += 1
            log.warning("skipping batch %d: heard after batch %d of the same run (applied "
                        "now, it could undo what a later batch did)", seq, self.last_seq)
            return []
        return self._restarted(seq, payload, f"batch {seq} heard after {self.last_seq}")

    def _is_late(self, seq: int) -> bool:
        """Whether a batch whose number went back is one of the run this feed follows:
        the replay socket still holds the last batch applied, with its bytes; where it
        cannot be asked (none, no answer, or it lacks that batch), whether seq lies in a
        gap this run counted missed."""
        assert self.last_seq is not None
        if self.replay_endpoint:
            got = self._ask_replay(self.last_seq, self.last_seq + 1)
            if self.last_seq in got:
                return digest(got[self.last_seq]) == self._recent.get(self.last_seq)
        return any(seq in gap for gap in self._gaps)

    def _another_run(self, got: dict[int, bytes]) -> bool:
        """Whether the replay socket's batches show that the engine restarted since the
        stored position was applied: they hold its number with other bytes."""
        assert self.last_seq is not None
        if self.last_seq not in got:
            log.info("the replay socket did not give batch %d, the last one applied (no "
                     "longer buffered, or no answer): whether the engine restarted meanwhile "
                     "cannot be told, so what follows it is read as the same run",
                     self.last_seq)
            return False
        return digest(got[self.last_seq]) != self._recent.get(self.last_seq)

    def _restarted(self, seq: int, payload: bytes, sign: str) -> list[Delivery]:
        """The publisher started over (the engine restarted): its batches from 0 on, the
        first one marked restarted."""
        self.counters.restarts += 1
        log.warning("the publisher's sequence started over (%s): the engine restarted, so "
                    "the blocks it held are gone", sign)
        self._recent.clear()
        self._gaps.clear()
        self._check_run = False
        deliveries = [*(self._fill(0, seq, gap=False) if seq else []),
                      Delivery(seq, payload)]
        first = deliveries[0]
        deliveries[0] = Delivery(first.seq, first.payload, restarted=True)
        return self._delivered(deliveries)

    def _remember_gaps(self, first: int, stop: int, got: dict[int, bytes]) -> None:
        """The runs of batches first .. stop-1 that got lacks, as gaps of this run."""
        runs, start = [], first
        for seq in sorted(got):
            if seq > start:
                runs.append(range(start, seq))
            start = seq + 1
        if stop > start:
            runs.append(range(start, stop))
        self._gaps = [*self._gaps, *runs][-GAPS_KEPT:]

    def _is_duplicate(self, seq: int, payload: bytes) -> bool:
        """A batch delivered already: its number is among the recent ones with the same
        bytes (or is the last one, whose bytes a resumed feed may not know)."""
        if seq not in self._recent:
            return False
        known = self._recent[seq]
        return known == digest(payload) or (known is None and seq == self.last_seq)

    def _delivered(self, deliveries: list[Delivery]) -> list[Delivery]:
        for delivery in deliveries:
            self._recent[delivery.seq] = delivery.digest
            self._recent.move_to_end(delivery.seq)
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)
        self.last_seq = deliveries[-1].seq
        self.counters.batches += len(deliveries)
        return deliveries

    def _fill(self, first: int, stop: int, asked: dict[int, bytes] | None = None,
              gap: bool = True) -> list[Delivery]:
        """Batches first .. stop-1, as far as the replay socket still has them (asked: its
        answer already, from first or before); gap: the missing ones lie between two
        batches of this run (not before a restarted run's first)."""
        self.counters.gaps += 1
        if asked is None:
            asked = self._ask_replay(first, stop) if self.replay_endpoint else {}
        got = {seq: payload for seq, payload in asked.items() if first <= seq < stop}
        self.counters.replayed += len(got)
        lost = stop - first - len(got)
        self.counters.missed += lost
        if lost and gap:
            self._remember_gaps(first, stop, got)
        if lost:
            log.warning("sequence gap %d..%d: %d batches replayed, %d lost (%s); their blocks "
                        "are missing from the tree until stored again or removed", first,
                        stop - 1, len(got), lost,
                        "no replay endpoint" if not self.replay_endpoint
                        else "not buffered by the engine any more, or no answer in time")
        else:
            log.info("sequence gap %d..%d filled from the replay socket", first, stop - 1)
        return [Delivery(seq, got[seq]) for seq in sorted(got)]

    def _ask_replay(self, first: int, stop: int | None) -> dict[int, bytes]:
        """The replay socket's batches from first on (before stop, if given)."""
        socket = self._replay_socket()
        socket.send_multipart([b"", first.to_bytes(8, "big")])
        got: dict[int, bytes] = {}
        while True:
            if not socket.poll(self._replay_timeout_ms):
                self.counters.replay_failures += 1
                self._close_replay()  # late answers must not be read as the next one's
                return got
            frames = socket.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            if len(frames) == 3:  # topic, seq, payload
                frames = frames[1:]
            if len(frames) != 2 or len(frames[0]) != 8:
                self.counters.malformed += 1
                continue
            seq_bytes, payload = frames
            if seq_bytes == END_SEQ:
                return got
            seq = int.from_bytes(seq_bytes, "big")
            if first <= seq and (stop is None or seq < stop):  # later ones come on PUB too
                got[seq] = payload

    def _replay_socket(self) -> zmq.Socket:
        if self._replay is None:
            assert self.replay_endpoint is not None
            self._replay = self._context.socket(zmq.DEALER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.connect(self.replay_endpoint)
        return self._replay

    def _close_replay(self) -> None:
        if self._replay is not None:
            self._replay.close(linger=0)
            self._replay = None


def is_wildcard(endpoint: str) -> bool:
    """Whether a tcp:// endpoint names every interface (tcp://*:PORT, tcp://[::]:PORT),
    which a socket can bind but not connect to (vLLM's own rule for its publisher)."""
    host = endpoint.partition("://")[2].rpartition(":")[0]
    return endpoint.startswith("tcp://") and host in ("*", "::", "[::]")
