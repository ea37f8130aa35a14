"""Which pod holds which block, kept as objects of the radix tree: the writes that follow a
pod's KV event batches, and the query "which pods hold the longest leading run of this
chain of blocks".

Block H held by pod P is the object `<H>_pod_<P>` (`<H>_pod_<P>@<medium>` for a medium
other than the GPU, e.g. vLLM's CPU offloading tier) in node H, whose parent is the block
before it in the engine's chain. The object's size is 0: it stands for memory of the pod,
not for bytes in the store, so it takes no capacity and never sets off eviction; it is
hard-pinned, because only the engine knows when the block goes (BlockRemoved,
AllBlocksCleared), so eviction must never drop it.

Every holder is named once in the namespace's holder set (keys.py: `<ns>:pods`), so the
query asks each node of a chain for those fields only, never for its children.

Writes go through the Index's path A: one batch_put_start per KV event batch, each item
carrying its parent hash (the link is written with the first object of a node, or again,
harmlessly, by every pod), then one batch_put_end. Path B (register_radix_tree_node)
would need the objects stored first: a third round trip for the same tree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields

from ..errors import ConfigurationError, InvalidArgument, ObjectAlreadyExists, ObjectNotFound
from ..index import Index
from ..models import Result
from .vllm_events import AllBlocksCleared, BlockHash, BlockStored, EventBatch, prefix_hash_of

log = logging.getLogger("mooncake_redis.ingest")

POD_MARK = "_pod_"
"""Between the block's hash and the holder in an object key."""
_FIELD_MARK = "o:" + POD_MARK
_POD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
_MEDIUM = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,31}")
DEFAULT_MEDIA = (None, "GPU")
"""Media recorded under the bare pod name."""
PROBE = 32
"""pods_for_prefix reads this many leading blocks first, the rest only for the holders of
all of them."""


def check_pod_name(pod: str) -> str:
    if not isinstance(pod, str) or not _POD_NAME.fullmatch(pod):
        raise InvalidArgument(f"pod name {pod!r} must be 1-63 characters of A-Z, a-z, 0-9, "
                              "'.', '-', starting with a letter or digit (a Kubernetes pod "
                              "name fits)")
    return pod


def holder_of(pod: str, medium: str | None) -> str:
    """The pod's name, or `<pod>@<medium>` for another medium than the GPU."""
    if medium in DEFAULT_MEDIA:
        return pod
    if not isinstance(medium, str) or not _MEDIUM.fullmatch(medium):
        raise InvalidArgument(f"medium {medium!r:.40} must be 1-32 characters of A-Z, a-z, "
                              "0-9, '.', '-'")
    return f"{pod}@{medium}"


def object_key(prefix_hash: str, holder: str) -> str:
    return prefix_hash + POD_MARK + holder


@dataclass
class Applied:
    """What applying batches did (counts of objects; added up over a run)."""

    stored: int = 0
    already_held: int = 0
    """BlockStored for a block the tree already gives this pod (a re-store, a replay)."""
    removed: int = 0
    not_held: int = 0
    """BlockRemoved for a block the tree did not give this pod (stored before the ingester
    started, or its BlockStored was lost in a gap)."""
    refused: int = 0
    """Items the index refused (logged with the reason)."""
    cleared: int = 0
    """Objects removed by AllBlocksCleared or a publisher restart."""
    unknown_events: int = 0

    def add(self, other: Applied) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclass(frozen=True)
class _Changes:
    """A batch's net effect: the last word on each object, in event order."""

    cleared: bool
    stores: dict[str, str | None]
    """object key -> parent prefix hash"""
    removes: list[str]


