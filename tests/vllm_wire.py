"""vLLM's KV-events wire format, written by this project from the format itself (the
layouts docs/INTEGRATIONS.md gives: "vLLM's wire format"), to drive the ingester in tests
without vLLM's code.

- Frames: the PUB socket sends [topic, seq (8 bytes, big-endian, from 0), payload].
- Payload: a msgpack KVEventBatch, an array [ts, events, data_parallel_rank] (vLLM 0.33's
  `array_like` struct; the rank left out when it is nil) or, as a newer vLLM source
  declares it, a map {"ts", "events", "data_parallel_rank"}.
- Events: maps tagged {"type": <class name>, ...}; fields without a default are always
  present (nil included), fields with a default are left out at their default (vLLM's
  `omit_defaults`).
- Replay: a ROUTER socket; a request [b"", start seq (8 bytes)] is answered with one
  message [b"", topic, seq, payload] per buffered batch from start on (the topic frame left
  out by releases before 0.11), then [b"", b"", -1 (8 bytes, signed), b""].
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq
from clock import joined

END_SEQ = (-1).to_bytes(8, "big", signed=True)

BLOCK_STORED_REQUIRED = ("block_hashes", "parent_block_hash", "token_ids", "block_size",
                         "lora_id", "medium", "lora_name")
BLOCK_STORED_OPTIONAL = ("extra_keys", "group_idx", "kv_cache_spec_kind",
                         "kv_cache_spec_sliding_window", "locality", "ownership",
                         "session_id", "lookahead_token_ids")
BLOCK_REMOVED_REQUIRED = ("block_hashes", "medium")
BLOCK_REMOVED_OPTIONAL = ("group_idx", "locality", "ownership")


def _event(kind: str, required: Sequence[str], optional: Sequence[str],
           values: dict[str, Any]) -> dict[str, Any]:
    unknown = set(values) - set(required) - set(optional)
    if unknown:
        raise TypeError(f"{kind} has no fields {sorted(unknown)}")
    event: dict[str, Any] = {"type": kind}
    event.update((name, values.get(name)) for name in required)
    event.update((name, values[name]) for name in optional if values.get(name) is not None)
    return event


def block_stored(block_hashes: Sequence[int | bytes], parent: int | bytes | None = None, *,
                 token_ids: Sequence[int] | None = None, block_size: int = 16,
                 medium: str | None = "GPU", **optional: Any) -> dict[str, Any]:
    """A BlockStored event; token_ids default to distinct tokens of every block."""
    if token_ids is None:
        token_ids = [token_of(h, i) for h in block_hashes for i in range(block_size)]
    return _event("BlockStored", BLOCK_STORED_REQUIRED, BLOCK_STORED_OPTIONAL,
                  {"block_hashes": list(block_hashes), "parent_block_hash": parent,
                   "token_ids": list(token_ids), "block_size": block_size, "lora_id": None,
                   "medium": medium, "lora_name": None, **optional})


def token_of(block_hash: int | bytes, position: int) -> int:
    """A token id that depends on the block and the position in it (the same every run)."""
    digest = hashlib.blake2b(repr((block_hash, position)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % 150_000


def block_removed(block_hashes: Sequence[int | bytes], medium: str | None = "GPU",
                  **optional: Any) -> dict[str, Any]:
    return _event("BlockRemoved", BLOCK_REMOVED_REQUIRED, BLOCK_REMOVED_OPTIONAL,
                  {"block_hashes": list(block_hashes), "medium": medium, **optional})


def all_blocks_cleared() -> dict[str, Any]:
    return {"type": "AllBlocksCleared"}


def encode_batch(*events: dict[str, Any], rank: int | None = 0, as_map: bool = False,
                 ts: float | None = None) -> bytes:
    """The payload of one KVEventBatch."""
    ts = time.time() if ts is None else ts
    if as_map:
        batch: Any = {"ts": ts, "events": list(events)}
        if rank is not None:
            batch["data_parallel_rank"] = rank
    else:
        batch = [ts, list(events)] + ([] if rank is None else [rank])
    return msgpack.packb(batch, use_bin_type=True)


class Publisher:
    """One engine's publisher: a PUB socket, and a replay ROUTER answering from the batches
    it buffered (the last buffer_steps), served by a thread of its own.

    connect_to: the PUB socket connects to this endpoint, where a collector listens (vLLM's
    connect mode: an `endpoint` without a wildcard), instead of binding one of its own.
    replay_silent: while True the replay socket reads requests and answers none (an engine
    whose replay socket is not up yet)."""

    def __init__(self, topic: str = "kv", replay: bool = True, buffer_steps: int = 10_000,
                 replay_topic: bool = True, connect_to: str | None = None):
        self.context = zmq.Context()
        self.topic = topic.encode()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        if connect_to is None:
            port = self.pub.bind_to_random_port("tcp://127.0.0.1")
            self.endpoint = f"tcp://127.0.0.1:{port}"
        else:
            self.pub.connect(connect_to)
            self.endpoint = connect_to
        self.replay_silent = False
        self.buffer_steps = buffer_steps
        self.replay_topic = replay_topic
        self.buffered: dict[int, bytes] = {}
        self.requests: list[int] = []
        """The start seq of every replay request answered."""
        self.next_seq = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.replay_endpoint: str | None = None
        self._thread: threading.Thread | None = None
        if replay:
            self.router = self.context.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            port = self.router.bind_to_random_port("tcp://127.0.0.1")
            self.replay_endpoint = f"tcp://127.0.0.1:{port}"
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def publish(self, payload: bytes, seq: int | None = None, send: bool = True) -> int:
        """Buffer a batch under seq (default: the next number) and send it unless send is
        False (a batch the subscriber never hears); returns its seq."""
        seq = self.next_seq if seq is None else seq
        self.next_seq = seq + 1
        with self._lock:
            self.buffered[seq] = payload
            for old in sorted(self.buffered)[:-self.buffer_steps]:
                del self.buffered[old]
        if send:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def send_raw(self, *frames: bytes) -> None:
        self.pub.send_multipart(list(frames))

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.router.poll(20):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            if self.replay_silent:
                continue
            with self._lock:
                self.requests.append(start)
                replies = [(seq, self.buffered[seq]) for seq in sorted(self.buffered)
                           if seq >= start]
            for seq, payload in replies:
                topic = [self.topic] if self.replay_topic else []
                self.router.send_multipart([client, b"", *topic, seq.to_bytes(8, "big"),
                                            payload])
            self.router.send_multipart([client, b"", *([b""] if self.replay_topic else []),
                                        END_SEQ, b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            joined(self._thread, "the replay server's thread")
            self.router.close(0)
        self.pub.close(0)
        self.context.term()
