"""The vLLM KV-events ingester, driven through vLLM's wire format.

tests/vllm_wire.py speaks it with this project's own code (msgpack payloads after vLLM
0.33's layouts, a PUB socket, a replay ROUTER); scripts/check_vllm_ingest.py runs the
ingester against vLLM's own publisher from a downloaded wheel. Every test asserts on the
trees in Redis: real Redis, the cluster and fakeredis for the writes and the queries, real
Redis for the ZMQ paths."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import msgpack
import pytest
import xxhash
from clock import joined
from helpers import assert_consistent, node_fields
from ports import free_port
from vllm_wire import (
    Publisher,
    all_blocks_cleared,
    block_removed,
    block_stored,
    encode_batch,
)

from mooncake_redis import Index
from mooncake_redis.cli import ingest as ingest_cli
from mooncake_redis.cli.main import main
from mooncake_redis.engines.vllm.feed import Feed, FeedCounters, digest
from mooncake_redis.engines.vllm.ingester import Ingester, stored_position
from mooncake_redis.engines.vllm.kv_events import InvalidEvent, decode_batch, prefix_hash_of
from mooncake_redis.engines.vllm.pods import (
    PROBE,
    PodWriter,
    object_key,
    pods_for_prefix,
    pods_for_tokens,
)
from mooncake_redis.engines.vllm.tokens import token_block_hashes, token_prefix_hash
from mooncake_redis.errors import InvalidArgument

DEADLINE_S = 20
"""Bound on waiting for ZMQ delivery (liveness only: no test measures time)."""

CHAIN = [0x1111_0000_0000_0001 + i * 0x0101_0101_0101_0101 for i in range(5)]
"""Block hashes in vLLM's default int form."""
BLOCK = 4
"""Tokens per block in the token tests."""
PROMPT = [100 + i for i in range(len(CHAIN) * BLOCK)]
"""The tokens of CHAIN's blocks, BLOCK per block."""


def stored(hashes: list[int | bytes], parent: int | bytes | None = None, **fields: object
           ) -> dict[str, object]:
    """A BlockStored whose tokens are PROMPT's, if the hashes are CHAIN's."""
    if "token_ids" not in fields and all(h in CHAIN for h in hashes):
        fields["token_ids"] = [t for h in hashes for t in tokens_of(h)]
        fields["block_size"] = BLOCK
    return block_stored(hashes, parent, **fields)  # type: ignore[arg-type]


def tokens_of(block: int) -> list[int]:
    i = CHAIN.index(block)
    return PROMPT[i * BLOCK:(i + 1) * BLOCK]


def apply(writer: PodWriter, *events: dict[str, object]) -> None:
    writer.apply(decode_batch(encode_batch(*events)))


def node(index: Index, block: int | bytes) -> dict[str, str]:
    return node_fields(index, prefix_hash_of(block))


def pod_objects(index: Index, block: int | bytes) -> set[str]:
    return {name for name in node(index, block) if name.startswith("o:")}


def token_nodes(blocks: int) -> list[str]:
    return [token_prefix_hash(t) for t in token_block_hashes(PROMPT[:blocks * BLOCK], BLOCK)]


# -- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("as_map", [False, True], ids=["array", "map"])
def test_decodes_both_forms_of_the_batch(as_map: bool) -> None:
    """vLLM 0.33 sends EventBatch as an array; a newer source declares it without
    array_like, a map. Before, the map form was refused as a whole."""
    sha = bytes(range(32))
    payload = encode_batch(stored([CHAIN[0], CHAIN[1]], parent=sha, group_idx=2),
                           block_removed([sha], "CPU", locality="REMOTE"),
                           all_blocks_cleared(), rank=3, as_map=as_map)
    decoded = decode_batch(payload)
    assert decoded.data_parallel_rank == 3 and (decoded.unknown, decoded.invalid) == (0, 0)
    first, second, third = decoded.events
    assert first.block_hashes == (CHAIN[0], CHAIN[1]) and first.parent_block_hash == sha
    assert (first.block_size, first.medium, first.group_idx) == (BLOCK, "GPU", 2)
    assert first.token_ids == tuple(PROMPT[:2 * BLOCK]) and first.tokens_only
    assert second.block_hashes == (sha,) and (second.medium, second.locality) == ("CPU",
                                                                                  "REMOTE")
    assert type(third).__name__ == "AllBlocksCleared"