class PodWriter:
    """Applies one pod's KV event batches to an index: one batch of writes per batch of
    events, whatever its size."""

    def __init__(self, index: Index, pod: str):
        self.index = index
        self.pod = check_pod_name(pod)
        self._registered: set[str] = set()
        sample = prefix_hash_of(0)
        if not index.ctx.extractor.is_hash(sample):
            raise ConfigurationError(
                f"namespace {index.namespace!r} uses the {index.ctx.extractor.name!r} prefix "
                "rule, under which a block's 64-hex hash cannot be a parent; ingest into a "
                "namespace with the 'rfc' rule (the default)")

    def apply(self, batch: EventBatch) -> Applied:
        changes = self._net_changes(batch)
        applied = Applied(unknown_events=batch.unknown)
        if changes.cleared:
            applied.cleared = self.clear()
        if changes.removes:
            for result in self.index.batch_remove(changes.removes, force=True):
                if result.ok:
                    applied.removed += 1
                elif isinstance(result.error, ObjectNotFound):
                    applied.not_held += 1
                else:
                    self._refused(result, applied)
        if changes.stores:
            self._register({key.partition(POD_MARK)[2] for key in changes.stores})
            started = []
            items = [(key, 0, parent) for key, parent in changes.stores.items()]
            for result in self.index.batch_put_start(items, hard_pin=True):
                if result.ok:
                    started.append(result.key)
                elif isinstance(result.error, ObjectAlreadyExists):
                    applied.already_held += 1
                else:
                    self._refused(result, applied)
            if started:
                for result in self.index.batch_put_end(started):
                    if result.ok:
                        applied.stored += 1
                    else:
                        self._refused(result, applied)
        return applied

    def clear(self) -> int:
        """Remove every object of this pod, in every medium (a SCAN of the namespace:
        AllBlocksCleared is rare, a per-pod index would cost on every write)."""
        pod = self.pod.replace(".", r"\.")
        return self.index.remove_by_regex(rf"^[0-9a-f]{{64}}{POD_MARK}{pod}(@[A-Za-z0-9.-]+)?$",
                                          force=True)

    def _register(self, holders: set[str]) -> None:
        """Name new holders in the namespace's holder set (once per process and holder)."""
        new = holders - self._registered
        if new:
            self.index.client.sadd(self.index.ctx.schema.pod_holders, *sorted(new))
            self._registered |= new

    def _net_changes(self, batch: EventBatch) -> _Changes:
        """Only the last event on each object counts, and nothing before the last
        AllBlocksCleared, so one batch of removals and one of puts say the same."""
        cleared = False
        last: dict[str, str | None | bool] = {}  # key -> parent hash (stored) or False
        for event in batch.events:
            if isinstance(event, AllBlocksCleared):
                cleared = True
                last.clear()
                continue
            holder = holder_of(self.pod, event.medium)
            parent = None
            if isinstance(event, BlockStored) and event.parent_block_hash is not None:
                parent = prefix_hash_of(event.parent_block_hash)
            for block_hash in event.block_hashes:
                prefix_hash = prefix_hash_of(block_hash)
                key = object_key(prefix_hash, holder)
                last.pop(key, None)  # keep the order of the last events
                last[key] = parent if isinstance(event, BlockStored) else False
                parent = prefix_hash
        stores = {key: parent for key, parent in last.items() if parent is not False}
        removes = [key for key, parent in last.items() if parent is False]
        return _Changes(cleared, stores, removes)  # type: ignore[arg-type]

    @staticmethod
    def _refused(result: Result[None], applied: Applied) -> None:
        applied.refused += 1
        log.warning("index refused %s: %s", result.key, result.error)


def pods_for_prefix(index: Index, block_hashes: Sequence[BlockHash]) -> list[tuple[str, int]]:
    """For a chain of vLLM block hashes (first block first), every holder (pod, or
    pod@medium) of its first block with the number of leading blocks it holds, longest
    first (ties by name). At most three round trips: the holder set, then one HMGET of the
    holders' fields per node for the first PROBE blocks, then for the rest of the chain
    only for holders of all of those. Fields are asked by name, so a node with thousands
    of children (where prompts diverge after a shared system prompt) costs no more than
    any other."""
    if isinstance(block_hashes, (str, bytes)):
        raise InvalidArgument("pods_for_prefix takes a sequence of block hashes, not one; "
                              "wrap it in a list")
    chain = [prefix_hash_of(h) for h in block_hashes]
    ctx = index.ctx
    alive = set(_unwrap(ctx.read("SMEMBERS", ctx.schema.pod_holders)))
    runs: dict[str, int] = {}
    for start, end in ((0, PROBE), (PROBE, len(chain))):
        if not alive or start >= end:
            break
        asked = sorted(alive)
        batch = ctx.batch()
        for prefix_hash in chain[start:end]:
            batch.command("HMGET", ctx.schema.node(prefix_hash),
                          *(_FIELD_MARK + holder for holder in asked))
        for depth, values in enumerate(batch.execute(), start=start + 1):
            alive &= {h for h, value in zip(asked, _unwrap(values)) if value is not None}
            if not alive:
                break
            runs.update(dict.fromkeys(alive, depth))
    return sorted(runs.items(), key=lambda run: (-run[1], run[0]))


def _unwrap(reply: object) -> list:  # type: ignore[type-arg]
    if isinstance(reply, Exception):
        raise reply
    return reply  # type: ignore[return-value]
