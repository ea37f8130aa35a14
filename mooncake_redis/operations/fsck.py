"""Checks every invariant of a namespace and repairs what can be repaired without losing data.

Without --repair it only reads. With it, keys that cannot be what their name says go
first (a node key or shard key holding another type, a node under another shard's tag:
no script can use them, and every script of their shard fails on a wrong type), then the
resolver runs with no grace period (every pending link and unfinished unlink is
settled), then each problem found is fixed by a script that re-reads what it fixes:
fields no script writes (an epoch that is no epoch, an object value no version wrote:
scrub, each only if unchanged), node counters and leaf index (repair_node), a
shard's stats (recount_shard, only if no write ran in the shard since it was read), a
parent that does not list its child (link: step 1 again at the child's epoch), links
that dangle (the resolver's own step), and cycles (broken as the resolver does). So it
may run on a live namespace; what a concurrent client changed is reported, not forced.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mooncake_redis.context import Context
from mooncake_redis.errors import MooncakeRedisError
from mooncake_redis.executor import Batch, score_pairs, tag_of
from mooncake_redis.keys import SHARD_KEY_NAMES
from mooncake_redis.prefix import SHARD_COUNTS, V4_LAYOUT, ShardLayout, shard_of
from mooncake_redis.tree.links import (
    Intent,
    ResolverReport,
    add_link,
    break_newest_on_cycles,
    pending_member,
    resolve,
    resolve_links,
    stands_for_a_link,
)
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.tree.rescoring import repair_nodes
from mooncake_redis.values import (
    NodeFields,
    child_field,
    decode_object,
    is_counter_text,
    is_epoch_text,
    object_value_damage,
    parent_of,
    replicas_as_scripts_count,
    split_node,
    to_int,
)

SHARDS_PER_STEP = 16
RECOUNT_TRIES = 3
TYPES_PER_BATCH = 1000
COUNTER_STATS = frozenset({"used_bytes", "objects", "nodes", "fences", "shells", "writes",
                           "links", "limit"})
"""The shard stats fields that are integers (with su:<segment>); `gen` is the borrowing
keeper's text stamp and `replid` the failover check's record (operations/failover.py)."""
SHARD_KEY_TYPES = {"leaves": "zset", "soft_leaves": "zset", "stats": "hash", "pending": "zset",
                   "fences": "zset", "outbox": "zset", "events": "stream"}


@dataclass
class FsckReport:
    """Problems found as (kind, detail); `counts` by kind; what was repaired."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    repaired: Counter[str] = field(default_factory=Counter)
    nodes: int = 0
    objects: int = 0
    shards: int = 0
    zombies: int = 0
    """Processing objects older than put_start_release_timeout (evictable, not a problem)."""
    resolver: ResolverReport = field(default_factory=ResolverReport)

    def add(self, kind: str, detail: str) -> None:
        self.problems.append((kind, detail))

    @property
    def counts(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.problems)

    @property
    def clean(self) -> bool:
        return not self.problems


@dataclass
class _Shard:
    name: str
    stats: dict[str, str]
    leaves: dict[str, float]
    soft_leaves: dict[str, float]
    pending: set[str]
    fences: int
    outbox: list[str]
    nodes: dict[str, NodeFields] = field(default_factory=dict)
    raw: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each node's fields as stored."""