def test_decodes_the_array_form_of_older_releases() -> None:
    """vLLM before 0.11: events array_like, [tag, *fields]; batch [ts, events]."""
    payload = msgpack.packb([1.5, [["BlockStored", [7, 8], None, [1, 2], 1, None],
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
    b"\xc1", msgpack.packb({"ts": 1}), msgpack.packb([1.0, "events"]), msgpack.packb(7),
    msgpack.packb({"ts": "now", "events": []}), msgpack.packb([1.0, [], "rank"]),
])
def test_payloads_that_are_no_batch_are_refused(payload: bytes) -> None:
    with pytest.raises(InvalidEvent):
        decode_batch(payload)


@pytest.mark.parametrize("event", [
    {"type": "BlockStored", "block_hashes": ["text"], "block_size": 16},
    {"type": "BlockStored", "block_hashes": [1], "block_size": "16"},
    {"type": "BlockStored", "block_hashes": [1], "block_size": 1, "token_ids": ["a"]},
    {"type": "BlockRemoved", "block_hashes": 5},
    {"type": "BlockRemoved", "block_hashes": [5], "medium": "not a medium!"},
    {"type": "BlockRemoved", "block_hashes": [5], "group_idx": -1},
    {"type": "BlockRemoved", "block_hashes": [b""]},
    7,
])
def test_a_malformed_event_is_refused_alone(event: object) -> None:
    """Before, one bad event made decode_batch refuse the whole batch."""
    good = {"type": "BlockRemoved", "block_hashes": [5], "medium": None}
    decoded = decode_batch(msgpack.packb([1.0, [good, event, good], 0]))
    assert decoded.invalid == 1 and len(decoded.events) == 2 and len(decoded.problems) == 1


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


def test_the_token_hash_is_the_documented_function() -> None:
    """xxh3-64 over the block's tokens as little-endian uint32, seeded with the parent's
    token hash (0 for a sequence's first block)."""
    tokens = [1, 2, 3, 4, 70000, 6, 7, 8, 9]
    first = xxhash.xxh3_64_intdigest(b"".join(t.to_bytes(4, "little") for t in tokens[:4]), 0)
    second = xxhash.xxh3_64_intdigest(b"".join(t.to_bytes(4, "little") for t in tokens[4:8]),
                                      first)
    assert token_block_hashes(tokens, 4) == [first, second]  # the tail of 1 is no block
    assert token_block_hashes(tokens[4:8], 4, parent=first) == [second]
    assert token_prefix_hash(first) == f"{first:016x}" + "0" * 47 + "1"


# -- the trees and the queries (every backend) ---------------------------------------------


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
    assert index.usage().objects == 14 and index.usage().used_bytes == 0  # 7 + their tokens'
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
    apply(pod_a, block_removed(CHAIN[3:]))  # the tail: nodes 3 and 4 go, in both trees
    assert node(index, CHAIN[3]) == {} and node(index, CHAIN[4]) == {}
    assert [node_fields(index, h) for h in token_nodes(5)[3:]] == [{}, {}]
    assert index.get_node(prefix_hash_of(CHAIN[2])).children == []
    apply(pod_a, block_removed([CHAIN[1]]))  # pod b still holds block 1
    assert pod_objects(index, CHAIN[1]) == {"o:_pod_pod-b"}
    assert pods_for_prefix(index, CHAIN) == [("pod-b", 2), ("pod-a", 1)]
    assert pods_for_tokens(index, PROMPT, BLOCK) == [("pod-b", 2), ("pod-a", 1)]
    apply(pod_a, all_blocks_cleared())
    assert node(index, CHAIN[2]) == {}  # pod a's last object there: the node went
    assert [pod_objects(index, block) for block in CHAIN[:2]] == [{"o:_pod_pod-b"}] * 2
    assert pods_for_prefix(index, CHAIN) == [("pod-b", 2)]
    assert pods_for_tokens(index, PROMPT, BLOCK) == [("pod-b", 2)]
    assert index.usage().objects == 4
    assert not index.client.exists(index.ctx.schema.token_hashes("pod-a"))
    assert_consistent(index)


def test_a_batch_applies_the_last_event_on_each_block(index: Index) -> None:
    pod = PodWriter(index, "pod-a")
    apply(pod, stored(CHAIN[:2]), block_removed([CHAIN[1]]),
          stored([CHAIN[2]], parent=CHAIN[1]), block_removed([CHAIN[2]]),
          stored([CHAIN[2]], parent=CHAIN[1]))
    assert pod_objects(index, CHAIN[1]) == set()  # a shell: block 2 still names it
    assert pod_objects(index, CHAIN[2]) == {"o:_pod_pod-a"}
    apply(pod, stored([CHAIN[4]]), all_blocks_cleared(), stored([CHAIN[3]]))
    assert node(index, CHAIN[4]) == {} and node(index, CHAIN[2]) == {}
    assert pod_objects(index, CHAIN[3]) == {"o:_pod_pod-a"}
    applied = pod.apply(decode_batch(encode_batch(stored([CHAIN[3]]),
                                                  block_removed([CHAIN[0]]))))
    assert (applied.already_held, applied.not_held, applied.stored) == (1, 1, 0)
    assert_consistent(index)


def test_other_media_are_other_holders(index: Index) -> None:
    pod = PodWriter(index, "pod-a")
    apply(pod, stored(CHAIN[:2], medium=None), stored(CHAIN[:3], medium="CPU"))
    assert pod_objects(index, CHAIN[0]) == {"o:_pod_pod-a", "o:_pod_pod-a@CPU"}
    apply(pod, block_removed(CHAIN[:2], medium="GPU"))
    assert pods_for_prefix(index, CHAIN) == [("pod-a@CPU", 3)]
    assert index.client.smembers(index.ctx.schema.pod_holders) == {"pod-a", "pod-a@CPU"}
    apply(pod, all_blocks_cleared())
    assert index.usage().objects == 0 and node(index, CHAIN[0]) == {}


def test_kv_cache_groups_are_other_holders(index: Index) -> None:
    """A hybrid model's groups hold a block apart: a BlockRemoved in group 1 leaves the
    pod's group 0 holding it. Before, group_idx was ignored and the removal took the
    pod's only entry."""
    pod = PodWriter(index, "pod-a")
    apply(pod, stored(CHAIN[:3], group_idx=0), stored(CHAIN[:2], group_idx=1),
          stored(CHAIN[:1], medium="CPU", group_idx=2))
    assert pod_objects(index, CHAIN[0]) == {"o:_pod_pod-a", "o:_pod_pod-a/g1",
                                            "o:_pod_pod-a@CPU/g2"}
    apply(pod, block_removed(CHAIN[:3], group_idx=1))
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 3), ("pod-a@CPU/g2", 1)]
    assert pods_for_tokens(index, PROMPT, BLOCK) == [("pod-a", 3), ("pod-a@CPU/g2", 1)]
    apply(pod, all_blocks_cleared())
    assert index.usage().objects == 0
    assert_consistent(index)


