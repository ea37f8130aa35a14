"""The vLLM KV-events ingester, driven by vLLM's own publisher code.

tests/vllm_kv_events.py is vllm/distributed/kv_events.py of the vllm 0.33.0 wheel with
only its vllm imports replaced (the wheel's module imports `vllm`, whose __init__ needs
torch): its event classes and msgspec encoder make the payloads, its ZmqEventPublisher
publishes them on a real PUB socket and answers replay requests on its real ROUTER socket.
Payloads of older releases (events as arrays) are built with msgpack from the documented
structures. Every test asserts on the tree in Redis: real Redis, the cluster and fakeredis
for the writes and the query, real Redis for the ZMQ paths."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import msgpack
import pytest
import zmq
from helpers import assert_consistent, node_fields
from ports import free_port
from vllm_kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    ZmqEventPublisher,
)

from mooncake_redis import Index
from mooncake_redis.cli import main
from mooncake_redis.ingest import cli as ingest_cli
from mooncake_redis.ingest.feed import END_SEQ, Feed
from mooncake_redis.ingest.ingester import Ingester, stored_position
from mooncake_redis.ingest.pods import PROBE, PodWriter, object_key, pods_for_prefix
from mooncake_redis.ingest.vllm_events import InvalidEvent, decode_batch, prefix_hash_of

DEADLINE_S = 20
"""Bound on waiting for ZMQ delivery (liveness only: no test measures time)."""

ENCODE = __import__("msgspec").msgpack.Encoder().encode
"""vLLM's encoder, as its publisher thread builds it."""


def stored(hashes: list[int | bytes], parent: int | bytes | None = None,
           medium: str | None = "GPU") -> BlockStored:
    return BlockStored(block_hashes=hashes, parent_block_hash=parent,
                       token_ids=list(range(16 * len(hashes))), block_size=16, lora_id=None,
                       medium=medium, lora_name=None)


def removed(hashes: list[int | bytes], medium: str | None = "GPU") -> BlockRemoved:
    return BlockRemoved(block_hashes=hashes, medium=medium)


def batch(*events: object, rank: int | None = 0) -> KVEventBatch:
    return KVEventBatch(ts=time.time(), events=list(events), data_parallel_rank=rank)


def apply(writer: PodWriter, *events: object) -> None:
    writer.apply(decode_batch(ENCODE(batch(*events))))


def node(index: Index, block: int | bytes) -> dict[str, str]:
    return node_fields(index, prefix_hash_of(block))


def pod_objects(index: Index, block: int | bytes) -> set[str]:
    return {name for name in node(index, block) if name.startswith("o:")}


CHAIN = [0x1111_0000_0000_0001 + i * 0x0101_0101_0101_0101 for i in range(5)]
"""Block hashes in vLLM's default int form."""


# -- decoding ------------------------------------------------------------------------------


def test_decodes_what_vllm_encodes() -> None:
    sha = bytes(range(32))
    payload = ENCODE(batch(stored([CHAIN[0], CHAIN[1]], parent=sha), removed([sha], "CPU"),
                           AllBlocksCleared(), rank=3))
    decoded = decode_batch(payload)
    assert decoded.data_parallel_rank == 3 and decoded.unknown == 0
    first, second, third = decoded.events
    assert first.block_hashes == (CHAIN[0], CHAIN[1]) and first.parent_block_hash == sha
    assert (first.block_size, first.medium) == (16, "GPU")
    assert second.block_hashes == (sha,) and second.medium == "CPU"
    assert type(third).__name__ == "AllBlocksCleared"


def test_decodes_the_array_form_of_older_releases() -> None:
    """vLLM before 0.11: events array_like, [tag, *fields]; batch [ts, events]."""
    payload = msgpack.packb([1.5, [["BlockStored", [7, 8], None, [1, 2], 16, None],
                                   ["BlockRemoved", [7]], ["AllBlocksCleared"]]])
    decoded = decode_batch(payload)
    assert decoded.data_parallel_rank is None
    first, second, _ = decoded.events
    assert first.block_hashes == (7, 8) and first.parent_block_hash is None
    assert first.medium is None and second.block_hashes == (7,) and second.medium is None


