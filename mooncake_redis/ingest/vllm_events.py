"""vLLM's KV event batches, decoded from the bytes vLLM publishes, and vLLM's block hashes
mapped to prefix hashes.

vLLM (vllm/distributed/kv_events.py) encodes with msgspec: a KVEventBatch is a msgpack
array [ts, events, data_parallel_rank] (the rank left out when None); each event is a map
tagged by its class name, {"type": "BlockStored", "block_hashes": [...], ...}, with
fields at their defaults left out. Releases before 0.11 encoded the events as arrays,
["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium];
both forms are read. Event types this module does not know are counted and skipped, so a
newer vLLM does not stop the ingester.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import blake3

from ..errors import MooncakeRedisError

BlockHash = bytes | int
"""vLLM's ExternalBlockHash: the block's sha256 (32 bytes), or with
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (vLLM's default) its low 64 bits as an int."""

_UINT64 = 1 << 64
_INT_PADDING = "0" * 48


class InvalidEvent(MooncakeRedisError):
    """A payload that is not a KV event batch as vLLM publishes it."""


@dataclass(frozen=True)
class BlockStored:
    block_hashes: tuple[BlockHash, ...]
    """A chain: each block's parent is the one before it, the first's is parent_block_hash."""
    parent_block_hash: BlockHash | None
    block_size: int
    """Tokens per block."""
    medium: str | None
    """Where the blocks are kept: "GPU" (None in older releases), "CPU" or "STORAGE" for
    vLLM's offloading tiers."""


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: tuple[BlockHash, ...]
    medium: str | None


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True)
class EventBatch:
    """One KVEventBatch: the events of one engine step, in order."""

    ts: float
    events: tuple[Event, ...]
    data_parallel_rank: int | None = None
    unknown: int = 0
    """Events of a type this module does not know (skipped)."""


def prefix_hash_of(block_hash: BlockHash) -> str:
    """The prefix hash (64 lower-case hex digits) that stands for a vLLM block hash:

    - 32 bytes (sha256, vLLM's default hash): its hex, unchanged;
    - an int of 64 bits (vLLM's default form on the wire; negative ones, from releases that
      used Python's hash(), taken modulo 2**64): its 16 hex digits followed by 48 zeros, so
      the engine's number can be read off the tree and the shard (the first two digits) is
      the hash's own top byte;
    - anything else (a 16-byte xxhash, a wider int): blake3 of a tagged encoding.
    Every form is a hash the 'rfc' prefix rule accepts, so nodes can be linked."""
    if isinstance(block_hash, bool):
        raise InvalidEvent(f"block hash {block_hash!r} is a bool, not bytes or an int")
    if isinstance(block_hash, int):
        if -(_UINT64 >> 1) <= block_hash < _UINT64:
            return f"{block_hash % _UINT64:016x}{_INT_PADDING}"
        return blake3.blake3(b"vllm-int:" + str(block_hash).encode()).hexdigest()
    if isinstance(block_hash, bytes):
        if len(block_hash) == 32:
            return block_hash.hex()
        if not block_hash:
            raise InvalidEvent("a block hash is empty")
        return blake3.blake3(b"vllm-bytes:" + block_hash).hexdigest()
    raise InvalidEvent(f"block hash {block_hash!r:.80} is a {type(block_hash).__name__}, "
                       "not bytes or an int")


def decode_batch(payload: bytes) -> EventBatch:
    """A KVEventBatch from the payload frame vLLM publishes (and its replay socket
    re-sends). Raises InvalidEvent for anything else."""
    try:
        import msgpack  # the vllm extra, imported only to decode: `pods` needs none of it

        document = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise InvalidEvent(f"payload is not msgpack ({type(error).__name__}: {error})"
                           ) from None
    if not isinstance(document, list) or len(document) not in (2, 3) \
            or not isinstance(document[1], list):
        raise InvalidEvent(f"payload is not a KVEventBatch [ts, events, "
                           f"data_parallel_rank]: {document!r:.200}")
    ts, raw_events = document[0], document[1]
    rank = document[2] if len(document) == 3 else None
    if not _is_number(ts) or not (rank is None or _is_int(rank)):
        raise InvalidEvent(f"KVEventBatch has ts {ts!r:.40} and data_parallel_rank "
                           f"{rank!r:.40}: a number and an int (or nil) were expected")
    events: list[Event] = []
    unknown = 0
    for raw in raw_events:
        event = _event(raw)
        if event is None:
            unknown += 1
        else:
            events.append(event)
    return EventBatch(float(ts), tuple(events), rank, unknown)


_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}
"""The leading fields of each event, in vLLM's order (the array form is positional; later
fields are optional and not needed here)."""


def _event(raw: Any) -> Event | None:
    if isinstance(raw, dict):
        kind = raw.get("type")
        fields = raw
    elif isinstance(raw, list) and raw:
        kind = raw[0]
        fields = dict(zip(_FIELDS.get(kind, ()), raw[1:])) if isinstance(kind, str) else {}
    else:
        raise InvalidEvent(f"event {raw!r:.200} is neither a tagged map nor a tagged array")
    if kind == "BlockStored":
        block_size = fields.get("block_size")
        if not isinstance(block_size, int) or isinstance(block_size, bool):
            raise InvalidEvent(f"BlockStored has block_size {block_size!r:.40}, not an int")
        parent = fields.get("parent_block_hash")
        return BlockStored(_hashes(fields, kind), None if parent is None else _hash(parent),
                           block_size, _medium(fields, kind))
    if kind == "BlockRemoved":
        return BlockRemoved(_hashes(fields, kind), _medium(fields, kind))
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def _hashes(fields: dict[str, Any], kind: str) -> tuple[BlockHash, ...]:
    hashes = fields.get("block_hashes")
    if not isinstance(hashes, Sequence) or isinstance(hashes, (str, bytes)):
        raise InvalidEvent(f"{kind} has block_hashes {hashes!r:.80}, not a list")
    return tuple(_hash(h) for h in hashes)


def _hash(value: Any) -> BlockHash:
    if isinstance(value, bytes) or _is_int(value):
        return value  # type: ignore[no-any-return]
    raise InvalidEvent(f"block hash {value!r:.80} is neither bytes nor an int")


def _medium(fields: dict[str, Any], kind: str) -> str | None:
    medium = fields.get("medium")
    if medium is not None and not isinstance(medium, str):
        raise InvalidEvent(f"{kind} has medium {medium!r:.40}, not a string")
    return medium  # type: ignore[no-any-return]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)