def test_a_remote_store_is_not_a_block_the_pod_holds(index: Index) -> None:
    """vLLM's locality: REMOTE is a tier the publisher reaches, not memory it holds."""
    pod = PodWriter(index, "pod-a")
    applied = pod.apply(decode_batch(encode_batch(
        stored(CHAIN[:2], medium="STORAGE", locality="REMOTE"),
        stored(CHAIN[:1], locality="LOCAL"))))
    assert (applied.remote, applied.stored) == (2, 1)
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 1)]
    apply(pod, block_removed(CHAIN[:1], locality="REMOTE"))  # not the pod's own copy
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 1)]


def test_a_bad_event_is_refused_alone(index: Index) -> None:
    """Before, one bad event (here an unusable medium) dropped its whole batch."""
    pod = PodWriter(index, "pod-a")
    payload = msgpack.packb([1.0, [stored(CHAIN[:2]),
                                   {"type": "BlockRemoved", "block_hashes": [CHAIN[0]],
                                    "medium": "not a medium!"},
                                   stored(CHAIN[2:3], parent=CHAIN[1])], 0])
    applied = pod.apply(decode_batch(payload))
    assert (applied.bad_events, applied.stored) == (1, 3)
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 3)]


def test_the_query_reads_past_the_probe_for_long_chains(index: Index) -> None:
    chain = [bytes([i]) * 32 for i in range(1, PROBE + 9)]
    apply(PodWriter(index, "long"), block_stored(chain))
    apply(PodWriter(index, "medium"), block_stored(chain[:PROBE + 3]))
    apply(PodWriter(index, "short"), block_stored(chain[:PROBE]))
    apply(PodWriter(index, "first"), block_stored(chain[:1]))
    assert pods_for_prefix(index, chain) == [("long", PROBE + 8), ("medium", PROBE + 3),
                                             ("short", PROBE), ("first", 1)]


def test_a_router_asks_with_tokens_alone(index: Index) -> None:
    """Each block also lives under its token hash, chained across events and batches
    (the parent's from memory, or from the holder's map for a new writer): a router
    hashes the prompt's tokens and finds the pods without vLLM's hashing code or seed."""
    apply(PodWriter(index, "pod-a"), stored(CHAIN[:2]))
    apply(PodWriter(index, "pod-a"), stored(CHAIN[2:4], parent=CHAIN[1]))  # a restart
    pod_b = PodWriter(index, "pod-b")
    apply(pod_b, stored(CHAIN[:1]))
    apply(pod_b, stored(CHAIN[1:3], parent=CHAIN[0]))
    assert pods_for_tokens(index, PROMPT, BLOCK) == [("pod-a", 4), ("pod-b", 3)]
    assert pods_for_tokens(index, PROMPT[:9], BLOCK) == [("pod-a", 2), ("pod-b", 2)]
    assert pods_for_tokens(index, PROMPT[1:], BLOCK) == []  # other blocks
    nodes = token_nodes(4)
    assert [node_fields(index, h).get("p") for h in nodes] == [None, *nodes[:3]]
    assert index.client.hget(index.ctx.schema.token_hashes("pod-a"),
                             prefix_hash_of(CHAIN[3])[:16]) == nodes[3][:16]
    assert_consistent(index)


