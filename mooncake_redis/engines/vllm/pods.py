"""Which pod holds which block, kept as objects of the radix tree: the writes that follow a
pod's KV event batches, and the queries "which pods hold the longest leading run of this
chain of blocks" (by vLLM's block hashes, or by the prompt's token ids).

Block H held by a holder is the object `<H>_pod_<holder>` in node H, whose parent is the
block before it in the engine's chain. A holder is a pod in one medium and one KV-cache
group: `<pod>`, `<pod>@<medium>` for a medium other than the GPU (vLLM's CPU offloading
tier), `/g<group>` added for a hybrid model's KV-cache group other than 0 (`vllm-0/g1`,
`vllm-0@CPU/g2`), so a removal in one group leaves the block the pod holds in another.
The object's size is 0: it stands for memory of the pod, not for bytes in the store, so
it takes no capacity and never sets off eviction; it is hard-pinned, because only the
engine knows when the block goes (BlockRemoved, AllBlocksCleared), so eviction must never
drop it. A REMOTE store (vLLM's locality: a tier the pod reaches, not one it holds) is not
recorded.

Beside it, a block whose vLLM hash covers only its tokens also gets the object
`<T>_pod_<holder>` in the node of its token hash T (ingest.tokens: xxh3-64 of the
block's tokens chained with its parent's), with the parent block's token node as parent:
a second tree of the same shape that a router walks with hashes it computes from token
ids alone. The holder's map `<ns>:tokens:<holder>` (block -> token hash) lets its
BlockRemoved find T again, after a restart too.

Every holder is named once in the namespace's holder set (keys.py: `<ns>:pods`), so the
queries ask each node of a chain for those fields only, never for its children.

Writes go through the Index's path A: one batch_put_start per KV event batch, each item
carrying its parent hash (the link is written with the first object of a node, or again,
harmlessly, by every pod), then one batch_put_end, then one pipeline with the token maps
(and the ingester's position). Path B (register_radix_tree_node) would need the objects
stored first: a third round trip for the same tree.
"""

from __future__ import annotations

import logging
import re
import struct
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from mooncake_redis.errors import (
    ConfigurationError,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
)
from mooncake_redis.index import Index
from mooncake_redis.models import Result
from mooncake_redis.prefix import extractor_named

from .kv_events import (
    LOCAL,
    AllBlocksCleared,
    BlockHash,
    BlockStored,
    EventBatch,
    prefix_hash_of,
)
from .tokens import token_block_hashes, token_prefix_hash

log = logging.getLogger("mooncake_redis.engines.vllm")

POD_MARK = "_pod_"
"""Between the block's hash and the holder in an object key."""
_FIELD_MARK = "o:" + POD_MARK
_POD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
_MEDIUM = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,31}")
_HOLDER_TAIL = r"(@[A-Za-z0-9.-]+)?(/g[0-9]+)?"
"""What follows the pod's name in its holders' names."""
DEFAULT_MEDIA = (None, "GPU")
"""Media recorded under the bare pod name."""
PROBE = 32
"""The queries read this many leading blocks first, the rest only for the holders of
all of them."""
TOKEN_CACHE_SIZE = 1 << 17
"""Token hashes of recent blocks a writer keeps in memory (block -> token hash: the same
for every holder), so the parent of the next batch's first block is seldom read back."""


def check_pod_name(pod: str) -> str:
    if not isinstance(pod, str) or not _POD_NAME.fullmatch(pod):
        raise InvalidArgument(f"pod name {pod!r} must be 1-63 characters of A-Z, a-z, 0-9, "
                              "'.', '-', starting with a letter or digit (a Kubernetes pod "
                              "name fits)")
    return pod