def check(ctx: Context, repair: bool = False, shards: Sequence[str] | None = None,
          progress: Callable[[int], None] | None = None) -> FsckReport:
    """Check (and with repair=True, repair) the given shards (default: all). Links are
    checked from the nodes of those shards, cycles among them."""
    checker = _Checker(ctx, repair)
    todo = list(shards) if shards is not None else list(ctx.all_shards())
    ctx.reload_settings()
    for name, value in sorted(ctx.unreadable_settings.items()):
        # not repaired: the right value is not known here (an extractor may be one other
        # processes register); `config set` or `config reset` mends it
        checker.report.add("setting_unreadable",
                           f"{ctx.schema.settings} {name}={value[:80]!r} cannot be read; "
                           f"clients use the default: `config set {name}=VALUE` or "
                           f"`config reset {name}`")
    node_keys: dict[str, list[str]] = defaultdict(list)
    for page in scan_node_keys(ctx, any_layout=True):
        for key in page:
            node_keys[tag_of(key)].append(key)
    checker.drop_unusable_keys(todo, node_keys, every_shard=shards is None)
    if repair and checker.report.counts["node_of_another_layout"]:
        repair = checker.repair = False  # counters recounted under a wrong layout would be
        # wrong too: nothing more is repaired until the shard count is mended
        checker.report.add("repair_stopped",
                           "nodes sit as another shard layout places them: nothing else was "
                           "repaired; move or remove the nodes of the other layout, then run "
                           "again")
    if repair:
        checker.report.resolver = resolve(ctx, grace_ms=0, shards=todo)
    parents: dict[str, str | None] = {}
    for start in range(0, len(todo), SHARDS_PER_STEP):
        names = todo[start:start + SHARDS_PER_STEP]
        group = checker.read_shards(names, node_keys)
        for shard in group:
            checker.check_shard(shard)
            parents.update((h, n.parent) for h, n in shard.nodes.items())
        checker.check_links(group)
        if progress is not None:
            progress(len(group))
    checker.check_cycles(parents)
    ctx.flush()
    return checker.report


def check_links_of(ctx: Context, node_keys: Sequence[str], repair: bool = False) -> FsckReport:
    """Only the links of these nodes (both ends: the parent each names, the children each
    lists), checked and with repair=True mended as check() does, their shards' pending
    links read to know which are covered: a bounded step of a sweep over a namespace's
    node keys (operations/failover.py). Nothing else of their shards is read."""
    checker = _Checker(ctx, repair)
    by_tag: dict[str, list[str]] = defaultdict(list)
    for key in node_keys:
        by_tag[tag_of(key)].append(key)

    def queue(batch: Batch, tag: str) -> None:
        batch.command("ZRANGE", ctx.schema.shard_keys(tag).pending, 0, -1)
        for key in by_tag[tag]:
            batch.command("HGETALL", key)

    group = []
    for tag, (pending, *nodes) in ctx.per_shard(queue, shards=sorted(by_tag)):
        shard = _Shard(tag, {}, {}, {}, set(_or_empty(pending, [])), 0, [])
        for key, fields in zip(by_tag[tag], nodes):
            if _or_empty(fields, {}):
                shard.nodes[ctx.schema.hash_of_node_key(key)] = split_node(fields)
        group.append(shard)
    checker.check_links(group)
    ctx.flush()
    return checker.report


OTHER_LAYOUTS = (V4_LAYOUT, *(ShardLayout(count, 2) for count in SHARD_COUNTS))


def layout_placing(prefix_hash: str, tag: str) -> int | None:
    """The shard count of a layout (this release's, or one of 0.1's) under which a node of
    this hash lives under this tag, if any: a node another layout's writer left, which
    fsck keeps (the data, not the place, may be what someone wants)."""
    return next((layout.shard_count for layout in OTHER_LAYOUTS
                 if len(tag) == layout.tag_width
                 and shard_of(prefix_hash, layout.shard_count, layout.tag_width) == tag), None)


