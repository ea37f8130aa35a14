"""Text views of nodes, objects and subtrees for the CLI, with the redis-cli commands
that show the same raw data."""

from __future__ import annotations

import datetime as dt
import shlex

from .index import Index
from .models import NodeInfo, ObjectInfo
from .prefix import shard_of

SHORT = 12


def short(prefix_hash: str) -> str:
    return prefix_hash if len(prefix_hash) <= SHORT else prefix_hash[:SHORT] + "…"


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def time_ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value == float("inf"):
        return "never (processing or hard-pinned)"
    moment = dt.datetime.fromtimestamp(value / 1000, dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def redis_cli(*words: str) -> str:
    return "redis-cli " + " ".join(shlex.quote(w) for w in words)


def describe_node(index: Index, node: NodeInfo) -> list[str]:
    keys = index.schema.node_keys(node.prefix_hash)
    leaves = index.schema.shard_keys(shard_of(node.prefix_hash)).leaves
    kind = "shell" if node.is_shell else "leaf" if node.is_leaf else "interior"
    lines = [
        f"node {node.prefix_hash} ({kind})",
        f"  parent      {node.parent or '(unknown: a root, or not registered yet)'}",
        f"  children    {len(node.children)}" + "".join(f"\n    {c}" for c in node.children[:20]),
        f"  keys        {len(node.keys)}" + "".join(f"\n    {k}" for k in node.keys[:20]),
        f"  bytes       {node.bytes} ({human_bytes(node.bytes)})",
        f"  processing  {node.processing}",
        f"  evictable   {time_ms(node.eviction_score) if node.is_leaf else 'no (not a leaf)'}",
        "  raw data:",
        "    " + redis_cli("HGETALL", keys.node),
        "    " + redis_cli("SMEMBERS", keys.children),
        "    " + redis_cli("ZRANGE", keys.keys, "0", "-1", "WITHSCORES"),
        "    " + redis_cli("ZSCORE", leaves, node.prefix_hash),
    ]
    return lines


def describe_object(index: Index, info: ObjectInfo) -> list[str]:
    return [
        f"object {info.key}",
        f"  state       {info.state}",
        f"  size        {info.size} ({human_bytes(info.size)})",
        f"  prefix      {info.prefix_hash}",
        f"  lease until {time_ms(info.lease_ms)}",
        f"  pins        soft={info.soft_pin} hard={info.hard_pin}",
        f"  created     {time_ms(info.created_ms)}",
        "  raw data:",
        "    " + redis_cli("HGETALL", index.schema.object_key(info.key, info.prefix_hash)),
    ]


def draw_tree(index: Index, root: str, max_depth: int, max_nodes: int) -> list[str]:
    """The subtree under root, one line per node, children indented (depth first)."""
    lines: list[str] = []
    stack: list[tuple[str, str, bool, int]] = [(root, "", True, 0)]
    seen: set[str] = set()
    while stack:
        prefix_hash, indent, last, depth = stack.pop()
        if len(lines) >= max_nodes:
            lines.append(f"{indent}… (stopped at {max_nodes} nodes; use --max-nodes)")
            break
        node = index.get_node(prefix_hash)
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        if node is None:
            lines.append(f"{indent}{branch}{short(prefix_hash)}  (no such node)")
            continue
        label = "shell" if node.is_shell else f"{len(node.keys)} keys, {human_bytes(node.bytes)}"
        if node.processing:
            label += f", {node.processing} processing"
        lines.append(f"{indent}{branch}{short(prefix_hash)}  {label}")
        seen.add(prefix_hash)
        children = [c for c in node.children if c not in seen]
        if depth == max_depth and children:
            lines.append(f"{indent}{'   ' if last else '│  '}… {len(children)} children below "
                         "(use --depth)")
            continue
        child_indent = indent if depth == 0 else indent + ("   " if last else "│  ")
        for position, child in reversed(list(enumerate(children))):
            stack.append((child, child_indent, position == len(children) - 1, depth + 1))
    return lines