def holder_of(pod: str, medium: str | None, group: int | None = None) -> str:
    """The pod's name, `@<medium>` added for another medium than the GPU, `/g<group>` for
    a KV-cache group other than 0."""
    holder = pod
    if medium not in DEFAULT_MEDIA:
        if not isinstance(medium, str) or not _MEDIUM.fullmatch(medium):
            raise InvalidArgument(f"medium {medium!r:.40} must be 1-32 characters of A-Z, "
                                  "a-z, 0-9, '.', '-'")
        holder += f"@{medium}"
    if group:
        holder += f"/g{group}"
    return holder


def object_key(prefix_hash: str, holder: str) -> str:
    return prefix_hash + POD_MARK + holder


@dataclass
class Applied:
    """What applying batches did (counts of blocks; added up over a run)."""

    stored: int = 0
    already_held: int = 0
    """BlockStored for a block the tree already gives this holder (a re-store, a replay)."""
    removed: int = 0
    not_held: int = 0
    """BlockRemoved for a block the tree did not give this holder (stored before the
    ingester started, or its BlockStored was lost in a gap)."""
    refused: int = 0
    """Items the index refused (logged with the reason)."""
    cleared: int = 0
    """Objects removed by AllBlocksCleared or a publisher restart."""
    unknown_events: int = 0
    bad_events: int = 0
    """Events refused as malformed (logged); the rest of their batch was applied."""
    remote: int = 0
    """Blocks of events whose locality is not LOCAL: not blocks the pod holds."""
    without_token_hash: int = 0
    """Blocks stored without a token hash (their vLLM hash covers more than their tokens,
    or the parent's token hash is unknown)."""

    def add(self, other: Applied) -> None:
        for name in fields(self):
            setattr(self, name.name, getattr(self, name.name) + getattr(other, name.name))


@dataclass(frozen=True)
class _Store:
    holder: str
    prefix_hash: str
    parent: str | None
    tokens: tuple[int, ...] | None
    """The block's tokens, if a token hash may stand for it."""


@dataclass(frozen=True)
class _Remove:
    holder: str
    prefix_hash: str


@dataclass
class _Changes:
    """A batch's net effect: the last word on each object, in event order."""

    cleared: bool = False
    last: dict[str, _Store | _Remove] = field(default_factory=dict)
    """object key -> what the batch does with it"""
    remote: int = 0
    bad: int = 0


