"""Text views of nodes, objects and subtrees for the CLI, with the redis-cli commands that
show the same raw data."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mooncake_redis.index import Index
from mooncake_redis.models import NodeInfo, ObjectInfo
from mooncake_redis.text import human_bytes, plural
from mooncake_redis.tree.links import ResolverReport
from mooncake_redis.urls import RedisCli

SHORT = 12
LISTED = 20
"""Children or keys listed by name in a node's view; the rest are counted."""

NODE_FIELDS_LEGEND = [
    "  fields: p parent, pe its link epoch, <child hash> -> link epoch, o:<key suffix> -> "
    "object 1<state p|c>,<size>,<start|lease end ms>,<pins>,<writer>;",
    "          counters nc children, no objects, np processing, b bytes, ns/nh soft/hard "
    "pins, lm latest lease end, ps/psn latest start (values.py)",
]


def short(prefix_hash: str) -> str:
    return prefix_hash if len(prefix_hash) <= SHORT else prefix_hash[:SHORT] + "…"




def resolver_summary(resolver: ResolverReport) -> str:
    """One line of what a resolver run settled (eviction and fsck print it)."""
    line = (f"{plural(resolver.intents, 'unlink')} finished, pending links {resolver.kept} "
            f"kept / {resolver.dropped} dropped, {plural(resolver.cycles_broken, 'cycle')} "
            "broken")
    if resolver.malformed:
        entries = plural(resolver.malformed, "malformed or misplaced entry",
                         "malformed or misplaced entries")
        line += f", {entries} dropped"
    if resolver.unfinished:
        line += " (stopped at its limit: the next run goes on)"
    return line