def test_blocks_whose_hash_covers_more_than_tokens_get_no_token_hash(index: Index) -> None:
    """A LoRA adapter, extra keys (multimodal inputs, a cache salt) or lookahead tokens
    are in vLLM's hash, not in tokens alone: a token query must not find those blocks."""
    pod = PodWriter(index, "pod-a")
    applied = pod.apply(decode_batch(encode_batch(
        stored(CHAIN[:1], extra_keys=[["salt"]]),
        stored(CHAIN[1:2], parent=CHAIN[0]))))  # its parent has no token hash
    assert (applied.stored, applied.without_token_hash) == (2, 2)
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 2)]
    assert pods_for_tokens(index, PROMPT, BLOCK) == []


@pytest.mark.parametrize(("tokens", "block_size"), [
    ("abcd", 2), ([1, -1], 2), ([1, 1 << 32], 2), ([1.5, 2], 2), ([1, 2], 0), ([1, 2], True),
])
def test_bad_token_queries_are_refused(index: Index, tokens: object, block_size: object
                                       ) -> None:
    with pytest.raises(InvalidArgument):
        pods_for_tokens(index, tokens, block_size)  # type: ignore[arg-type]


def test_token_hashes_can_be_left_out(index: Index) -> None:
    pod = PodWriter(index, "pod-a", token_hashes=False)
    applied = pod.apply(decode_batch(encode_batch(stored(CHAIN))))
    assert (applied.stored, applied.without_token_hash) == (5, 0)
    assert index.usage().objects == 5 and pods_for_tokens(index, PROMPT, BLOCK) == []
    assert pods_for_prefix(index, CHAIN) == [("pod-a", 5)]


# -- ZMQ: the publisher and its replay socket ----------------------------------------------


@pytest.fixture
def real_index(redis_url: str) -> Index:
    return Index.from_url(redis_url, namespace="vllm")


@contextlib.contextmanager
def engine(replay: bool = True, replay_topic: bool = True) -> Iterator[Publisher]:
    publisher = Publisher(replay=replay, replay_topic=replay_topic)
    try:
        yield publisher
    finally:
        publisher.close()


def chain_batch(i: int) -> bytes:
    """Block i of CHAIN, under block i-1."""
    return encode_batch(stored([CHAIN[i]], parent=CHAIN[i - 1] if i else None))


def subscribe(publisher: Publisher, feed: Feed) -> int:
    """Publish empty batches until the feed hears one (a SUB misses what is sent before it
    has connected); returns the next sequence number."""
    end = time.monotonic() + DEADLINE_S
    while not feed.receive(50):
        assert time.monotonic() < end, "the feed never received the publisher's batches"
        publisher.publish(encode_batch())
    while feed.last_seq is not None and feed.last_seq < publisher.next_seq - 1:
        assert time.monotonic() < end and feed.receive(DEADLINE_S * 1000)
    return publisher.next_seq


def step_until(ingester: Ingester, done: object) -> None:
    """Step until done() (a callable) holds."""
    end = time.monotonic() + DEADLINE_S
    while not done():  # type: ignore[operator]
        assert time.monotonic() < end, f"never happened (last seq: {ingester.feed.last_seq})"
        ingester.step(50)


def step_hearing(ingester: Ingester, publisher: Publisher, seq: int, payload: bytes,
                 done: object) -> None:
    """Step until done() holds, sending batch seq's bytes again before each step (a SUB
    socket misses what is sent before it has joined; the feed skips repeats)."""
    def heard() -> bool:
        publisher.send_raw(b"kv", seq.to_bytes(8, "big"), payload)
        return bool(done())  # type: ignore[operator]

    step_until(ingester, heard)


def seq_reached(ingester: Ingester, seq: int) -> object:
    return lambda: ingester.feed.last_seq is not None and ingester.feed.last_seq >= seq


@contextlib.contextmanager
def following(index: Index, publisher: Publisher, subscribed: bool = True, **feed_options: object
              ) -> Iterator[tuple[Ingester, int]]:
    """An ingester of pod-a on the publisher (subscribed: heard its first batches), and the
    next seq to publish."""
    feed = Feed(publisher.endpoint, "kv", publisher.replay_endpoint, **feed_options)
    try:
        base = publisher.next_seq
        if subscribed:
            base = subscribe(publisher, feed)
            feed.counters = FeedCounters()  # the tests count from here (the batches the
            # subscription missed before it joined were replayed or counted missed)
        yield Ingester(feed, PodWriter(index, "pod-a")), base
    finally:
        feed.close()