class PodWriter:
    """Applies one pod's KV event batches to an index: one batch of writes per batch of
    events, whatever its size."""

    def __init__(self, index: Index, pod: str, token_hashes: bool = True):
        """token_hashes=False: record blocks under vLLM's hashes only (half the writes; the
        pod's blocks are then not found by pods_for_tokens)."""
        self.index = index
        self.pod = check_pod_name(pod)
        self.token_hashes = token_hashes
        self._registered: set[str] = set()
        self._token_cache: OrderedDict[str, int] = OrderedDict()
        sample = prefix_hash_of(0)
        extractor = extractor_named(index.settings.prefix_extractor)
        if not extractor.is_hash(sample):
            raise ConfigurationError(
                f"namespace {index.namespace!r} uses the {extractor.name!r} prefix "
                "rule, under which a block's 64-hex hash cannot be a parent; ingest into a "
                "namespace with the 'rfc' rule (the default)")

    def apply(self, batch: EventBatch, *commands: Sequence[Any]) -> Applied:
        """Apply one batch; `commands` (such as the ingester's position) ride in the last
        pipeline, after every write of the batch."""
        changes = self._net_changes(batch)
        applied = Applied(unknown_events=batch.unknown, bad_events=batch.invalid + changes.bad,
                          remote=changes.remote)
        if changes.cleared:
            applied.cleared = self.clear()
        stores = {k: c for k, c in changes.last.items() if isinstance(c, _Store)}
        removes = {k: c for k, c in changes.last.items() if isinstance(c, _Remove)}
        tokens = self._token_hashes(stores.values(), removes.values(), applied)
        token_removes = [object_key(token_prefix_hash(tokens[c.prefix_hash]), c.holder)
                         for c in removes.values() if c.prefix_hash in tokens]
        if removes:
            self._remove(list(removes), token_removes, applied)
        if stores:
            self._store(stores, tokens, applied)
        self._write_maps(stores.values(), removes.values(), tokens, commands)
        return applied

    def clear(self) -> int:
        """Remove every object of this pod, in every medium and group, from both trees, and
        its token maps (a SCAN of the namespace: AllBlocksCleared is rare, a per-pod index
        would cost on every write)."""
        pod = self.pod.replace(".", r"\.")
        removed = self.index.remove_by_regex(rf"^[0-9a-f]{{64}}{POD_MARK}{pod}{_HOLDER_TAIL}$",
                                             force=True)
        schema = self.index.schema
        mine = re.compile(pod + _HOLDER_TAIL)
        holders = [h for h in self.index.client.smembers(schema.pod_holders)
                   if mine.fullmatch(h)]
        if holders:
            self.index.client.delete(*(schema.token_hashes(h) for h in holders))
        return removed

    # -- one batch -----------------------------------------------------------------------

    def _net_changes(self, batch: EventBatch) -> _Changes:
        """Only the last event on each object counts, and nothing before the last
        AllBlocksCleared, so one batch of removals and one of puts say the same."""
        changes = _Changes()
        for event in batch.events:
            if isinstance(event, AllBlocksCleared):
                changes.cleared = True
                changes.last.clear()
                continue
            if event.locality not in (None, LOCAL):
                changes.remote += len(event.block_hashes)
                continue
            try:
                holder = holder_of(self.pod, event.medium, event.group_idx)
            except InvalidArgument as error:
                changes.bad += 1
                log.warning("skipping a %s event: %s", type(event).__name__, error)
                continue
            if isinstance(event, BlockStored):
                parent = None if event.parent_block_hash is None else \
                    prefix_hash_of(event.parent_block_hash)
                size = event.block_size
                for i, block_hash in enumerate(event.block_hashes):
                    prefix_hash = prefix_hash_of(block_hash)
                    tokens = event.token_ids[i * size:(i + 1) * size] \
                        if event.tokens_only and self.token_hashes else None
                    self._last(changes, object_key(prefix_hash, holder),
                               _Store(holder, prefix_hash, parent, tokens))
                    parent = prefix_hash
            else:
                for block_hash in event.block_hashes:
                    prefix_hash = prefix_hash_of(block_hash)
                    self._last(changes, object_key(prefix_hash, holder),
                               _Remove(holder, prefix_hash))
        return changes

    @staticmethod
    def _last(changes: _Changes, key: str, change: _Store | _Remove) -> None:
        changes.last.pop(key, None)  # keep the order of the last events
        changes.last[key] = change

    def _token_hashes(self, stores: Iterable[_Store], removes: Iterable[_Remove],
                      applied: Applied) -> dict[str, int]:
        """Block prefix hash -> token hash, for the blocks stored (chained in event order
        from their parents' token hashes) and removed (as the holders' maps recorded them).
        Token hashes not known in memory are read from the holders' maps: one round trip,
        only then."""
        stores, removes = list(stores), list(removes)
        storing = {c.prefix_hash for c in stores if c.tokens is not None}
        wanted = [(c.holder, c.parent) for c in stores
                  if c.tokens is not None and c.parent is not None and c.parent not in storing]
        wanted += [(c.holder, c.prefix_hash) for c in removes]
        known = self._known_token_hashes(wanted)
        pending = [c for c in stores if c.tokens is not None]
        if self.token_hashes:
            applied.without_token_hash += len(stores) - len(pending)
        while pending:  # parents first (a batch may store a parent again after its child)
            waiting = []
            for change in pending:
                if change.parent is not None and change.parent not in known:
                    if change.parent in storing:
                        waiting.append(change)
                    else:
                        applied.without_token_hash += 1
                    continue
                assert change.tokens is not None
                parent = None if change.parent is None else known[change.parent]
                (known[change.prefix_hash],) = token_block_hashes(change.tokens,
                                                                   len(change.tokens), parent)
                self._remember(change.prefix_hash, known[change.prefix_hash])
            if len(waiting) == len(pending):  # their parents have no token hash either
                applied.without_token_hash += len(waiting)
                break
            pending = waiting
        return known

    def _known_token_hashes(self, wanted: Sequence[tuple[str, str | None]]) -> dict[str, int]:
        known: dict[str, int] = {}
        missing: dict[str, list[str]] = {}
        for holder, prefix_hash in wanted:
            if prefix_hash is None:
                continue
            cached = self._token_cache.get(prefix_hash)
            if cached is not None:
                known[prefix_hash] = cached
            else:
                missing.setdefault(holder, []).append(prefix_hash)
        if missing:
            batch = self.index.batch()
            asked = [(holder, sorted(set(hashes))) for holder, hashes in missing.items()]
            for holder, hashes in asked:
                batch.command("HMGET", self.index.schema.token_hashes(holder),
                              *(h[:16] for h in hashes))
            for (_, hashes), values in zip(asked, batch.execute()):
                for prefix_hash, value in zip(hashes, _unwrap(values)):
                    if value is not None:
                        known[prefix_hash] = int(value, 16)
        return known

    def _remember(self, prefix_hash: str, token_hash: int) -> None:
        self._token_cache[prefix_hash] = token_hash
        self._token_cache.move_to_end(prefix_hash)
        if len(self._token_cache) > TOKEN_CACHE_SIZE:
            self._token_cache.popitem(last=False)

    def _remove(self, keys: list[str], token_keys: list[str], applied: Applied) -> None:
        results = self.index.batch_remove(keys + token_keys, force=True)
        for number, result in enumerate(results):
            if result.ok:
                applied.removed += number < len(keys)
            elif isinstance(result.error, ObjectNotFound):
                applied.not_held += number < len(keys)
            else:
                self._refused(result, applied)

    def _store(self, stores: dict[str, _Store], tokens: dict[str, int],
               applied: Applied) -> None:
        self._register({change.holder for change in stores.values()})
        items: dict[str, str | None] = {key: change.parent for key, change in stores.items()}
        blocks = len(items)
        for change in stores.values():
            token_hash = tokens.get(change.prefix_hash)
            if change.tokens is None or token_hash is None:
                continue
            parent = tokens.get(change.parent) if change.parent is not None else None
            items.setdefault(object_key(token_prefix_hash(token_hash), change.holder),
                             None if parent is None else token_prefix_hash(parent))
        started = []
        results = self.index.batch_put_start([(key, 0, parent) for key, parent in
                                              items.items()], hard_pin=True)
        for number, result in enumerate(results):
            if result.ok:
                started.append((number < blocks, result.key))
            elif isinstance(result.error, ObjectAlreadyExists):
                applied.already_held += number < blocks
            else:
                self._refused(result, applied)
        if started:
            ended = self.index.batch_put_end([key for _, key in started])
            for (block, _), result in zip(started, ended):
                if result.ok:
                    applied.stored += block
                else:
                    self._refused(result, applied)

    def _write_maps(self, stores: Iterable[_Store], removes: Iterable[_Remove],
                    tokens: dict[str, int], commands: Sequence[Sequence[Any]]) -> None:
        """One pipeline: each holder's map gains its blocks stored with a token hash and
        loses those removed; then the caller's commands."""
        gained: dict[str, list[str]] = {}
        for store in stores:
            if store.tokens is not None and store.prefix_hash in tokens:
                gained.setdefault(store.holder, []).extend(
                    (store.prefix_hash[:16], f"{tokens[store.prefix_hash]:016x}"))
        lost: dict[str, list[str]] = {}
        for change in removes:
            if change.prefix_hash in tokens:
                lost.setdefault(change.holder, []).append(change.prefix_hash[:16])
        if not (gained or lost or commands):
            return
        schema = self.index.schema
        batch = self.index.batch()
        for holder, pairs in gained.items():
            batch.command("HSET", schema.token_hashes(holder), *pairs, retry_safe=True)
        for holder, fields_lost in lost.items():
            batch.command("HDEL", schema.token_hashes(holder), *fields_lost,
                          retry_safe=True)
        for command in commands:
            batch.command(*command, retry_safe=True)
        for reply in batch.execute():
            _unwrap(reply)

    def _register(self, holders: set[str]) -> None:
        """Name new holders in the namespace's holder set (once per process and holder)."""
        new = holders - self._registered
        if new:
            self.index.client.sadd(self.index.schema.pod_holders, *sorted(new))
            self._registered |= new

    @staticmethod
    def _refused(result: Result[None], applied: Applied) -> None:
        applied.refused += 1
        log.warning("index refused %s: %s", result.key, result.error)