def time_ms(value: float | None, now_ms: int | None = None) -> str:
    """A Redis time in ms as UTC, with how far it is from now when now is known."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    moment = dt.datetime.fromtimestamp(value / 1000, dt.timezone.utc)
    text = moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    if now_ms is None:
        return text
    delta = (value - now_ms) / 1000
    return f"{text} ({'in ' if delta > 0 else ''}{abs(delta):.1f} s{' ago' if delta <= 0 else ''})"


class Views:
    """Renders what one index holds; reads only."""

    def __init__(self, index: Index):
        self.index = index
        self.schema = index.schema
        self.cli = RedisCli.for_url(index.url) if index.url else None

    def raw_commands(self, commands: Sequence[Sequence[str]], show_replies: bool = False
                     ) -> list[str]:
        """The redis-cli commands that show raw data; on memory:// (no redis-cli can reach
        it) the replies, read in this process, with the commands as a reference."""
        note = [f"    {self.cli.password_note}"] if self.cli and self.cli.needs_password else []
        if self.cli is not None and not show_replies:
            return ["  raw data:", *("    " + self.cli.command(*words) for words in commands),
                    *note]
        lines = ["  raw data" + (" (in-process memory:// store: redis-cli cannot reach it; "
                                  "read here)" if self.cli is None else "") + ":"]
        for words in commands:
            command = self.cli.command(*words) if self.cli else " ".join(words)
            lines.append(f"    {command}")
            reply = self.index.client.execute_command(*words)
            lines += ["      " + line for line in _reply_lines(reply)]
        return lines + note

    def node(self, node: NodeInfo, now_ms: int, show_replies: bool = False) -> list[str]:
        shard = self.schema.shard_keys(self.schema.shard(node.prefix_hash))
        kind = "shell" if node.is_shell else "leaf" if node.is_leaf else "interior"
        parent = node.parent or "(none: a root, or not registered yet)"
        if node.parent and node.parent_epoch is not None:
            parent += f" (link epoch {node.parent_epoch})"
        leaf_index = shard.soft_leaves if node.soft_pins else shard.leaves
        lines = [
            f"node {node.prefix_hash} ({kind}, shard {self.schema.shard(node.prefix_hash)})",
            f"  parent      {parent}",
            f"  children    {plural(len(node.children), 'child', 'children')}",
            *_listed(node.children),
            f"  keys        {plural(len(node.keys), 'key')}",
            *_listed(node.keys),
            f"  bytes       {node.bytes} ({human_bytes(node.bytes)})",
            f"  processing  {node.processing}",
            f"  pins        {plural(node.soft_pins, 'soft pin')}, "
            f"{plural(node.hard_pins, 'hard pin')}",
            f"  eviction    {_eviction(node, now_ms, leaf_index.rsplit(':', 1)[1])}",
        ]
        return lines + self.raw_commands(
            [("HGETALL", self.schema.node(node.prefix_hash)),
             ("ZSCORE", leaf_index, node.prefix_hash)], show_replies) + NODE_FIELDS_LEGEND

    def object(self, info: ObjectInfo, now_ms: int, release_ms: int) -> list[str]:
        suffix = info.key[len(info.prefix_hash):]
        if info.state == "processing" and info.started_ms is not None:
            state = f"processing since {time_ms(info.started_ms, now_ms)}"
            if info.started_ms + release_ms <= now_ms:
                state += "; past put_start_release_timeout: evictable"
            lease = "-"
        else:
            state, lease = info.state, time_ms(info.lease_ms, now_ms)
        return [
            f"object {info.key}",
            f"  node        {info.prefix_hash} (field o:{suffix})",
            f"  state       {state}",
            f"  size        {info.size} ({human_bytes(info.size)})",
            f"  lease until {lease}",
            f"  pins        soft {'yes' if info.soft_pin else 'no'}, "
            f"hard {'yes' if info.hard_pin else 'no'}",
            f"  writer      token {info.token}",
            *self.raw_commands([("HGET", self.schema.node(info.prefix_hash), f"o:{suffix}")]),
        ]

    def walk(self, root: str, max_depth: int, max_nodes: int
             ) -> tuple[list[Step], tuple[bool, ...] | None]:
        """The subtree under root, depth first (children in hash order), at most max_nodes
        nodes and max_depth levels; and, if max_nodes stopped the walk, where (the `lasts`
        of the first node left out)."""
        steps: list[Step] = []
        stack: list[tuple[str, str | None, tuple[bool, ...]]] = [(root, None, ())]
        seen: set[str] = set()
        while stack:
            prefix_hash, parent, lasts = stack.pop()
            if len(steps) >= max_nodes:
                return steps, lasts
            node = self.index.get_node(prefix_hash)
            step = Step(prefix_hash, parent, node, lasts)
            steps.append(step)
            if node is None or (parent is not None and node.parent != parent):
                continue
            seen.add(prefix_hash)
            children = [c for c in node.children if c not in seen]
            if len(lasts) == max_depth:
                step.hidden = len(children)
                continue
            for position, child in reversed(list(enumerate(children))):
                stack.append((child, prefix_hash, (*lasts, position == len(children) - 1)))
        return steps, None

    def tree(self, root: str, max_depth: int, max_nodes: int) -> list[str]:
        """The subtree under root, one line per node, children indented (depth first)."""
        steps, stopped = self.walk(root, max_depth, max_nodes)
        lines: list[str] = []
        for step in steps:
            branch = "" if not step.lasts else ("└─ " if step.lasts[-1] else "├─ ")
            lines.append(f"{_indent(step.lasts[:-1])}{branch}{short(step.prefix_hash)}  "
                         f"{_tree_label(step.node, step.parent)}")
            if step.hidden:
                lines.append(f"{_indent(step.lasts)}… "
                             f"{plural(step.hidden, 'child', 'children')} below (use --depth)")
        if stopped is not None:
            lines.append(f"{_indent(stopped[:-1])}… (stopped at {plural(max_nodes, 'node')}; "
                         "use --max-nodes)")
        return lines


@dataclass
class Step:
    """One node of a walked subtree: its parent in the walk, the node (None: a dangling
    link), whether it and each ancestor below the root is its parent's last child, and
    how many children the depth limit hid."""

    prefix_hash: str
    parent: str | None
    node: NodeInfo | None
    lasts: tuple[bool, ...]
    hidden: int = 0

    @property
    def depth(self) -> int:
        return len(self.lasts)


def _indent(lasts: tuple[bool, ...]) -> str:
    return "".join("   " if last else "│  " for last in lasts)


def _listed(names: list[str]) -> list[str]:
    lines = [f"    {name}" for name in names[:LISTED]]
    if len(names) > LISTED:
        lines.append(f"    … and {len(names) - LISTED} more")
    return lines


def _eviction(node: NodeInfo, now_ms: int, leaf_index: str) -> str:
    if node.eviction_score is None:
        return "not a leaf (it has children)" if node.children else "not indexed as a leaf"
    if math.isinf(node.eviction_score):
        return f"never (a hard-pinned leaf, in {leaf_index})"
    return f"a leaf in {leaf_index}, evictable from {time_ms(node.eviction_score, now_ms)}"


def _tree_label(node: NodeInfo | None, parent: str | None) -> str:
    if node is None:
        return "(listed, but no such node: a dangling link the resolver removes)"
    if parent is not None and node.parent != parent:
        return f"(listed here, but its parent is {short(node.parent or 'unknown')})"
    label = "shell" if node.is_shell else \
        f"{plural(len(node.keys), 'key')}, {human_bytes(node.bytes)}"
    if node.processing:
        label += f", {node.processing} processing"
    if node.hard_pins or node.soft_pins:
        label += ", " + ("hard-pinned" if node.hard_pins else "soft-pinned")
    return label


def _reply_lines(reply: object) -> list[str]:
    if reply is None:
        return ["(nil)"]
    if isinstance(reply, dict):
        return [f"{field} = {value}" for field, value in reply.items()] or ["(empty)"]
    if isinstance(reply, float):
        return [f"{reply:.17g}"]
    if isinstance(reply, (list, tuple)):
        return [str(item) for item in reply] or ["(empty)"]
    return [str(reply)]