def test_ingests_from_the_publisher(real_index: Index) -> None:
    with engine() as publisher, following(real_index, publisher) as (ingester, base):
        publisher.publish(encode_batch(stored(CHAIN[:3])))
        publisher.publish(encode_batch(stored(CHAIN[3:], parent=CHAIN[2]),
                                       block_removed([CHAIN[4]])))
        step_until(ingester, seq_reached(ingester, base + 1))
        assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
        assert pods_for_tokens(real_index, PROMPT, BLOCK) == [("pod-a", 4)]
        assert node(real_index, CHAIN[3])["p"] == prefix_hash_of(CHAIN[2])
        assert node(real_index, CHAIN[4]) == {}
        assert ingester.feed.counters.gaps == 0 and ingester.applied.stored == 4


@pytest.mark.parametrize("replay_topic", [True, False], ids=["with-topic", "without-topic"])
def test_a_gap_is_filled_from_the_replay_socket(real_index: Index, replay_topic: bool) -> None:
    """Replies with the topic frame (vLLM 0.11 on) and without it (before)."""
    with engine(replay_topic=replay_topic) as publisher, \
            following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        publisher.publish(chain_batch(0))
        publisher.publish(chain_batch(1), send=False)  # never heard on the PUB socket
        publisher.publish(chain_batch(2), send=False)
        publisher.publish(chain_batch(3))
        step_until(ingester, seq_reached(ingester, base + 3))
        assert publisher.requests[-1] == base + 1
        assert (feed.counters.gaps, feed.counters.replayed, feed.counters.missed) == (1, 2, 0)
        assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
        assert node(real_index, CHAIN[2])["p"] == prefix_hash_of(CHAIN[1])


def test_a_gap_without_replay_is_counted_and_the_blocks_are_missing(real_index: Index) -> None:
    with engine(replay=False) as publisher, following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        publisher.publish(chain_batch(0))
        publisher.publish(chain_batch(1), send=False)
        publisher.publish(chain_batch(2), send=False)
        publisher.publish(chain_batch(3))
        step_until(ingester, seq_reached(ingester, base + 3))
        assert (feed.counters.gaps, feed.counters.missed, feed.counters.replayed) == (1, 2, 0)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN[:4]] == \
            [True, False, False, True]
        assert node(real_index, CHAIN[2]) != {}  # a shell: block 3 names it as its parent


def test_replay_that_no_longer_has_the_batches_counts_them_missed(real_index: Index) -> None:
    with engine() as publisher, following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        publisher.publish(chain_batch(0))
        publisher.buffer_steps = 2  # 1 and 2 leave the buffer
        for i in (1, 2, 3):
            publisher.publish(chain_batch(i), send=False)
        publisher.publish(chain_batch(4))
        step_until(ingester, seq_reached(ingester, base + 4))
        assert (feed.counters.replayed, feed.counters.missed) == (1, 2)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN] == \
            [True, False, False, True, True]


def test_a_fresh_ingester_asks_for_what_the_engine_buffers(real_index: Index) -> None:
    """The engine published before any ingester ran: a fresh one asks the replay socket
    from 0 and indexes the buffered batches. Before, it started at the first batch it
    heard, and those blocks were never indexed."""
    with engine() as publisher:
        for i in range(3):
            publisher.publish(chain_batch(i))  # nobody subscribed: heard by no one
        with following(real_index, publisher, subscribed=False) as (ingester, _):
            step_until(ingester, lambda: ingester.batches == 3)
            assert publisher.requests == [0]
            assert (ingester.feed.counters.replayed, ingester.feed.counters.missed) == (3, 0)
            assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 3)]
            last = chain_batch(3)
            publisher.publish(last, send=False)

            step_hearing(ingester, publisher, 3, last, lambda: ingester.batches == 4)
            assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
            assert ingester.feed.counters.restarts == 0


def test_a_repeated_batch_is_a_duplicate_not_a_restart(real_index: Index) -> None:
    """vLLM promises at least once: a batch heard again is skipped and counted. Before, a
    repeated sequence number read as an engine restart and wiped the pod."""
    with engine(replay=False) as publisher, following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        payloads = [chain_batch(0), chain_batch(1)]
        for payload in payloads:
            publisher.publish(payload)
        step_until(ingester, seq_reached(ingester, base + 1))
        for seq, payload in enumerate(payloads, start=base):  # the same bytes again
            publisher.send_raw(b"kv", seq.to_bytes(8, "big"), payload)
        publisher.publish(chain_batch(2))
        step_until(ingester, seq_reached(ingester, base + 2))
        assert (feed.counters.duplicates, feed.counters.restarts) == (2, 0)
        assert ingester.applied.cleared == 0
        assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 3)]


