"""vLLM's KV event batches, decoded from the bytes vLLM publishes, and vLLM's block hashes
mapped to prefix hashes.

vLLM (vllm/distributed/kv_events.py) encodes with msgspec: a KVEventBatch is a msgpack
array [ts, events, data_parallel_rank] in vLLM 0.33 (the rank left out when None), a map
{"ts", "events", "data_parallel_rank"} where EventBatch is declared without `array_like`
(a newer source); each event is a map tagged by its class name, {"type": "BlockStored",
"block_hashes": [...], ...}, with fields at their defaults left out. Releases before 0.11
encoded the events as arrays, ["BlockStored", block_hashes, parent_block_hash, token_ids,
block_size, lora_id, medium, ...]. Every form is read. An event that is malformed is
refused alone (counted in EventBatch.invalid, the rest of its batch is applied), and
event types this module does not know are counted and skipped, so a newer vLLM does not
stop the ingester.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import blake3

from mooncake_redis.errors import InvalidEvent

BlockHash = bytes | int
"""vLLM's ExternalBlockHash: the block's sha256 (32 bytes), or with
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (vLLM's default) its low 64 bits as an int."""

_UINT64 = 1 << 64
_UINT32 = 1 << 32
_INT_PADDING = "0" * 48
_MEDIUM = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,31}")
LOCAL = "LOCAL"
"""vLLM's Locality.LOCAL; a store or removal of any other locality (REMOTE: a tier the
publisher reaches but does not hold) is not a block the pod holds."""
PROBLEMS_KEPT = 3
"""How many reasons of refused events a batch keeps for the log."""


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
    group_idx: int | None = None
    """The KV-cache group (hybrid models have several: full attention, sliding window,
    Mamba); None before vLLM published it."""
    locality: str | None = None
    """LOCAL or REMOTE relative to the publisher; None: unspecified (local)."""
    token_ids: tuple[int, ...] = ()
    """The blocks' tokens, block_size per block."""
    tokens_only: bool = False
    """vLLM's hashes of these blocks cover their tokens and nothing else (no LoRA adapter,
    no extra keys such as multimodal inputs or a cache salt, no lookahead tokens), and
    token_ids holds block_size tokens per block: a token hash can stand for them."""


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: tuple[BlockHash, ...]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None


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
    invalid: int = 0
    """Events refused as malformed (skipped; the rest of the batch stands)."""
    problems: tuple[str, ...] = ()
    """Why, for the first PROBLEMS_KEPT refused events."""


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
    re-sends). Raises InvalidEvent when the payload is not a batch at all; a malformed
    event inside one is counted and left out."""
    try:
        import msgpack  # the vllm extra, imported only to decode: `pods` needs none of it

        document = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise InvalidEvent(f"payload is not msgpack ({type(error).__name__}: {error})"
                           ) from None
    ts, raw_events, rank = _batch_fields(document)
    events: list[Event] = []
    unknown = invalid = 0
    problems: list[str] = []
    for raw in raw_events:
        try:
            event = _event(raw)
        except InvalidEvent as error:
            invalid += 1
            if len(problems) < PROBLEMS_KEPT:
                problems.append(str(error))
            continue
        if event is None:
            unknown += 1
        else:
            events.append(event)
    return EventBatch(float(ts), tuple(events), rank, unknown, invalid, tuple(problems))


def _batch_fields(document: Any) -> tuple[Any, list[Any], Any]:
    if isinstance(document, dict):
        ts, raw_events = document.get("ts"), document.get("events")
        rank = document.get("data_parallel_rank")
    elif isinstance(document, list) and len(document) in (2, 3):
        ts, raw_events = document[0], document[1]
        rank = document[2] if len(document) == 3 else None
    else:
        raise InvalidEvent(f"payload is not a KVEventBatch ([ts, events, data_parallel_rank] "
                           f"or a map of them): {document!r:.200}")
    if not isinstance(raw_events, list) or not _is_number(ts) \
            or not (rank is None or _is_int(rank)):
        raise InvalidEvent(f"KVEventBatch has ts {ts!r:.40}, events {raw_events!r:.40} and "
                           f"data_parallel_rank {rank!r:.40}: a number, a list and an int (or "
                           "nil) were expected")
    return ts, raw_events, rank


_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                    "kv_cache_spec_sliding_window", "locality", "ownership", "session_id",
                    "lookahead_token_ids"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx", "locality", "ownership"),
    "AllBlocksCleared": (),
}
"""The fields of each event, in vLLM 0.33's order (the array form is positional)."""


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
        block_size: Any = fields.get("block_size")
        if not _is_int(block_size) or block_size <= 0:
            raise InvalidEvent(f"BlockStored has block_size {block_size!r:.40}, not a "
                               "positive int")
        parent = fields.get("parent_block_hash")
        hashes = _hashes(fields, kind)
        tokens = _tokens(fields.get("token_ids"))
        return BlockStored(hashes, None if parent is None else _hash(parent), block_size,
                           _medium(fields, kind), _group(fields, kind),
                           _locality(fields, kind), tokens,
                           len(tokens) == block_size * len(hashes) and _tokens_only(fields))
    if kind == "BlockRemoved":
        return BlockRemoved(_hashes(fields, kind), _medium(fields, kind), _group(fields, kind),
                            _locality(fields, kind))
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
        prefix_hash_of(value)  # refuses an empty one
        return value  # type: ignore[no-any-return]
    raise InvalidEvent(f"block hash {value!r:.80} is neither bytes nor an int")


def _tokens(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(_is_int(t) and 0 <= t < _UINT32 for t in value):
        raise InvalidEvent(f"BlockStored has token_ids {value!r:.80}, not a list of token ids")
    return tuple(value)


def _tokens_only(fields: dict[str, Any]) -> bool:
    extra = fields.get("extra_keys")
    return fields.get("lora_name") is None and fields.get("lora_id") is None \
        and fields.get("lookahead_token_ids") is None \
        and (extra is None or (isinstance(extra, list) and all(e is None for e in extra)))


def _medium(fields: dict[str, Any], kind: str) -> str | None:
    medium = fields.get("medium")
    if medium is not None and (not isinstance(medium, str) or not _MEDIUM.fullmatch(medium)):
        raise InvalidEvent(f"{kind} has medium {medium!r:.40}: 1-32 characters of A-Z, a-z, "
                           "0-9, '.', '-' (or nil) were expected")
    return medium  # type: ignore[no-any-return]


def _group(fields: dict[str, Any], kind: str) -> int | None:
    group = fields.get("group_idx")
    if group is not None and (not _is_int(group) or not 0 <= group < 1 << 16):
        raise InvalidEvent(f"{kind} has group_idx {group!r:.40}, not a small int (or nil)")
    return group  # type: ignore[no-any-return]


def _locality(fields: dict[str, Any], kind: str) -> str | None:
    locality = fields.get("locality")
    if locality is not None and not isinstance(locality, str):
        raise InvalidEvent(f"{kind} has locality {locality!r:.40}, not a string (or nil)")
    return locality  # type: ignore[no-any-return]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)