def test_unknown_event_types_are_counted_and_skipped() -> None:
    payload = msgpack.packb([1.0, [{"type": "BlockPinned", "x": 1},
                                   {"type": "BlockRemoved", "block_hashes": [5],
                                    "medium": None}], 0])
    decoded = decode_batch(payload)
    assert decoded.unknown == 1 and decoded.events[0].block_hashes == (5,)


@pytest.mark.parametrize("payload", [
    b"\xc1", msgpack.packb({"ts": 1}), msgpack.packb([1.0, "events"]),
    msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": ["text"], "block_size": 16}]]),
    msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1], "block_size": "16"}]]),
    msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": 5}]]),
    msgpack.packb([1.0, [7]]),
])
def test_malformed_payloads_are_refused(payload: bytes) -> None:
    with pytest.raises(InvalidEvent):
        decode_batch(payload)


def test_block_hashes_map_to_prefix_hashes() -> None:
    sha = bytes(range(32))
    assert prefix_hash_of(sha) == sha.hex()
    assert prefix_hash_of(0xABCD) == "000000000000abcd" + "0" * 48
    assert prefix_hash_of(-1) == "f" * 16 + "0" * 48 == prefix_hash_of(2**64 - 1)
    xx = bytes(16)
    assert prefix_hash_of(xx) == prefix_hash_of(bytes(16)) != prefix_hash_of(bytes(15))
    assert prefix_hash_of(2**64) != prefix_hash_of(0)
    assert all(len(prefix_hash_of(h)) == 64 for h in (xx, 2**70, 5))
    with pytest.raises(InvalidEvent):
        prefix_hash_of(True)


# -- the tree and the query (every backend) ------------------------------------------------


def test_stored_blocks_form_the_chain_with_one_object_per_pod(index: Index) -> None:
    pod_a, pod_b = PodWriter(index, "pod-a"), PodWriter(index, "pod-b")
    apply(pod_a, stored(CHAIN[:3]), stored(CHAIN[3:], parent=CHAIN[2]))
    apply(pod_b, stored(CHAIN[:2]))
    for i, block in enumerate(CHAIN):
        fields = node(index, block)
        assert fields.get("p") == (prefix_hash_of(CHAIN[i - 1]) if i else None)
        expected = {"o:_pod_pod-a", "o:_pod_pod-b"} if i < 2 else {"o:_pod_pod-a"}
        assert pod_objects(index, block) == expected
        children = index.get_node(prefix_hash_of(block)).children
        assert children == ([prefix_hash_of(CHAIN[i + 1])] if i + 1 < len(CHAIN) else [])
    info = index.object_info(object_key(prefix_hash_of(CHAIN[0]), "pod-a"))
    assert info is not None and (info.size, info.state, info.hard_pin) == (0, "complete", True)
    assert index.usage().objects == 7 and index.usage().used_bytes == 0
    assert index.client.smembers(index.ctx.schema.pod_holders) == {"pod-a", "pod-b"}
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 5), ("pod-b", 2)]
    assert pods_for_prefix(index, [999, *CHAIN]) == []  # a run starts at the first block
    assert pods_for_prefix(index, CHAIN[1:]) == [("pod-a", 4), ("pod-b", 1)]
    assert pods_for_prefix(index, [CHAIN[0], 999]) == [("pod-a", 1), ("pod-b", 1)]
    assert_consistent(index)


def test_removal_cascades_and_clear_takes_only_that_pod(index: Index) -> None:
    pod_a, pod_b = PodWriter(index, "pod-a"), PodWriter(index, "pod-b")
    apply(pod_a, stored(CHAIN))
    apply(pod_b, stored(CHAIN[:2]))
    apply(pod_a, removed(CHAIN[3:]))  # the tail: nodes 3 and 4 go
    assert node(index, CHAIN[3]) == {} and node(index, CHAIN[4]) == {}
    assert index.get_node(prefix_hash_of(CHAIN[2])).children == []
    apply(pod_a, removed([CHAIN[1]]))  # pod b still holds block 1
    assert pod_objects(index, CHAIN[1]) == {"o:_pod_pod-b"}
    assert pods_for_prefix(index, CHAIN) == [("pod-b", 2), ("pod-a", 1)]
    apply(pod_a, AllBlocksCleared())
    assert node(index, CHAIN[2]) == {}  # pod a's last object there: the node went
    assert [pod_objects(index, block) for block in CHAIN[:2]] == [{"o:_pod_pod-b"}] * 2
    assert pods_for_prefix(index, CHAIN) == [("pod-b", 2)]
    assert index.usage().objects == 2
    assert_consistent(index)