def test_a_publisher_restart_clears_the_pod(real_index: Index) -> None:
    with engine(replay=False) as publisher, following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        apply(ingester.writer, stored(CHAIN[:3]))
        publisher.publish(chain_batch(3))
        step_until(ingester, seq_reached(ingester, base))
        publisher.publish(encode_batch(stored([CHAIN[4]])), seq=0)  # the sequence starts over
        step_until(ingester, lambda: feed.counters.restarts == 1)
        assert ingester.applied.cleared == 8  # 4 blocks, in both trees
        assert [bool(pod_objects(real_index, block)) for block in CHAIN] == [False] * 4 + [True]


def test_a_restarted_ingester_resumes_where_the_last_one_stopped(real_index: Index) -> None:
    """The position is stored with each batch: a new ingester of the pod asks the replay
    socket for what was published while none ran."""
    with engine() as publisher:
        first = chain_batch(0)
        with following(real_index, publisher) as (ingester, base):
            publisher.publish(first)
            step_until(ingester, seq_reached(ingester, base))
        assert stored_position(real_index, "pod-a") == (base, digest(first))
        publisher.publish(chain_batch(1), send=False)
        publisher.publish(chain_batch(2), send=False)
        last = chain_batch(3)
        publisher.publish(last, send=False)
        last_seq, last_digest = stored_position(real_index, "pod-a") or (None, None)
        with following(real_index, publisher, subscribed=False, last_seq=last_seq,
                       last_digest=last_digest) as (restarted, _):
            step_hearing(restarted, publisher, base + 3, last, lambda: restarted.batches >= 3)
            assert publisher.requests[-1] == base  # from the stored batch: its digest matches
            assert (restarted.feed.counters.replayed, restarted.feed.counters.missed) == (2, 0)
            assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]
            assert stored_position(real_index, "pod-a") == (base + 3, digest(last))
            assert restarted.feed.counters.restarts == 0  # base + 3 again: duplicates


def test_an_ingester_started_before_the_engine_asks_for_the_first_batches(
        real_index: Index) -> None:
    """The ingester starts first: its catch-up request gets no answer. The engine then
    publishes batches 0..2, which the subscription does not hear (a SUB joins late), and 3,
    which it does. Before, the feed started at 3: batches 0..2 were neither asked for
    again nor counted (missed 0), and their blocks never reached the tree."""
    with engine() as publisher:
        publisher.replay_silent = True  # the engine's replay socket is not up yet
        with following(real_index, publisher, subscribed=False,
                       replay_timeout_s=0.1) as (ingester, _):
            ingester.step(0)
            assert ingester.feed.counters.replay_failures == 1 and ingester.batches == 0
            publisher.replay_silent = False
            for i in range(3):
                publisher.publish(chain_batch(i), send=False)
            last = chain_batch(3)
            publisher.publish(last, send=False)

            step_hearing(ingester, publisher, 3, last, lambda: ingester.batches == 4)
            counters = ingester.feed.counters
            assert publisher.requests == [0]
            assert (counters.replayed, counters.missed, counters.gaps) == (3, 0, 0)
            assert pods_for_prefix(real_index, CHAIN) == [("pod-a", 4)]


def test_without_replay_the_batches_before_the_first_heard_are_missed(
        real_index: Index) -> None:
    """Before, a fresh ingester without --replay counted nothing for the batches published
    before it heard the first one."""
    with engine(replay=False) as publisher, \
            following(real_index, publisher, subscribed=False) as (ingester, _):
        for i in range(3):
            publisher.publish(chain_batch(i), send=False)
        last = chain_batch(3)
        publisher.publish(last, send=False)

        step_hearing(ingester, publisher, 3, last, lambda: ingester.batches == 1)
        assert (ingester.feed.counters.missed, ingester.feed.counters.gaps) == (3, 0)


