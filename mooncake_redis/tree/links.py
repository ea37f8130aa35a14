"""Parent links across shards: confirmations, unlinks with their cascade, cycle walks, and
the resolver that settles what crashed or refused writers and deleters left behind.

A link (child, parent) lives in two shards: the parent lists the child at an epoch, the
child names the parent (docs/ARCHITECTURE.md has the protocol and why it is safe). Every
step here is one script call per shard for all the links of that shard.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError
from mooncake_redis.executor import raise_first_error
from mooncake_redis.scripts import NodeCalls
from mooncake_redis.values import child_field_argument, parent_of, to_int

log = logging.getLogger(__name__)

Link = tuple[str, str]
"""(child hash, parent hash)"""

Intent = tuple[str, str, str]
"""An unlink to run: (parent hash, child hash, epoch), as the scripts return it."""

NewLeaf = tuple[str, float, int, bool]
"""A node that became a leaf: (hash, score, bytes, soft-pinned)."""

RESOLVER_PAGE = 64
"""Pending links or unlink intents read per shard per resolver pass."""

RESOLVER_TIME_LIMIT_S = 10.0
"""A resolver run starts no new pass after this long (the rest waits for the next run: an
eviction job, Index.resolve, fsck --repair), so no planted or piled-up entry can hold an
eviction job for long. A constant, not a setting: the budget of entries is the knob that
callers pass."""

MAX_EPOCH_DIGITS = 16
"""An epoch is Redis time in ms (13 digits today); more digits than this cannot be one
(Lua would read a 400-digit epoch as inf)."""


def pending_member(parent: str, child: str, epoch: int | str) -> str:
    return f"{parent}|{child}|{epoch}"


def outbox_member(child: str, parent: str, epoch: int | str) -> str:
    return f"{child}|{parent}|{epoch}"


def triples(flat: Sequence[str]) -> list[Intent]:
    return [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]


def new_leaves(flat: Sequence[str]) -> list[NewLeaf]:
    return [(flat[i], float(flat[i + 1]), int(flat[i + 2]), flat[i + 3] == "1")
            for i in range(0, len(flat), 4)]


def add_link(links: NodeCalls[Any], ctx: Context, parent: str, child: str, epoch: int,
             tag: Any = None, parent_written: bool = False) -> None:
    """Queue step 1 of a link across nodes (lua/link.lua) on the call of the parent's node;
    parent_written: the same batch writes the parent too (its step 2 may then skip the
    cycle walk)."""
    links.item(ctx.shard(parent), tag, parent, child, child_field_argument(child), epoch,
               1 if parent_written else 0)


def add_unlink(unlinks: NodeCalls[Any], ctx: Context, parent: str, child: str,
               epoch: int | str, pending: str = "") -> None:
    """Queue an unlink (lua/unlink.lua): drop the child field if it holds `epoch` ('' =
    keep it), and the pending entry `pending` if given."""
    unlinks.item(ctx.shard(parent), None, parent, child, epoch, pending)


def confirm_links(ctx: Context, confirmed: Iterable[tuple[Link, int]]) -> None:
    """Drop the pending entries of links a child confirmed (a deferred ZREM per shard)."""
    members: dict[str, list[str]] = defaultdict(list)
    shard_of = ctx.schema.shard
    for (child, parent), epoch in confirmed:
        members[shard_of(parent)].append(pending_member(parent, child, epoch))
    for shard, shard_members in members.items():
        ctx.defer("ZREM", ctx.schema.shard_keys(shard).pending, *shard_members)


def cascade(ctx: Context, intents: Iterable[Intent],
            on_new_leaf: Callable[[NewLeaf], None] | None = None) -> int:
    """Run unlinks level by level (one round trip per level for all of them): each parent
    drops the child if the field still holds the epoch; a parent left empty is deleted
    and its own unlink joins the next level. The intents' outbox entries are cleared on
    the next batch. Returns how many child fields were removed."""
    level = list(intents)
    removed = depth = 0
    while level:
        depth += 1
        if depth > ctx.settings.max_depth:
            raise MooncakeRedisError(f"cascade deeper than max_depth={ctx.settings.max_depth}; "
                                     "the resolver finishes it from the outbox")
        unlinks = ctx.calls("unlink")
        for parent, child, epoch in level:
            add_unlink(unlinks, ctx, parent, child, epoch)
        next_level: list[Intent] = []
        removed += _run_unlinks(ctx, unlinks, on_new_leaf, next_level)
        clear_outbox(ctx, level)
        level = next_level
    return removed


def _run_unlinks(ctx: Context, unlinks: NodeCalls[Any],
                 on_new_leaf: Callable[[NewLeaf], None] | None, intents: list[Intent]) -> int:
    """Send unlink calls; collect the unlinks of parents they deleted into `intents`."""
    batch = ctx.batch()
    unlinks.queue(batch)
    results = batch.execute()
    raise_first_error(results)
    removed = 0
    for _, (flags, intents_flat, leaves_flat) in unlinks.replies(results):
        removed += sum(int(f) for f in flags)
        intents += triples(intents_flat)
        if on_new_leaf is not None:
            for leaf in new_leaves(leaves_flat):
                on_new_leaf(leaf)
    return removed


def clear_outbox(ctx: Context, done: Iterable[Intent]) -> None:
    members: dict[str, list[str]] = defaultdict(list)
    for parent, child, epoch in done:
        members[ctx.shard(child)].append(outbox_member(child, parent, epoch))
    for shard, shard_members in members.items():
        ctx.defer("ZREM", ctx.schema.shard_keys(shard).outbox, *shard_members)


def walk_finds_cycles(ctx: Context, walks: Mapping[str, str],
                      intended: Mapping[str, str | None] | None = None,
                      stamps: dict[str, int] | None = None) -> set[str]:
    """For each (node, new parent), walk up from the parent (all walks together, one round
    trip per level) and return the nodes the walk meets: linking them would close a cycle.
    `intended` holds parents this batch is about to set, followed where Redis has none.
    A walk that comes back to a node it passed (a loop above the parent that does not run
    through the node: the batch's link that closes it is refused by its own walk) meets
    no cycle of this link and ends there, as at a root. A walk longer than max_depth
    counts as a cycle (the tree is deeper than configured).
    `stamps` gets, for each walk that met no cycle without leaving its node's shard, the
    shard's `links` counter read before the walk: step 2 writes the link only if it is
    unchanged (lua/_lib.lua walk_holds), so a cycle within one shard is always refused."""
    intended = intended or {}
    cursors = dict(walks)
    passed = {node: {parent} for node, parent in walks.items()}
    found: set[str] = set()
    in_shard = {node: ctx.shard(node) == ctx.shard(parent) for node, parent in walks.items()
                if stamps is not None}
    stamped = sorted({ctx.shard(node) for node, local in in_shard.items() if local})
    counters: dict[str, int] = {}
    for _ in range(ctx.settings.max_depth):
        for node, cursor in list(cursors.items()):
            if cursor == node:
                found.add(node)
                del cursors[node]
        if not cursors:
            return found
        batch = ctx.batch()
        for shard in stamped:  # before the walk's first read, on the same node
            batch.command("HGET", ctx.schema.shard_keys(shard).stats, "links")
        asked = sorted(set(cursors.values()))
        for cursor in asked:
            batch.command("HGET", ctx.schema.node(cursor), "p")
        replies = batch.execute()
        counters.update((shard, to_int(reply)) for shard, reply in zip(stamped, replies))
        parents = dict(zip(asked, replies[len(stamped):]))
        stamped = []
        for node, cursor in list(cursors.items()):
            parent = parent_of(parents[cursor]) or intended.get(cursor)
            if parent is None or parent in passed[node]:  # a root, or a loop without node
                del cursors[node]
                if stamps is not None and in_shard[node]:
                    stamps[node] = counters[ctx.shard(node)]
            else:
                passed[node].add(parent)
                cursors[node] = parent
                if in_shard.get(node) and ctx.shard(parent) != ctx.shard(node):
                    in_shard[node] = False
    return found | set(cursors)


@dataclass
class ResolverReport:
    """What one resolver run settled."""

    intents: int = 0
    """Unlinks finished for deleters that did not finish them."""
    kept: int = 0
    """Pending links whose child names the parent: confirmed."""
    dropped: int = 0
    """Pending links whose child does not name the parent: fenced and removed."""
    cycles_broken: int = 0
    fences_dropped: int = 0
    """Fences past the link epoch horizon, dropped."""
    malformed: int = 0
    """Pending or outbox entries that cannot stand for a link where they were read (not
    "<hash>|<hash>|<epoch>", or in another shard's set than their owner's), and unlink
    intents whose child lives and names the parent (no deleter wrote them): dropped."""
    unfinished: bool = False
    """The run stopped at its budget or time limit with entries left for the next run."""

    def __bool__(self) -> bool:
        return bool(self.intents or self.kept or self.dropped or self.cycles_broken
                    or self.malformed)


def settle_links_now(ctx: Context, links: Iterable[tuple[Link, int]]) -> ResolverReport:
    """The resolver's step for links this client just recorded but no item confirmed."""
    report = ResolverReport()
    resolve_links(ctx, [(parent, child, str(epoch)) for (child, parent), epoch in links],
                  report)
    return report


def resolve_links(ctx: Context, entries: Sequence[Intent], report: ResolverReport) -> None:
    """Settle pending links (parent, child, epoch): in the child's shard the child keeps
    the link (its epoch raised) or is fenced; then in the parent's shard the pending entry
    goes, with the child field if it was not kept and still holds the epoch (cascading).
    Kept links into nodes with children are walked for cycles, which are broken."""
    if not entries:
        return
    checks = ctx.calls("resolve")
    for parent, child, epoch in entries:
        checks.item(ctx.shard(child), (parent, child, epoch), child, parent, epoch, "check")
    batch = ctx.batch()
    checks.queue(batch)
    results = batch.execute()
    raise_first_error(results)
    unlinks = ctx.calls("unlink")
    walks: dict[str, tuple[str, str]] = {}
    for (parent, child, epoch), verdict in checks.per_item(results):
        kept = verdict.startswith("keep")
        report.kept += kept
        report.dropped += not kept
        add_unlink(unlinks, ctx, parent, child, "" if kept else epoch,
                   pending_member(parent, child, epoch))
        if verdict == "keep+children":
            walks[child] = (parent, epoch)
    intents: list[Intent] = []
    _run_unlinks(ctx, unlinks, None, intents)
    cascade(ctx, intents)
    if walks:
        break_newest_on_cycles(ctx, walks, report)


def break_newest_on_cycles(ctx: Context, links: Mapping[str, tuple[str, str]],
                           report: ResolverReport) -> None:
    """Links child -> (parent, epoch) the resolver keeps into nodes with children: walk up
    from each child; every cycle met loses ONE link, its newest (the highest epoch, ties by
    hash: the last of the racing writers that each saw no cycle when it wrote), then the
    walks run again, so a cycle loses no more than the one link it needs. A walk longer
    than max_depth that meets no node twice breaks its own link (the tree is deeper than
    configured, as the writers' walks refuse)."""
    for _ in range(len(links) + 1):  # racing writers may close new cycles: bounded
        newest, too_deep = _cycles_met(ctx, links)
        to_break = dict(newest.values())
        for child in too_deep:
            to_break.setdefault(child, links[child])
        if not to_break:
            return
        break_cycles(ctx, to_break, report)


def _cycles_met(ctx: Context, starts: Mapping[str, tuple[str, str]]
                ) -> tuple[dict[frozenset[str], tuple[str, tuple[str, str]]], set[str]]:
    """Walk up from each start node as Redis has it now (all walks together, one round trip
    per level). Returns, per cycle met (by its nodes: in a forest where each node has one
    parent, two walks meeting a cycle meet the same one), its newest link as
    (child, (parent, epoch)); and the starts whose walk passed max_depth meeting none."""
    paths = {start: [start] for start in starts}
    read: dict[str, tuple[str | None, int]] = {}
    newest: dict[frozenset[str], tuple[str, tuple[str, str]]] = {}
    for _ in range(ctx.settings.max_depth + 1):
        asked = sorted({path[-1] for path in paths.values()} - set(read))
        if asked:
            batch = ctx.batch()
            for node in asked:
                batch.command("HMGET", ctx.schema.node(node), "p", "pe")
            for node, (parent, epoch) in zip(asked, batch.execute()):
                read[node] = (parent_of(parent), to_int(epoch))
        for start, path in list(paths.items()):
            parent = read[path[-1]][0]
            if parent is None:
                del paths[start]
            elif parent in path:
                cycle = path[path.index(parent):]
                child = max(cycle, key=lambda node: (read[node][1], node))
                link = (cycle[(cycle.index(child) + 1) % len(cycle)], str(read[child][1]))
                newest[frozenset(cycle)] = (child, link)
                del paths[start]
            else:
                path.append(parent)
        if not paths:
            break
    return newest, set(paths)


def break_cycles(ctx: Context, links: Mapping[str, tuple[str, str]],
                 report: ResolverReport) -> int:
    """Links child -> (parent, epoch) chosen to break cycles, one per cycle: each child
    still naming that parent at no newer epoch becomes a root (fenced at its epoch) and
    the parent drops it. Returns how many broke."""
    if not links:
        return 0
    before = report.cycles_broken
    breaks = ctx.calls("resolve")
    for child, (parent, epoch) in links.items():
        breaks.item(ctx.shard(child), (child, parent), child, parent, epoch, "break")
    batch = ctx.batch()
    breaks.queue(batch)
    results = batch.execute()
    raise_first_error(results)
    unlinks = ctx.calls("unlink")
    for (child, parent), verdict in breaks.per_item(results):
        if verdict.startswith("broken"):
            report.cycles_broken += 1
            log.warning("broke a cycle through %s -> %s (racing writers)", child, parent)
            add_unlink(unlinks, ctx, parent, child, verdict.split(" ", 1)[1])
    if unlinks:
        intents: list[Intent] = []
        _run_unlinks(ctx, unlinks, None, intents)
        cascade(ctx, intents)
    return report.cycles_broken - before


def resolve(ctx: Context, grace_ms: int | None = None, budget: int = 100_000,
            shards: Sequence[str] | None = None,
            time_limit_s: float = RESOLVER_TIME_LIMIT_S) -> ResolverReport:
    """The resolver: finish unlink intents and settle pending links older than the grace
    period, pass after pass, until none is left, bounded by `budget` entries and by
    `time_limit_s` (no pass starts after it; report.unfinished says work is left). Runs
    inside every eviction job and in `fsck --repair` (grace 0: at quiescence nothing
    dangles). `shards` limits where it looks (default: all)."""
    grace = ctx.settings.resolver_grace_ms if grace_ms is None else grace_ms
    deadline = time.monotonic() + time_limit_s
    report = ResolverReport()
    where = ctx.all_shards() if shards is None else tuple(shards)
    report.fences_dropped = trim_fences(ctx, where)
    while True:
        cutoff = ctx.redis_time_ms() - grace
        malformed = report.malformed
        intents = _of_deleted_children(ctx, [
            (parent, child, epoch) for child, parent, epoch
            in _old_entries(ctx, "outbox", cutoff, where, report)], report)
        cascade(ctx, intents)
        report.intents += len(intents)
        pending = _old_entries(ctx, "pending", cutoff, where, report)
        resolve_links(ctx, pending, report)
        ctx.flush()
        budget -= len(intents) + len(pending) + report.malformed - malformed
        if not intents and not pending and report.malformed == malformed:
            return report
        if budget <= 0 or time.monotonic() >= deadline:
            report.unfinished = True
            log.warning("the resolver stopped at its %s with entries left in namespace %s; "
                        "the next run goes on", "budget" if budget <= 0 else "time limit",
                        ctx.schema.namespace)
            return report


def _of_deleted_children(ctx: Context, intents: list[Intent],
                         report: ResolverReport) -> list[Intent]:
    """The unlink intents read from the outbox whose child no longer names the parent.
    A deleter writes an intent as it deletes the child, and a child that comes back links
    at a newer epoch, so an intent whose child lives and names its parent was written by
    no deleter (planted): running it would drop a live link's parent side (invariant S).
    Those are dropped from the outbox, counted as malformed and logged."""
    if not intents:
        return intents
    batch = ctx.batch()
    for _, child, _ in intents:
        batch.command("HGET", ctx.schema.node(child), "p")
    names = batch.execute()
    live = [intent for intent, p in zip(intents, names)
            if not isinstance(p, Exception) and parent_of(p) == intent[0]]
    if not live:
        return intents
    report.malformed += len(live)
    log.warning("dropping %d outbox entries of links that are live (their child names "
                "the parent; first: %s)", len(live), "|".join(live[0][1::-1]))
    clear_outbox(ctx, live)
    return [intent for intent in intents if intent not in live]


def trim_fences(ctx: Context, shards: Sequence[str]) -> int:
    """Drop fences past the link epoch horizon in the shards that hold any (a fence is
    only ever dropped lazily by a new one otherwise)."""
    counts = ctx.per_shard(lambda batch, shard: batch.command(
        "HGET", ctx.schema.shard_keys(shard).stats, "fences"), shards=shards)
    trimmed = [shard for shard, (fences,) in counts if to_int(fences) > 0]
    if not trimmed:
        return 0
    batch = ctx.batch()
    for shard in trimmed:
        ctx.shard_call("trim_fences", shard).queue(batch)
    results = batch.execute()
    raise_first_error(results)
    return sum(int(reply) for reply in results)


def _old_entries(ctx: Context, index: str, cutoff: int, shards: Sequence[str],
                 report: ResolverReport) -> list[Intent]:
    """Entries of the shards' pending or outbox sets older than cutoff. A member that is
    not "<hash>|<hash>|<epoch>", or sits in another shard's set than its first hash's (the
    parent of a pending link, the child of an unlink intent: where every step looks for
    it and clears it), cannot stand for a link: it is dropped from the key it was read
    from, counted and logged."""
    keys = {shard: getattr(ctx.schema.shard_keys(shard), index) for shard in shards}
    pages = ctx.per_shard(lambda batch, shard: batch.command(
        "ZRANGEBYSCORE", keys[shard], "-inf", cutoff, "LIMIT", 0, RESOLVER_PAGE),
        shards=shards)
    entries: list[Intent] = []
    for shard, (page,) in pages:
        key = keys[shard]
        if isinstance(page, Exception):  # a key of another type: fsck --repair drops it
            log.warning("cannot read %s (%s); skipping that shard", key, page)
            continue
        dropped = [member for member in page if not stands_for_a_link(ctx, member, shard)]
        entries += [(parts[0], parts[1], parts[2]) for parts in
                    (member.split("|") for member in page if member not in dropped)]
        if dropped:
            report.malformed += len(dropped)
            log.warning("dropping %d malformed or misplaced %s entries of %s (first: %r)",
                        len(dropped), index, key, dropped[0][:200])
            ctx.defer("ZREM", key, *dropped)
    return entries


def stands_for_a_link(ctx: Context, member: str, shard: str) -> bool:
    """Whether a pending or outbox member of the shard can be a link's entry: three parts,
    an epoch a script could write, its first hash (the owner) of this shard."""
    parts = member.split("|")
    return (len(parts) == 3 and all(parts) and parts[2].isascii() and parts[2].isdigit()
            and len(parts[2]) <= MAX_EPOCH_DIGITS
            and all(ctx.extractor.is_hash(h) or ctx.extractor.prefix(h) == h
                    for h in parts[:2])
            and ctx.shard(parts[0]) == shard)