def test_a_batch_applies_the_last_event_on_each_block(index: Index) -> None:
    pod = PodWriter(index, "pod-a")
    apply(pod, stored(CHAIN[:2]), removed([CHAIN[1]]), stored([CHAIN[2]], parent=CHAIN[1]),
          removed([CHAIN[2]]), stored([CHAIN[2]], parent=CHAIN[1]))
    assert pod_objects(index, CHAIN[1]) == set()  # a shell: block 2 still names it
    assert pod_objects(index, CHAIN[2]) == {"o:_pod_pod-a"}
    apply(pod, stored([CHAIN[4]]), AllBlocksCleared(), stored([CHAIN[3]]))
    assert node(index, CHAIN[4]) == {} and node(index, CHAIN[2]) == {}
    assert pod_objects(index, CHAIN[3]) == {"o:_pod_pod-a"}
    applied = pod.apply(decode_batch(ENCODE(batch(stored([CHAIN[3]]), removed([CHAIN[0]])))))
    assert (applied.already_held, applied.not_held, applied.stored) == (1, 1, 0)
    assert_consistent(index)


def test_other_media_are_other_holders(index: Index) -> None:
    pod = PodWriter(index, "pod-a")
    apply(pod, stored(CHAIN[:2], medium=None), stored(CHAIN[:3], medium="CPU"))
    assert pod_objects(index, CHAIN[0]) == {"o:_pod_pod-a", "o:_pod_pod-a@CPU"}
    apply(pod, removed(CHAIN[:2], medium="GPU"))
    assert pods_for_prefix(index, CHAIN) == [("pod-a@CPU", 3)]
    assert index.client.smembers(index.ctx.schema.pod_holders) == {"pod-a", "pod-a@CPU"}
    apply(pod, AllBlocksCleared())
    assert index.usage().objects == 0 and node(index, CHAIN[0]) == {}


def test_the_query_reads_past_the_probe_for_long_chains(index: Index) -> None:
    chain = [bytes([i]) * 32 for i in range(1, PROBE + 9)]
    apply(PodWriter(index, "long"), stored(chain))
    apply(PodWriter(index, "medium"), stored(chain[:PROBE + 3]))
    apply(PodWriter(index, "short"), stored(chain[:PROBE]))
    apply(PodWriter(index, "first"), stored(chain[:1]))
    assert pods_for_prefix(index, chain) == [("long", PROBE + 8), ("medium", PROBE + 3),
                                             ("short", PROBE), ("first", 1)]


# -- ZMQ: vLLM's publisher and replay socket -----------------------------------------------


@pytest.fixture
def real_index(redis_url: str) -> Index:
    return Index.from_url(redis_url, namespace="vllm")


class LoopbackPublisher(ZmqEventPublisher):
    """vLLM's publisher, binding the loopback endpoints it is given: vLLM binds only wildcard
    (and ipc/inproc) endpoints and connects to the rest, and a wildcard listens on every
    interface of the machine running the tests."""

    @staticmethod
    def _is_bind_endpoint(endpoint: str) -> bool:
        return endpoint.startswith("tcp://127.0.0.1:") or \
            ZmqEventPublisher._is_bind_endpoint(endpoint)


@pytest.fixture
def publisher() -> Iterator[tuple[ZmqEventPublisher, str, str]]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    replay = f"tcp://127.0.0.1:{free_port()}"
    pub = LoopbackPublisher(0, endpoint, replay, topic="kv")
    yield pub, endpoint, replay
    pub.shutdown()