def test_an_engine_restarted_while_the_ingester_was_down_is_told_by_the_digest(
        real_index: Index) -> None:
    """The engine restarted and published past the stored position while no ingester ran.
    The resumed ingester asks the replay socket for the stored batch: other bytes there
    mean another run. Before, the new run's batches read as a gap after the stored
    position: the pod kept the old run's blocks and lost the new run's first ones."""
    with engine() as first_run, following(real_index, first_run) as (ingester, base):
        first_run.publish(chain_batch(0))
        first_run.publish(chain_batch(1))
        step_until(ingester, seq_reached(ingester, base + 1))
    last_seq, last_digest = stored_position(real_index, "pod-a") or (None, None)
    assert last_seq == base + 1
    with engine() as second_run:  # the engine restarted: its sequence from 0 again
        second_run.publish(encode_batch(stored([CHAIN[4]])), send=False)
        while second_run.next_seq < base + 3:
            second_run.publish(encode_batch(), send=False)
        last = encode_batch()
        second_run.publish(last, send=False)
        with following(real_index, second_run, subscribed=False, last_seq=last_seq,
                       last_digest=last_digest) as (resumed, _):
            step_hearing(resumed, second_run, base + 3, last,
                         lambda: resumed.feed.last_seq == base + 3)
            assert resumed.feed.counters.restarts == 1 and resumed.applied.cleared == 4
            assert [bool(pod_objects(real_index, block)) for block in CHAIN] == \
                [False] * 4 + [True]
            assert stored_position(real_index, "pod-a") == (base + 3, digest(last))


@pytest.mark.parametrize("replay", [False, True], ids=["without-replay", "buffer-lost-it"])
def test_a_late_batch_is_not_a_restart(real_index: Index, replay: bool) -> None:
    """A batch a gap counted missed, heard after later ones, is skipped and counted late:
    the replay socket still holds the last batch applied, with its bytes (without one: the
    number lies in a gap of this run). Before, its number going back read as an engine
    restart and cleared the pod."""
    with engine(replay=replay) as publisher, following(real_index, publisher) as (ingester, base):
        feed = ingester.feed
        publisher.publish(chain_batch(0))
        publisher.buffer_steps = 1  # with replay: batch 1 leaves the buffer at once
        late = chain_batch(1)
        publisher.publish(late, send=False)
        publisher.publish(chain_batch(2))
        step_until(ingester, seq_reached(ingester, base + 2))
        assert feed.counters.missed == 1
        publisher.send_raw(b"kv", (base + 1).to_bytes(8, "big"), late)
        publisher.publish(chain_batch(3))
        step_until(ingester, seq_reached(ingester, base + 3))
        assert (feed.counters.restarts, feed.counters.late, ingester.applied.cleared) == \
            (0, 1, 0)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN[:4]] == \
            [True, False, True, True]


def test_a_restart_is_not_taken_for_late_batches(real_index: Index) -> None:
    """A fresh ingester without --replay heard the engine first at batch 5 (0..4 counted
    missed), then the engine restarted: its batch 0 is a restart, not a late batch, since
    0..4 were never between two batches this ingester applied."""
    with engine(replay=False) as publisher, \
            following(real_index, publisher, subscribed=False) as (ingester, _):
        for _ in range(5):
            publisher.publish(encode_batch(), send=False)
        first = chain_batch(0)
        publisher.publish(first, send=False)
        step_hearing(ingester, publisher, 5, first, lambda: ingester.batches == 1)
        assert ingester.feed.counters.missed == 5
        publisher.publish(encode_batch(stored([CHAIN[4]])), seq=0)  # the engine restarted
        step_until(ingester, lambda: ingester.feed.counters.restarts == 1)
        assert (ingester.feed.counters.late, ingester.applied.cleared) == (0, 2)
        assert [bool(pod_objects(real_index, block)) for block in CHAIN] == \
            [False] * 4 + [True]


def test_a_bad_batch_is_skipped_and_the_next_applied(real_index: Index) -> None:
    with engine(replay=False) as publisher, following(real_index, publisher) as (ingester, base):
        publisher.publish(b"not msgpack \xc1")
        publisher.publish(chain_batch(0))
        step_until(ingester, seq_reached(ingester, base + 1))
        assert ingester.bad_batches == 1 and pods_for_prefix(real_index, CHAIN) == [("pod-a", 1)]


# -- the commands -------------------------------------------------------------------------


def test_ingest_and_pods_commands(redis_url: str, capsys: pytest.CaptureFixture[str],
                                  caplog: pytest.LogCaptureFixture) -> None:
    publisher = Publisher(replay=False)
    payload = encode_batch(stored(CHAIN[:3]))
    done = threading.Event()

    def publish() -> None:  # the same batch again and again: the ingester stops after 2
        while not done.is_set():
            publisher.publish(payload)
            time.sleep(0.01)  # pacing: PUB drops what it sends before the subscriber joins

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        code = main(["--url", redis_url, "--namespace", "vllm", "ingest", "--zmq",
                     publisher.endpoint, "--pod", "pod-a", "--topic", "kv", "--max-batches",
                     "2", "--log-every", "1"])
        assert main(["--url", redis_url, "--namespace", "vllm-hashes-only", "ingest", "--zmq",
                     publisher.endpoint, "--pod", "pod-a", "--topic", "kv", "--max-batches",
                     "1", "--no-token-hashes"]) == 0
    finally:
        done.set()
        joined(sender, "the publisher thread")
        publisher.close()
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
    tokens = [str(t) for t in PROMPT[:4 * BLOCK + 1]]
    assert main(["--url", redis_url, "--namespace", "vllm", "pods", "--tokens",
                 "--block-size", str(BLOCK), *tokens]) == 0
    assert capsys.readouterr().out == "pod-a\t3/4\n"
    for by in (hashes, ["--tokens", "--block-size", str(BLOCK), *tokens]):
        assert main(["--url", redis_url, "--namespace", "vllm-hashes-only", "pods", *by]) == \
            (0 if by is hashes else 1)
    assert Index.from_url(redis_url, namespace="vllm-hashes-only").usage().objects == 3