def pods_for_prefix(index: Index, block_hashes: Sequence[BlockHash]) -> list[tuple[str, int]]:
    """For a chain of vLLM block hashes (first block first), every holder (pod, pod@medium,
    pod/g<group>) of its first block with the number of leading blocks it holds, longest
    first (ties by name). At most three round trips: the holder set, then one HMGET of the
    holders' fields per node for the first PROBE blocks, then for the rest of the chain
    only for holders of all of those. Fields are asked by name, so a node with thousands
    of children (where prompts diverge after a shared system prompt) costs no more than
    any other."""
    if isinstance(block_hashes, (str, bytes)):
        raise InvalidArgument("pods_for_prefix takes a sequence of block hashes, not one; "
                              "wrap it in a list")
    return _holders_of_chain(index, [prefix_hash_of(h) for h in block_hashes])


def pods_for_tokens(index: Index, token_ids: Sequence[int], block_size: int
                    ) -> list[tuple[str, int]]:
    """pods_for_prefix for a prompt given by its token ids: its whole blocks of block_size
    tokens (the engine's block size), by their token hashes (ingest.tokens), so a router
    needs neither the engine's hashing code nor its seed. The same round trips."""
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
        raise InvalidArgument(f"block_size must be a positive int, got {block_size!r}")
    try:
        if isinstance(token_ids, (str, bytes)):
            raise TypeError
        hashes = token_block_hashes(token_ids, block_size)  # packing checks each token
    except (TypeError, struct.error):
        raise InvalidArgument("pods_for_tokens takes a sequence of token ids (ints of 0 to "
                              "2**32 - 1)") from None
    return _holders_of_chain(index, [token_prefix_hash(h) for h in hashes])