def wait_until_subscribed(pub: ZmqEventPublisher, feed: Feed) -> int:
    """Publish empty batches until the feed gets one (a SUB misses what is sent before it
    has connected); returns how many were published (the next batch's seq)."""
    end = time.monotonic() + DEADLINE_S
    published = 0
    while not feed.receive(50):
        assert time.monotonic() < end, "the feed never received the publisher's batches"
        pub.publish(batch())
        published += 1
    return published


def step_until(ingester: Ingester, seq: int) -> None:
    """Step until the batch of sequence number seq has been delivered."""
    end = time.monotonic() + DEADLINE_S
    while ingester.feed.last_seq is None or ingester.feed.last_seq < seq:
        assert time.monotonic() < end, f"batch {seq} never came (last: {ingester.feed.last_seq})"
        ingester.step(50)


def test_ingests_from_vllms_publisher(real_index: Index,
                                      publisher: tuple[ZmqEventPublisher, str, str]) -> None:
    pub, endpoint, replay = publisher
    feed = Feed(endpoint, "kv", replay)
    base = wait_until_subscribed(pub, feed)
    ingester = Ingester(feed, PodWriter(real_index, "pod-a"))
    pub.publish(batch(stored(CHAIN[:3])))
    pub.publish(batch(stored(CHAIN[3:], parent=CHAIN[2]), removed([CHAIN[4]])))
    step_until(ingester, base + 1)
    assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
    assert node(real_index, CHAIN[3])["p"] == prefix_hash_of(CHAIN[2])
    assert node(real_index, CHAIN[4]) == {}
    assert feed.counters.gaps == 0 and ingester.applied.stored == 4
    feed.close()


def test_a_gap_is_filled_by_vllms_replay_socket(
        real_index: Index, publisher: tuple[ZmqEventPublisher, str, str]) -> None:
    pub, endpoint, replay = publisher
    feed = Feed(endpoint, "kv", replay)
    base = wait_until_subscribed(pub, feed)
    ingester = Ingester(feed, PodWriter(real_index, "pod-a"))
    pub.publish(batch(stored(CHAIN[:2])))
    pub.publish(batch(stored(CHAIN[2:], parent=CHAIN[1])))
    end = time.monotonic() + DEADLINE_S
    while True:  # the subscriber loses the batch of seq base (and empty ones before it)
        assert feed._sub.poll(DEADLINE_S * 1000) and time.monotonic() < end
        if int.from_bytes(feed._sub.recv_multipart()[1], "big") == base:
            break
    step_until(ingester, base + 1)
    assert (feed.counters.gaps, feed.counters.missed) == (1, 0)
    assert feed.counters.replayed >= 1
    assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 5)]
    assert node(real_index, CHAIN[2])["p"] == prefix_hash_of(CHAIN[1])
    feed.close()


class FakeEngine:
    """A PUB socket that sends chosen sequence numbers, and a replay ROUTER that answers as
    vLLM's does ([id, b"", topic, seq, payload] per batch from the start asked, then the end
    marker) from the payloads it is given."""

    def __init__(self, replay: bool = True):
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.endpoint = f"tcp://127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.buffered: dict[int, bytes] = {}
        self.requests: list[int] = []
        self.replay_endpoint: str | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if replay:
            self.router = self.context.socket(zmq.ROUTER)
            port = self.router.bind_to_random_port("tcp://127.0.0.1")
            self.replay_endpoint = f"tcp://127.0.0.1:{port}"
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.router.poll(20):
                continue
            client, _, start = self.router.recv_multipart()
            self.requests.append(int.from_bytes(start, "big"))
            for seq in sorted(s for s in self.buffered if s >= self.requests[-1]):
                self.router.send_multipart([client, b"", b"kv", seq.to_bytes(8, "big"),
                                            self.buffered[seq]])
            self.router.send_multipart([client, b"", b"", END_SEQ, b""])

    def send(self, seq: int, payload: bytes) -> None:
        self.pub.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])

    def subscribe(self, feed: Feed) -> int:
        """Send empty batches until the feed has one and deliver the rest; returns the next
        sequence number."""
        end = time.monotonic() + DEADLINE_S
        seq = 0
        while not feed.receive(50):
            assert time.monotonic() < end
            self.send(seq, ENCODE(batch()))
            seq += 1
        while feed.last_seq is not None and feed.last_seq < seq - 1:
            assert time.monotonic() < end and feed.receive(DEADLINE_S * 1000)
        return seq

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.router.close(0)
        self.pub.close(0)
        self.context.term()