def test_ingest_binds_for_engines_that_connect(redis_url: str) -> None:
    """vLLM's connect mode: the engine's PUB socket connects to a listening collector
    (`endpoint` without a wildcard). `--zmq tcp://*:PORT` binds, as does `--bind` with any
    endpoint. Before, the wildcard crashed with a raw ZMQError and nothing could bind."""
    payload = encode_batch(stored(CHAIN[:3]))
    for bind_options in ([], ["--bind"]):
        port = free_port()
        listen = f"tcp://*:{port}" if not bind_options else f"tcp://127.0.0.1:{port}"
        publisher = Publisher(replay=False, connect_to=f"tcp://127.0.0.1:{port}")
        done = threading.Event()

        def publish(publisher: Publisher = publisher, done: threading.Event = done) -> None:
            while not done.is_set():
                publisher.publish(payload)
                time.sleep(0.01)  # pacing: the connection comes up after the bind

        sender = threading.Thread(target=publish, daemon=True)
        sender.start()
        try:
            assert main(["--url", redis_url, "--namespace", "vllm", "ingest", "--zmq", listen,
                         *bind_options, "--pod", "pod-a", "--topic", "kv",
                         "--max-batches", "1"]) == 0
        finally:
            done.set()
            sender.join(DEADLINE_S)
            publisher.close()
        index = Index.from_url(redis_url, namespace="vllm")
        assert pods_for_prefix(index, CHAIN) == [("pod-a", 3)]
        index.remove_all(force=True)


def test_an_endpoint_that_cannot_be_bound_fails_clearly(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("", port))
        taken.listen()
        assert main(["--url", redis_url, "ingest", "--zmq", f"tcp://*:{port}", "--pod",
                     "a"]) == 1
    assert f"error: cannot bind tcp://*:{port}: Address already in use" in \
        capsys.readouterr().err


@pytest.mark.parametrize("argv", [["pods"],
                                  ["ingest", "--zmq", "localhost:5557", "--pod", "a"],
                                  ["ingest", "--zmq", "tcp://*:x", "--pod", "a"],
                                  ["ingest", "--zmq", "tcp://h", "--pod", "a"],
                                  ["ingest", "--zmq", "tcp://h:1", "--replay", "tcp://*:2",
                                   "--pod", "a"],
                                  ["ingest", "--zmq", "tcp://h:1", "--pod", "a", "--log-every",
                                   "0"], ["pods", "--tokens", "1", "--block-size", "0"]])
def test_bad_command_lines_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["pods", "xyz"], "'xyz' is not a block hash"),
    (["pods", "--tokens", "1", "2"], "--tokens and --block-size N go together"),
    (["pods", "--block-size", "4", "5"], "--tokens and --block-size N go together"),
    (["pods", "--tokens", "--block-size", "4", "-1"], "'-1' is not a token id"),
    (["pods", "--tokens", "--block-size", "4", str(1 << 32)], "is not a token id"),
])
def test_bad_values_are_usage_errors(argv: list[str], message: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "memory://pods-usage", *argv]) == 2
    assert message in capsys.readouterr().err


def test_bad_pod_name_and_missing_extra_fail_clearly(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", redis_url, "ingest", "--zmq", "tcp://127.0.0.1:1", "--pod",
                 "a_b"]) == 1
    assert "pod name 'a_b'" in capsys.readouterr().err
    real = ingest_cli.importlib.util.find_spec
    monkeypatch.setattr(ingest_cli.importlib.util, "find_spec",
                        lambda name: None if name == "xxhash" else real(name))
    assert main(["--url", redis_url, "ingest", "--zmq", "tcp://127.0.0.1:1", "--pod",
                 "p"]) == 1
    assert "pip install 'mooncake-redis[vllm]'" in capsys.readouterr().err
    Index.from_url(redis_url, lease_ttl_ms=5)  # the namespace exists
    assert main(["--url", redis_url, "pods", "--tokens", "--block-size", "1", "5"]) == 1
    assert "pip install 'mooncake-redis[vllm]'" in capsys.readouterr().err
    # pods by block hash only reads Redis: it needs no extra (test_cli.py runs it so)
