"""Writes that link nodes to parents: path A (put_start, with or without a parent block
hash) and path B (register_radix_tree_node), with per-item results.

The link protocol (docs/ARCHITECTURE.md): step 1 in the parent's shard lists the child at
an epoch and records a pending link; step 2 in the child's shard writes the object or the
registration and names the parent, unless a fence, a stale epoch, another parent or a
possible cycle refuses it. On a single Redis both steps of a whole batch go in one
pipeline: one round trip. Items refused for a reason the client can mend (a stale or
fenced epoch, a cycle check) are sent again, and so, once, are items refused for their
shard's byte limit, after borrowing limit from other shards (borrowing.py); links this
call recorded but no item confirmed are settled at once; a new link into a node with
children from elsewhere is confirmed only by the resolver, after its walk for cycles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from mooncake_redis.capacity.admission import default_shard_limit
from mooncake_redis.capacity.borrowing import borrow, charged_bytes
from mooncake_redis.context import Context
from mooncake_redis.errors import (
    CycleDetected,
    LinkContention,
    MooncakeRedisError,
    NoSpace,
    ParentConflict,
    ReplyCode,
    from_script_error,
    split_script_error,
)
from mooncake_redis.models import Result
from mooncake_redis.prefix import all_digests, is_digest
from mooncake_redis.tree.links import (
    Link,
    add_link,
    confirm_links,
    settle_links_now,
    walk_finds_cycles,
)
from mooncake_redis.values import CHILD_PREFIX, child_field_argument

MAX_SENDS = 4
"""Sends of one item at most (a fenced or stale epoch, then a cycle walk, cost one each)."""

LinkFlag = Literal["", "L", "C"]
"""What put_start and register answer after 'OK': '' (no parent), 'L' (linked: the link
existed, or no cycle can close through it, so the client confirms it) or 'C' (linked into
a node with children from elsewhere: left pending for the resolver's cycle walk)."""
NO_LINK: LinkFlag = ""
LINKED: LinkFlag = "L"
LEFT_FOR_RESOLVER: LinkFlag = "C"
LINK_FLAGS: frozenset[str] = frozenset(get_args(LinkFlag))

NEEDS_WALK: Literal["walk"] = "walk"
"""An item whose step 2 was refused with CYCLE_CHECK: a cycle walk decides before it is
sent again."""

WriteState = Literal["", "L", "C", "walk"]
"""'' (send it), 'walk' (NEEDS_WALK) or, once written, its link flag."""


Prepared = tuple[str, str, str, int, "str | None", str]
"""A put's item as Index checked it: (key, prefix hash, suffix, size, parent hash or None,
packed replicas or '')."""

OK_REPLIES = frozenset("OK" + flag for flag in LINK_FLAGS)
"""put.lua's answers for a written item ('OK' and its link flag)."""

SEND_AGAIN = frozenset({ReplyCode.FENCED, ReplyCode.STALE_EPOCH, ReplyCode.CYCLE_CHECK,
                        ReplyCode.NOT_HERE, ReplyCode.NO_SPACE})
"""Refusals the lean path leaves to write(): it sends the item again after what it mends
(an epoch, a cycle walk, the slot map, borrowed limit)."""


def put(ctx: Context, items: Sequence[Prepared], pins: int, mode: str) -> list[Result[None]]:
    """Objects put (lua/put.lua's modes), one Result per item: the lean path first (one call
    per Redis node, no object per item: the batch whole, when every link is within its
    node and the batch's links point back to nodes named before them), then write() for
    whatever it left (the general path: links across nodes, re-sends for a fenced or stale
    epoch, cycle walks, borrowed limit)."""
    results = _lean(ctx, items, pins, mode) or [None] * len(items)
    rest = [position for position, result in enumerate(results) if result is None]
    if rest:
        writes = [Write(key, prefix_hash, parent, suffix, size, pins, replicas)
                  for key, prefix_hash, suffix, size, parent, replicas in
                  (items[position] for position in rest)]
        for position, result in zip(rest, write(ctx, writes, mode)):
            results[position] = result
    return results  # type: ignore[return-value]  # every item has one now


def _lean(ctx: Context, items: Sequence[Prepared], pins: int, mode: str
          ) -> list[Result[None] | None] | None:
    """The items in one call per Redis node, their links written in it; None where the
    batch is not for this path (a node given two parents, a parent named after its child,
    a link across nodes); per item None where a refusal is write()'s to mend."""
    groups: dict[str, tuple[str | None, list[int], list[Any]]] = {}
    for position, (_, prefix_hash, suffix, size, parent, replicas) in enumerate(items):
        group = groups.get(prefix_hash)
        if group is None:
            groups[prefix_hash] = (parent, [position], [suffix, size, pins, replicas])
        elif group[0] == parent:
            group[1].append(position)
            group[2].extend((suffix, size, pins, replicas))
        else:
            return None  # refuse_in_batch says which
    seen: set[str] = set()
    for prefix_hash, (parent, _, _) in groups.items():  # in the order first named
        if parent is not None and (parent == prefix_hash or parent in groups
                                   and parent not in seen):
            return None  # named after its child, or a cycle: refuse_in_batch decides
        seen.add(prefix_hash)
    single = ctx.partition is None and not ctx.executor.cluster
    settings = ctx.settings
    calls = ctx.calls("put", mode, ctx.token, 0, settings.put_start_discard_timeout_ms,
                      default_shard_limit(settings.capacity_bytes, settings.shard_count),
                      ctx.batch_id(), settings.max_depth)
    digests = all_digests(list(groups))  # each node's field in its parent: its bare hash
    parents = [group[0] for group in groups.values() if group[0] is not None]
    node_of, schema = ctx.node_of, ctx.schema
    shard_of = schema.digest_shard if digests and all_digests(parents) else schema.shard
    add = calls.items
    for prefix_hash, (parent, positions, objects) in groups.items():
        shard = shard_of(prefix_hash)
        if parent is None:
            add(shard, positions, prefix_hash, "", "", "", "0", len(positions), *objects)
            continue
        parent_shard = shard_of(parent)
        if not single and node_of(parent_shard) != node_of(shard):
            return None  # a link across nodes: two steps
        add(shard, positions, prefix_hash, parent, parent_shard,
            "" if digests or is_digest(prefix_hash) else CHILD_PREFIX + prefix_hash, "0",
            len(positions), *objects)
    batch = ctx.batch()
    calls.queue(batch)
    results: list[Result[None] | None] = [None] * len(items)
    for position, reply in calls.per_item(batch.execute()):
        if reply.__class__ is str and reply in OK_REPLIES:
            results[position] = Result(items[position][0])
        elif isinstance(reply, MooncakeRedisError):
            results[position] = Result(items[position][0], error=reply)
        else:
            code = split_script_error(str(reply))
            if code is None or code[0] not in SEND_AGAIN:
                key = items[position][0]
                results[position] = Result(key, error=from_script_error(
                    str(reply), key=key, prefix_hash=items[position][1]))
    return results


@dataclass(slots=True)
class Write:
    """One item: an object to put_start (`suffix` set), or a node to register (the
    suffixes of the stored objects to check in `registered`)."""

    key: str
    """What the caller knows the item by: the object key, or the prefix hash."""
    prefix_hash: str
    parent: str | None
    suffix: str | None = None
    size: int = 0
    pins: int = 0
    replicas: str = ""
    """The object's replicas, packed (values.pack_replicas); '' for none."""
    registered: Sequence[str] = ()
    checked: bool = False
    """A walk up from the parent did not meet this node: send with cycle-checked=1."""
    stamp: int | None = None
    """The walk stayed in the node's shard: the shard's link counter when it began (sent
    as cycle-checked=1:<stamp>, so step 2 refuses to write if a link changed since)."""
    result: Result[None] | None = None
    state: WriteState = NO_LINK
    """'' (send it), 'walk' (a cycle walk decides), or the link flag of a written item."""
    min_epoch: int = 0
    epoch: int = 0
    """The epoch of the send that wrote it."""

    @property
    def object_key(self) -> str | None:
        return self.key if self.suffix is not None else None

    def refuse(self, error: MooncakeRedisError) -> None:
        self.result = Result(self.key, error=error)


@dataclass
class _Sent:
    """The links one send's step 1 recorded as pending, at its epoch."""

    epoch: int
    pending: list[Link] = field(default_factory=list)


def write(ctx: Context, writes: list[Write], mode: str = "start") -> list[Result[None]]:
    """Send the items (after the in-batch checks) until each is written or refused. Modes
    as lua/put.lua's: 'start' (put_start), 'put' (complete at once), 'upsert_start' and
    'upsert' (may replace stored objects)."""
    refuse_in_batch(writes)
    sends: list[_Sent] = []
    _send_until_answered(ctx, [w for w in writes if w.result is None], mode, sends)
    refused = [w for w in writes if w.result is not None and isinstance(w.result.error, NoSpace)]
    if refused:  # the refusal path only: borrow limit from other shards, send once more
        needs: dict[str, int] = defaultdict(int)
        for w in refused:
            needs[ctx.shard(w.prefix_hash)] += charged_bytes(w.size, w.replicas)
        room = borrow(ctx, needs)
        again = [w for w in refused if ctx.shard(w.prefix_hash) in room]
        for w in again:
            w.result, w.state = None, NO_LINK
        _send_until_answered(ctx, again, mode, sends)
    _settle(ctx, writes, sends)
    return [w.result for w in writes]  # type: ignore[misc]  # every item has one now


def _send_until_answered(ctx: Context, todo: list[Write], mode: str,
                         sends: list[_Sent]) -> None:
    """Send until each item is written or refused (a fenced or stale epoch, or a cycle
    walk, costs a send); every send is recorded in `sends` for _settle."""
    for _ in range(MAX_SENDS):
        if not todo:
            break
        sends.append(_send(ctx, todo, mode))
        todo = _after_send(ctx, todo)
    for w in todo:
        w.refuse(LinkContention(
            f"gave up after {MAX_SENDS} sends: the link's epoch kept being fenced or stale "
            "(concurrent deletions of this node, or a resolver with no grace period); send "
            "it again", key=w.object_key, prefix_hash=w.prefix_hash))


def refuse_in_batch(writes: list[Write]) -> None:
    """Within one batch a node names one parent, never itself, and the batch's links form
    no cycle; an item breaking that is refused before anything is sent."""
    parents: dict[str, str] = {}
    roots = _Roots()
    for w in writes:
        if w.parent is None:
            continue
        child, parent = w.prefix_hash, w.parent
        if parent == child:
            w.refuse(CycleDetected(f"node {child} names itself as its parent",
                                   key=w.object_key, prefix_hash=child))
        elif parents.get(child, parent) != parent:
            w.refuse(ParentConflict(
                f"node {child} is given parents {parents[child]} and {parent} in one batch",
                key=w.object_key, prefix_hash=child))
        elif child not in parents and roots.find(parent) == child:
            w.refuse(CycleDetected(f"the links of this batch form a cycle through {child}",
                                   key=w.object_key, prefix_hash=child))
        elif child not in parents:
            parents[child] = parent
            roots.join(child, parent)


class _Roots:
    """The roots of the batch's forest of links (union-find with path halving): a new
    link child -> parent closes a cycle iff the parent's root is the child, since the
    child has no parent yet and so is a root."""

    def __init__(self) -> None:
        self._up: dict[str, str] = {}

    def find(self, node: str) -> str:
        up = self._up
        while node in up:
            parent = up[node]
            if parent in up:
                up[node] = up[parent]
            node = parent
        return node

    def join(self, child: str, parent: str) -> None:
        self._up[child] = self.find(parent)


def _send(ctx: Context, todo: list[Write], mode: str) -> _Sent:
    """One batch: step 1 of every link whose parent another Redis node serves, a barrier,
    then every item, one call per node. A link whose parent the child's node serves too is
    written whole in that call (no step 1, no pending entry); on a single Redis every link
    is."""
    batch_id = ctx.batch_id()
    settings = ctx.settings
    shard_of = ctx.shard
    node_of = ctx.node_of
    remote = {(w.parent, w.prefix_hash) for w in todo if w.parent
              and node_of(shard_of(w.parent)) != node_of(shard_of(w.prefix_hash))}
    # a send with a link across nodes takes its epoch from the client's clock (step 1 and
    # step 2 must agree on it); one without lets each script use Redis's time
    sent = _Sent(ctx.epoch(at_least=max([w.min_epoch for w in todo])) if remote else 0)
    links = ctx.calls("link", batch_id)
    written = {w.prefix_hash for w in todo}
    # by parent: each parent's children together
    for parent, child in sorted(remote):
        add_link(links, ctx, parent, child, sent.epoch, tag=(child, parent),
                 parent_written=parent in written)
    puts = ctx.calls("put", mode, ctx.token, sent.epoch,
                     settings.put_start_discard_timeout_ms,
                     default_shard_limit(settings.capacity_bytes, settings.shard_count),
                     batch_id, settings.max_depth)
    registers = ctx.calls("register", batch_id, sent.epoch, settings.max_depth)
    groups: dict[tuple[str, str, str], list[Write]] = {}
    for w in todo:
        checked = ("0" if not w.checked else "1" if w.stamp is None
                   else f"1:{w.stamp}")
        parent = w.parent or ""
        parent_shard = "" if not parent or (parent, w.prefix_hash) in remote \
            else shard_of(parent)
        if w.suffix is not None:
            group = groups.get((w.prefix_hash, parent, checked))
            if group is None:
                group = groups[w.prefix_hash, parent, checked] = []
            group.append(w)
        else:
            registers.item(shard_of(w.prefix_hash), w, w.prefix_hash, parent, parent_shard,
                           child_field_argument(w.prefix_hash), checked, len(w.registered),
                           *w.registered)
    for (prefix_hash, parent, checked), group in groups.items():
        objects: list[object] = []
        for w in group:
            objects += (w.suffix, w.size, w.pins, w.replicas)
        parent_shard = "" if not parent or (parent, prefix_hash) in remote \
            else shard_of(parent)
        puts.items(shard_of(prefix_hash), group, prefix_hash, parent, parent_shard,
                   child_field_argument(prefix_hash), checked, len(group), *objects)
    batch = ctx.batch()
    links.queue(batch)
    batch.barrier()  # the parents on other nodes must list their children first
    puts.queue(batch)
    registers.queue(batch)
    results = batch.execute()
    for link, wrote in links.per_item(results):
        if isinstance(wrote, MooncakeRedisError):
            raise wrote
        if int(wrote):
            sent.pending.append(link)
    for calls in (puts, registers):
        for w, outcome in calls.per_item(results):
            _record(w, outcome, sent.epoch)
        for w in calls.resent_tags(batch):
            if w.state == LINKED:  # the lost first run may have linked it through the
                w.state = LEFT_FOR_RESOLVER  # checked path: leave it to the resolver's walk
    return sent


def _record(w: Write, outcome: object, epoch: int) -> None:
    """One item's reply: its result, or what to do before sending it again."""
    w.state, w.epoch = NO_LINK, epoch
    if isinstance(outcome, str):  # the usual reply: no other check
        text = outcome
    elif isinstance(outcome, MooncakeRedisError):
        w.refuse(outcome)
        return
    else:
        text = str(outcome)
    if text.startswith("OK"):
        flag = text[2:]
        if flag not in LINK_FLAGS:
            raise AssertionError(f"a write script answered {text!r}")
        w.state, w.result = cast(LinkFlag, flag), Result(w.key)
        return
    code, detail = split_script_error(text) or (None, "")
    if code is ReplyCode.FENCED:
        w.min_epoch = int(detail) + 1
    elif code is ReplyCode.CYCLE_CHECK:
        w.state = NEEDS_WALK
    elif code is not ReplyCode.STALE_EPOCH and code is not ReplyCode.NOT_HERE:
        w.refuse(from_script_error(text, key=w.object_key, prefix_hash=w.prefix_hash))


def _after_send(ctx: Context, todo: list[Write]) -> list[Write]:
    """The items to send again: those with a fenced or stale epoch, and links into nodes
    with children whose walk up from the parent did not meet the node."""
    walking = [w for w in todo if w.result is None and w.state == NEEDS_WALK]
    if walking:
        intended = {w.prefix_hash: w.parent for w in todo
                    if w.result is None and w.parent is not None}
        stamps: dict[str, int] = {}
        cycles = walk_finds_cycles(ctx, {w.prefix_hash: w.parent for w in walking
                                         if w.parent is not None}, intended, stamps)
        for w in walking:
            if w.prefix_hash in cycles:
                w.refuse(CycleDetected(
                    f"linking node {w.prefix_hash} under {w.parent} would make it its own "
                    "ancestor", key=w.object_key, prefix_hash=w.prefix_hash))
            else:
                w.checked, w.stamp = True, stamps.get(w.prefix_hash)
    return [w for w in todo if w.result is None]


def _settle(ctx: Context, writes: Sequence[Write], sends: Sequence[_Sent]) -> None:
    """Every pending link this call recorded ends here: confirmed (a written item raised
    the child's epoch to at least the link's, and no cycle can close through the link),
    left for the resolver (flag 'C': its walk confirms it), or settled at once (the
    resolver's own step: the child keeps it, raising its epoch, or it goes)."""
    flags: dict[Link, LinkFlag] = {}
    written_at: dict[Link, int] = {}
    for w in writes:
        state = w.state
        if state and w.parent and w.result is not None and w.result.error is None:
            link = (w.prefix_hash, w.parent)
            flags[link] = LEFT_FOR_RESOLVER if LEFT_FOR_RESOLVER in (state, flags.get(link)) \
                else LINKED
            epoch = written_at.get(link, 0)
            written_at[link] = w.epoch if w.epoch > epoch else epoch
    confirm: list[tuple[Link, int]] = []
    settle: list[tuple[Link, int]] = []
    for sent in sends:
        for link in sent.pending:
            flag = flags.get(link)
            if flag == LEFT_FOR_RESOLVER:
                continue
            if flag == LINKED and sent.epoch <= written_at[link]:
                confirm.append((link, sent.epoch))
            else:
                settle.append((link, sent.epoch))
    confirm_links(ctx, confirm)
    if settle:
        settle_links_now(ctx, settle)