def chain_batch(i: int) -> bytes:
    """Block i of CHAIN, under block i-1."""
    return ENCODE(batch(stored([CHAIN[i]], parent=CHAIN[i - 1] if i else None)))


@contextlib.contextmanager
def fake_engine(index: Index, replay: bool = True) -> Iterator[tuple[FakeEngine, Ingester, int]]:
    """A fake engine, an ingester subscribed to it for pod-a, and the next seq to send."""
    engine = FakeEngine(replay)
    feed = Feed(engine.endpoint, "kv", engine.replay_endpoint)
    try:
        base = engine.subscribe(feed)
        yield engine, Ingester(feed, PodWriter(index, "pod-a")), base
    finally:
        feed.close()
        engine.close()


def test_a_gap_is_filled_from_a_replay_router(real_index: Index) -> None:
    with fake_engine(real_index) as (engine, ingester, base):
        feed = ingester.feed
        engine.buffered = {base + i: chain_batch(i) for i in range(4)}
        engine.send(base, chain_batch(0))
        engine.send(base + 3, chain_batch(3))  # 1 and 2 never come on the PUB socket
        step_until(ingester, base + 3)
        assert engine.requests == [base + 1]
        assert (feed.counters.gaps, feed.counters.replayed, feed.counters.missed) == (1, 2, 0)
        assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
        assert node(real_index, CHAIN[2])["p"] == prefix_hash_of(CHAIN[1])


def test_a_gap_without_replay_is_counted_and_the_blocks_are_missing(real_index: Index) -> None:
    with fake_engine(real_index, replay=False) as (engine, ingester, base):
        feed = ingester.feed
        engine.send(base, chain_batch(0))
        engine.send(base + 3, chain_batch(3))
        step_until(ingester, base + 3)
        assert (feed.counters.gaps, feed.counters.missed, feed.counters.replayed) == (1, 2, 0)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN[:4]] == \
            [True, False, False, True]
        assert node(real_index, CHAIN[2]) != {}  # a shell: block 3 names it as its parent


def test_replay_that_no_longer_has_the_batches_counts_them_missed(real_index: Index) -> None:
    with fake_engine(real_index) as (engine, ingester, base):
        feed = ingester.feed
        engine.buffered = {base + i: chain_batch(i) for i in (3, 4)}  # 1 and 2 left the buffer
        engine.send(base, chain_batch(0))
        engine.send(base + 4, chain_batch(4))
        step_until(ingester, base + 4)
        assert (feed.counters.replayed, feed.counters.missed) == (1, 2)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN] == \
            [True, False, False, True, True]


def test_a_publisher_restart_clears_the_pod(real_index: Index) -> None:
    with fake_engine(real_index, replay=False) as (engine, ingester, base):
        feed = ingester.feed
        apply(ingester.writer, stored(CHAIN[:3]))
        engine.send(base, chain_batch(3))
        step_until(ingester, base)
        engine.send(0, ENCODE(batch(stored([CHAIN[4]]))))  # the sequence starts over
        end = time.monotonic() + DEADLINE_S
        while feed.counters.restarts == 0:
            assert time.monotonic() < end
            ingester.step(50)
        assert ingester.applied.cleared == 4
        assert [bool(pod_objects(real_index, block)) for block in CHAIN] == [False] * 4 + [True]