def _holders_of_chain(index: Index, chain: Sequence[str]) -> list[tuple[str, int]]:
    alive = set(_unwrap(_read(index, "SMEMBERS", index.schema.pod_holders))) if chain \
        else set()
    runs: dict[str, int] = {}
    for start, end in ((0, PROBE), (PROBE, len(chain))):
        if not alive or start >= end:
            break
        asked = sorted(alive)
        batch = index.batch()
        for prefix_hash in chain[start:end]:
            batch.command("HMGET", index.schema.node(prefix_hash),
                          *(_FIELD_MARK + holder for holder in asked))
        for depth, values in enumerate(batch.execute(), start=start + 1):
            alive &= {h for h, value in zip(asked, _unwrap(values)) if value is not None}
            if not alive:
                break
            runs.update(dict.fromkeys(alive, depth))
    return sorted(runs.items(), key=lambda run: (-run[1], run[0]))


def _read(index: Index, *command: Any) -> Any:
    """One read-only command, re-sent if its reply is lost (as the index's own reads)."""
    batch = index.batch()
    batch.command(*command)
    (reply,) = batch.execute()
    return reply


def _unwrap(reply: object) -> list:  # type: ignore[type-arg]
    if isinstance(reply, Exception):
        raise reply
    return reply  # type: ignore[return-value]