class _Checker:
    def __init__(self, ctx: Context, repair: bool):
        self.ctx = ctx
        self.repair = repair
        self.report = FsckReport()
        self.now = ctx.redis_time_ms()

    def drop_unusable_keys(self, todo: Sequence[str], node_keys: dict[str, list[str]],
                           every_shard: bool) -> None:
        """Node keys under another shard's tag (unreachable: a client looks for the node in
        its own shard) and node or shard keys of another type than the schema's are
        reported, and with repair deleted; either way they are left out of what follows."""
        wanted = set(todo)
        for tag in sorted(set(node_keys) - set(self.ctx.all_shards()) if every_shard else ()):
            wanted.add(tag)  # a tag no shard has: its keys are all misplaced
        expected: dict[str, str] = {}
        for tag in sorted(wanted & set(node_keys)):
            kept = []
            for key in node_keys[tag]:
                prefix_hash = self.ctx.schema.hash_of_node_key(key)
                if self.ctx.shard(prefix_hash) != tag:
                    other_layout = layout_placing(prefix_hash, tag)
                    if other_layout is None:
                        self.report.add("node_misplaced",
                                        f"{key}: node {prefix_hash} belongs in shard "
                                        f"{self.ctx.shard(prefix_hash)}; no client can reach "
                                        "it here")
                        self._delete(key)
                    else:  # the setting, not the node, may be what is wrong: keep the data
                        self.report.add(
                            "node_of_another_layout",
                            f"{key}: node {prefix_hash} sits where a namespace of "
                            f"{other_layout} shards keeps it, not in shard "
                            f"{self.ctx.shard(prefix_hash)} of this one's "
                            f"{self.ctx.schema.shard_count}: fsck does not delete such "
                            "nodes (a writer of another release or layout left them)")
                else:
                    kept.append(key)
                    expected[key] = "hash"
            node_keys[tag] = kept
        for shard in todo:
            keys = self.ctx.schema.shard_keys(shard)
            for name in SHARD_KEY_NAMES:
                expected[getattr(keys, name)] = SHARD_KEY_TYPES[name]
        wrong: set[str] = set()
        names = list(expected)
        for start in range(0, len(names), TYPES_PER_BATCH):
            batch = self.ctx.batch()
            page = names[start:start + TYPES_PER_BATCH]
            for key in page:
                batch.command("TYPE", key)
            for key, kind in zip(page, batch.execute()):
                if isinstance(kind, Exception):
                    raise kind
                if kind not in ("none", expected[key]):
                    self.report.add("key_type", f"{key} is a {kind}, not a {expected[key]}: "
                                                "every script of its shard fails on it")
                    self._delete(key)
                    wrong.add(key)
        for tag, tag_keys in node_keys.items():
            node_keys[tag] = [key for key in tag_keys if key not in wrong]

    def _delete(self, key: str) -> None:
        if self.repair:
            self._write("DEL", key)
            self.report.repaired["key"] += 1

    def _write(self, *command: object) -> None:
        batch = self.ctx.batch()
        batch.command(*command)
        (reply,) = batch.execute()
        if isinstance(reply, Exception):
            raise reply

    def read_shards(self, names: Sequence[str], node_keys: dict[str, list[str]]
                    ) -> list[_Shard]:
        """A group of shards, indexes and nodes, in one round trip (a shard key of another
        type, reported already, reads as empty)."""
        def queue(batch: Batch, name: str) -> None:
            keys = self.ctx.schema.shard_keys(name)
            batch.command("HGETALL", keys.stats)
            batch.command("ZRANGE", keys.leaves, 0, -1, "WITHSCORES")
            batch.command("ZRANGE", keys.soft_leaves, 0, -1, "WITHSCORES")
            batch.command("ZRANGE", keys.pending, 0, -1)
            batch.command("ZCARD", keys.fences)
            batch.command("ZRANGE", keys.outbox, 0, -1)
            for key in node_keys.get(name, []):
                batch.command("HGETALL", key)

        shards = []
        for name, replies in self.ctx.per_shard(queue, shards=names):
            empties: tuple[Any, ...] = ({}, [], [], [], 0, [])
            stats, leaves, soft, pending, fences, outbox = (
                _or_empty(reply, empty) for reply, empty in zip(replies, empties))
            shard = _Shard(name, stats, dict(score_pairs(leaves)),
                           dict(score_pairs(soft)), set(pending), int(fences), outbox)
            for key, reply in zip(node_keys.get(name, []), replies[len(empties):]):
                fields = _or_empty(reply, {})
                if fields:
                    prefix_hash = self.ctx.schema.hash_of_node_key(key)
                    shard.nodes[prefix_hash] = split_node(fields)
                    shard.raw[prefix_hash] = fields
            shards.append(shard)
        return shards

    def check_shard(self, shard: _Shard) -> None:
        report = self.report
        report.shards += 1
        report.nodes += len(shard.nodes)
        used = objects = 0
        broken = []
        on_segments: dict[str, int] = {}
        for prefix_hash, node in shard.nodes.items():
            if self._check_node(shard, prefix_hash, node):
                broken.append(prefix_hash)
            for value in node.objects.values():
                readable = replicas_as_scripts_count(value)
                if readable is not None:
                    size, segments = readable
                    used += size * max(1, len(segments))
                    objects += 1
                    for segment in segments:
                        on_segments[segment] = on_segments.get(segment, 0) + size
        report.objects += objects
        for index, members in (("pending", sorted(shard.pending)), ("outbox", shard.outbox)):
            for member in members:
                if not stands_for_a_link(self.ctx, member, shard.name):
                    report.add("link_entry", f"shard {shard.name} {index} entry "
                                             f"{member[:80]!r} can stand for no link (the "
                                             "resolver drops it)")
        stale_leaves = (set(shard.leaves) | set(shard.soft_leaves)) - set(shard.nodes)
        for gone in sorted(stale_leaves):
            report.add("leaf_index_stale", f"{gone} indexed as a leaf, no such node")
        counted = tuple(to_int(shard.stats.get(name))
                        for name in ("used_bytes", "objects", "nodes", "fences", "shells"))
        shells = sum(1 for node in shard.nodes.values() if node.children and not node.objects)
        actual = (used, objects, len(shard.nodes), shard.fences, shells)
        segment_counts = {f[3:]: to_int(v) for f, v in shard.stats.items()
                          if f.startswith("su:") and to_int(v)}
        on_segments = {name: size for name, size in on_segments.items() if size}
        junk = {f: v for f, v in shard.stats.items()
                if (f in COUNTER_STATS or f.startswith("su:")) and not is_counter_text(v)}
        if junk:
            report.add("shard_stats", f"shard {shard.name} stats that are no integers "
                                      f"{dict(sorted(junk.items()))}")
        stats_wrong = counted != actual or segment_counts != on_segments or bool(junk)
        if segment_counts != on_segments:
            report.add("shard_stats", f"shard {shard.name} bytes per segment {segment_counts} "
                                      f"!= {on_segments}")
        if counted != actual:
            report.add("shard_stats", f"shard {shard.name} (used_bytes, objects, nodes, fences, "
                                      "shells) "
                                      f"{counted} != {actual}")
        if self.repair:
            self._repair_nodes(shard.name, broken)
            if stats_wrong or stale_leaves:
                self._recount(shard)

    def _check_node(self, shard: _Shard, prefix_hash: str, node: NodeFields) -> bool:
        """A node's own invariants; True if any is broken."""
        report, before = self.report, len(self.report.problems)
        self._scrub(shard, prefix_hash, node)
        release = self.ctx.settings.put_start_release_timeout_ms
        expected = Counter[str]()
        latest_lease = 0
        processing_starts = []
        for suffix, value in node.objects.items():
            stored = decode_object(value)
            if stored is None or object_value_damage(value) == "damaged":
                if stored is None and object_value_damage(value) == "newer":
                    report.add("object_format", f"{prefix_hash}{suffix}: value {value!r} "
                                                "of a newer format: left alone")
                continue
            expected["no"] += 1
            expected["b"] += stored.charged
            expected["ns"] += stored.pins & 1
            expected["nh"] += stored.pins >> 1
            if stored.complete:
                latest_lease = max(latest_lease, stored.time_ms)
            else:
                expected["np"] += 1
                processing_starts.append(stored.time_ms)
                if stored.time_ms + release <= self.now:
                    self.report.zombies += 1
        expected["nc"] = len(node.children)
        expected["lm"] = latest_lease
        if processing_starts:
            expected["ps"] = max(processing_starts)
            expected["psn"] = processing_starts.count(expected["ps"])
        for name in ("nc", "no", "np", "ps", "psn", "nh", "ns", "b", "lm"):
            if node.counter(name) != expected[name]:
                report.add("node_counter", f"{prefix_hash} {name}={node.counter(name)} != "
                                           f"{expected[name]}")
        if not expected["no"] and not expected["nc"]:
            report.add("empty_node", f"{prefix_hash} has no objects and no children")
        want: tuple[float | None, float | None] = (None, None)
        if expected["no"] and not expected["nc"]:
            score = math.inf if expected["nh"] else float(max(
                latest_lease, max(processing_starts, default=0) + release
                if processing_starts else 0))
            want = (None, score) if expected["ns"] else (score, None)
        have = (shard.leaves.get(prefix_hash), shard.soft_leaves.get(prefix_hash))
        if have != want:
            report.add("leaf_index", f"{prefix_hash}: (leaves, soft_leaves) {have} != {want}")
        return len(report.problems) > before

    def _scrub(self, shard: _Shard, prefix_hash: str, node: NodeFields) -> None:
        """Fields of the node that no script writes: reported; with repair dropped (each
        only if unchanged) and taken out of this view of the node, so the checks after
        this see it as it now is (counters off, a link to mend)."""
        raw = shard.raw[prefix_hash]
        bad: dict[str, str] = {}
        if "pe" in raw and not is_epoch_text(raw["pe"]):
            bad["pe"] = raw["pe"]
        for child in node.children:
            name = child_field(child)
            if not is_epoch_text(raw[name]):
                bad[name] = raw[name]
        for kind, detail in (("epoch_format", f"{prefix_hash} {name}={value[:40]!r} is no "
                                              "link epoch") for name, value in bad.items()):
            self.report.add(kind, detail)
        for suffix, value in node.objects.items():
            if object_value_damage(value) == "damaged":
                self.report.add("object_value", f"{prefix_hash}{suffix}: value "
                                                f"{value[:60]!r} no version writes")
                bad["o:" + suffix] = value
        if not bad or not self.repair:
            return
        self._drop_fields(prefix_hash, bad)
        for name in bad:
            node.attributes.pop(name, None)
            node.objects.pop(name[2:], None) if name.startswith("o:") else None
        for child in [c for c in node.children if child_field(c) in bad]:
            del node.children[child]

    def _drop_fields(self, prefix_hash: str, fields: dict[str, str]) -> None:
        """Drop the node's fields that still hold these values (lua/scrub.lua)."""
        call = self.ctx.shard_call("scrub", self.ctx.shard(prefix_hash), prefix_hash)
        for name, value in fields.items():
            call.add(name, value)
        batch = self.ctx.batch()
        call.queue(batch)
        (reply,) = batch.execute()
        if isinstance(reply, Exception):
            raise reply
        self.report.repaired["field"] += int(reply)

    def check_links(self, group: list[_Shard]) -> None:
        """Invariant S (a node's parent exists and lists it), its converse (a listed child
        exists and names the node), and that a link's two epochs agree (else a later
        deletion would leave the parent's field behind), unless a pending entry covers it."""
        nodes = {h: n for shard in group for h, n in shard.nodes.items()}
        pending = set().union(*(shard.pending for shard in group))
        up = [(h, n.parent) for h, n in nodes.items() if n.parent]
        down = [(c, h, e) for h, n in nodes.items() for c, e in sorted(n.children.items())]
        batch = self.ctx.batch()
        for child, parent in up:
            batch.command("HGET", self.ctx.schema.node(parent), child_field(child))
        for child, _, _ in down:
            batch.command("HMGET", self.ctx.schema.node(child), "p", "pe")
        replies = [_or_empty(reply, None) for reply in batch.execute()]
        relink: list[tuple[str, str, int]] = []
        settle: list[Intent] = []
        for (child, parent), listed in zip(up, replies[:len(up)]):
            if listed is None:
                self.report.add("parent_does_not_list_child",
                                f"{child} names parent {parent}, which does not list it")
                relink.append((child, parent, nodes[child].counter("pe")))
        for (child, parent, epoch), reply in zip(down, replies[len(up):]):
            named_field, child_epoch = reply or (None, None)
            if self.repair and child_epoch is not None and not is_epoch_text(child_epoch):
                # a child of a later group: its pe goes now, so the keep below can set it
                self._drop_fields(child, {"pe": child_epoch})
                child_epoch = None
            named = parent_of(named_field)
            covered = pending_member(parent, child, epoch) in pending
            if named != parent:
                if not covered:
                    self.report.add("dangling_child", f"{parent} lists {child}, which "
                                    f"{'is absent' if named is None else 'names ' + named}")
                    settle.append((parent, child, str(epoch)))
            elif to_int(child_epoch) != epoch and not covered:
                self.report.add("link_epoch", f"{parent} lists {child} at epoch {epoch}, the "
                                              f"child names it at {child_epoch}")
                if to_int(child_epoch) > epoch:  # the parent's end lags: raise it
                    relink.append((child, parent, to_int(child_epoch)))
                else:  # the child's end lags: the resolver's keep raises it
                    settle.append((parent, child, str(epoch)))
        if self.repair:
            self._repair_links(relink, settle)

    def check_cycles(self, parents: dict[str, str | None]) -> None:
        on_cycle: dict[str, str] = {}
        state: dict[str, int] = {}
        for start in parents:
            path = []
            cursor: str | None = start
            while cursor is not None and cursor in parents and cursor not in state:
                state[cursor] = 1
                path.append(cursor)
                cursor = parents[cursor]
            if cursor is not None and state.get(cursor) == 1:
                self.report.add("cycle", f"cycle through {cursor}")
                on_cycle[cursor] = parents[cursor]  # type: ignore[assignment]
            for node in path:
                state[node] = 2
        if self.repair and on_cycle:  # each loses one link, its newest, as in the resolver
            batch = self.ctx.batch()
            for child in on_cycle:
                batch.command("HGET", self.ctx.schema.node(child), "pe")
            epochs = batch.execute()
            links = {child: (parent, epoch or "0")
                     for (child, parent), epoch in zip(on_cycle.items(), epochs)}
            resolver = self.report.resolver
            before = resolver.cycles_broken
            break_newest_on_cycles(self.ctx, links, resolver)
            self.report.repaired["cycle"] += resolver.cycles_broken - before

    # -- repairs -------------------------------------------------------------------------

    def _repair_nodes(self, shard: str, broken: list[str]) -> None:
        self.report.repaired["node"] += repair_nodes(self.ctx, {shard: broken})

    def _recount(self, shard: _Shard) -> None:
        """Set the shard's stats from its nodes: the write counter first, then the shard's
        node keys (a SCAN for this one shard), then the script, which gives up if any write
        ran since the counter was read; a few tries on a busy shard."""
        for _ in range(RECOUNT_TRIES):
            writes = self.ctx.read("HGET", self.ctx.schema.shard_keys(shard.name).stats,
                                   "writes") or "0"
            node_keys = [key for page in scan_node_keys(self.ctx, shard.name) for key in page]
            call = self.ctx.shard_call("recount_shard", shard.name, str(writes))
            for key in sorted(node_keys):
                call.add(self.ctx.schema.hash_of_node_key(key))
            batch = self.ctx.batch()
            call.queue(batch)
            (reply,) = batch.execute()
            if isinstance(reply, MooncakeRedisError):
                raise reply
            if reply[0] == "recounted":
                self.report.repaired["shard_stats"] += 1
                return
        self.report.add("shard_busy", f"shard {shard.name} kept changing while fsck read it; "
                                      "its stats were not recounted: run fsck again")

    def _repair_links(self, relink: list[tuple[str, str, int]], settle: list[Intent]) -> None:
        if relink:
            links = self.ctx.calls("link", "fsck")
            for child, parent, epoch in relink:
                add_link(links, self.ctx, parent, child, epoch)
            batch = self.ctx.batch()
            links.queue(batch)
            for reply in batch.execute():
                if isinstance(reply, MooncakeRedisError):
                    raise reply
            self.report.repaired["link"] += len(relink)
            # the pending entries the link step wrote are settled (kept) right away
            resolve_links(self.ctx, [(p, c, str(e)) for c, p, e in relink],
                          self.report.resolver)
        if settle:
            resolve_links(self.ctx, settle, self.report.resolver)
            self.report.repaired["dangling_link"] += len(settle)


def _or_empty(reply: Any, empty: Any) -> Any:
    """A reply, or `empty` for a refused read (a key of another type: reported already)."""
    return empty if isinstance(reply, Exception) else reply