def test_a_restarted_ingester_resumes_where_the_last_one_stopped(real_index: Index) -> None:
    """The position is stored after each batch: a new ingester of the pod asks the replay
    socket for what was published while none ran."""
    with fake_engine(real_index) as (engine, ingester, base):
        engine.send(base, chain_batch(0))
        step_until(ingester, base)
        assert stored_position(real_index, "pod-a") == base
        ingester.feed.close()
        feed = Feed(engine.endpoint, "kv", engine.replay_endpoint,
                    last_seq=stored_position(real_index, "pod-a"))
        try:
            restarted = Ingester(feed, PodWriter(real_index, "pod-a"))
            engine.buffered = {base + 1: chain_batch(1), base + 2: chain_batch(2)}
            end = time.monotonic() + DEADLINE_S
            while not restarted.batches:  # until the new subscription hears base + 3
                assert time.monotonic() < end
                engine.send(base + 3, chain_batch(3))
                restarted.step(50)
            assert engine.requests == [base + 1]
            assert (feed.counters.replayed, feed.counters.missed) == (2, 0)
            assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
            assert stored_position(real_index, "pod-a") == base + 3
        finally:
            feed.close()


def test_a_bad_batch_is_skipped_and_the_next_applied(real_index: Index) -> None:
    with fake_engine(real_index, replay=False) as (engine, ingester, base):
        engine.send(base, b"not msgpack \xc1")
        engine.send(base + 1, chain_batch(0))
        step_until(ingester, base + 1)
        assert ingester.bad_batches == 1 and pods_for_prefix(real_index, CHAIN) == [("pod-a", 1)]


# -- the commands -------------------------------------------------------------------------


def test_ingest_and_pods_commands(redis_url: str, capsys: pytest.CaptureFixture[str],
                                  caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine(replay=False)
    payload = ENCODE(batch(stored(CHAIN[:3])))
    done = threading.Event()

    def publish() -> None:  # the same batch again and again: the ingester stops after 2
        seq = 0
        while not done.is_set():
            engine.send(seq, payload)
            seq += 1
            time.sleep(0.01)  # pacing: PUB drops what it sends before the subscriber joins

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        code = main(["--url", redis_url, "--namespace", "vllm", "ingest", "--zmq",
                     engine.endpoint, "--pod", "pod-a", "--topic", "kv", "--max-batches", "2",
                     "--log-every", "1"])
    finally:
        done.set()
        sender.join()
        engine.close()
    assert code == 0
    assert "pod pod-a: 1 batches applied" in caplog.text  # --log-every 1
    assert "stopped: pod pod-a: 2 batches applied" in caplog.text
    index = Index.from_url(redis_url, namespace="vllm")
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 3)]
    info = index.object_info(object_key(prefix_hash_of(CHAIN[0]), "pod-a"))
    assert info is not None and info.token == ingest_cli.writer_token("pod-a")

    hashes = [str(h) for h in CHAIN]
    assert main(["--url", redis_url, "--namespace", "vllm", "pods", *hashes]) == 0
    assert capsys.readouterr().out == "pod-a\t3/5\n"
    assert main(["--url", redis_url, "--namespace", "vllm", "pods", "--json",
                 prefix_hash_of(CHAIN[0]), f"0x{CHAIN[1]:016x}"]) == 0
    assert '"matched_blocks": 1' in capsys.readouterr().out  # 0x… is bytes, not the int
    assert main(["--url", redis_url, "--namespace", "vllm", "pods", "7"]) == 1
    assert "no pod holds the first block" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["pods", "xyz"], ["pods"],
                                  ["ingest", "--zmq", "localhost:5557", "--pod", "a"],
                                  ["ingest", "--zmq", "tcp://h:1", "--pod", "a", "--log-every",
                                   "0"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


def test_bad_pod_name_and_missing_extra_fail_clearly(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", redis_url, "ingest", "--zmq", "tcp://127.0.0.1:1", "--pod",
                 "a_b"]) == 1
    assert "pod name 'a_b'" in capsys.readouterr().err
    real = ingest_cli.importlib.util.find_spec
    monkeypatch.setattr(ingest_cli.importlib.util, "find_spec",
                        lambda name: None if name == "zmq" else real(name))
    assert main(["--url", redis_url, "pods", "5"]) == 1
    assert "pip install 'mooncake-redis[vllm]'" in capsys.readouterr().err
