"""Checks every invariant of a namespace and repairs what can be repaired without losing data.

It works a group of shards at a time (a few round trips per group, work bounded by the
group's size), so it can run on a live namespace: every repair is a script that re-reads
what it fixes and gives up ("changed") if a client changed it meanwhile, and a problem
seen while a client was half-way through a two-step operation (a link before its write)
is transient; run again to see whether it stays.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .batch import score_pairs
from .errors import MooncakeRedisError
from .index import Index
from .prefix import all_shards
from .tree_links import Link

INF = math.inf
SHARDS_PER_STEP = 16


@dataclass
class FsckReport:
    """Problems found as (kind, detail); `counts` by kind; what was repaired."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    repaired: Counter[str] = field(default_factory=Counter)
    nodes: int = 0
    objects: int = 0
    shards: int = 0

    def add(self, kind: str, detail: str) -> None:
        self.problems.append((kind, detail))

    @property
    def counts(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.problems)

    @property
    def clean(self) -> bool:
        return not self.problems


@dataclass
class _Node:
    fields: dict[str, str]
    children: set[str]
    keys: dict[str, float]


@dataclass
class _Shard:
    name: str
    objects: dict[str, float]
    leaves: dict[str, float]
    soft_leaves: dict[str, float]
    stats: dict[str, str]
    node_hashes: set[str]
    nodes: dict[str, _Node] = field(default_factory=dict)
    infos: dict[str, dict[str, str]] = field(default_factory=dict)


def check(index: Index, repair: bool = False, shards: Sequence[str] | None = None,
          progress: Callable[[int], None] | None = None) -> FsckReport:
    """Check (and with repair=True, repair) the given shards (default: all). Cross-shard
    invariants are checked for the nodes of those shards; the usage counter and cycles
    only in a full run."""
    checker = _Checker(index, repair)
    todo = list(shards) if shards is not None else all_shards()
    parents: dict[str, str | None] = {}
    for start in range(0, len(todo), SHARDS_PER_STEP):
        group = [checker.read_shard(s) for s in todo[start:start + SHARDS_PER_STEP]]
        checker.read_members(group)
        for shard in group:
            checker.check_shard(shard)
            parents.update((h, n.fields.get("parent")) for h, n in shard.nodes.items())
        checker.check_links(group)
        if progress is not None:
            progress(len(group))
    if shards is None:
        checker.check_usage()
        _check_cycles(checker.report, parents)
    return checker.report


class _Checker:
    def __init__(self, index: Index, repair: bool):
        self.index = index
        self.schema = index.schema
        self.client = index.client
        self.repair = repair
        self.report = FsckReport()
        self.shard_used = 0

    def _run(self, queue: Callable[[Any], Any]) -> list[Any]:
        batch = self.index.batch()
        queue(batch)
        return batch.execute()

    def read_shard(self, name: str) -> _Shard:
        keys = self.schema.shard_keys(name)
        objects, leaves, soft, stats, nodes = self._run(lambda b: (
            b.command("ZRANGE", keys.objects, 0, -1, "WITHSCORES"),
            b.command("ZRANGE", keys.leaves, 0, -1, "WITHSCORES"),
            b.command("ZRANGE", keys.soft_leaves, 0, -1, "WITHSCORES"),
            b.command("HGETALL", keys.stats),
            b.command("SMEMBERS", keys.nodes)))
        return _Shard(name, dict(score_pairs(objects)), dict(score_pairs(leaves)),
                      dict(score_pairs(soft)), stats, set(nodes))

    def read_members(self, group: list[_Shard]) -> None:
        """Every object and node of the group, in one round trip."""
        batch = self.index.batch()
        for shard in group:
            for key in shard.objects:
                batch.command("HGETALL", self.schema.object_key(key, self.index.prefix_of(key)))
            for prefix_hash in shard.node_hashes:
                node = self.schema.node_keys(prefix_hash)
                batch.command("HGETALL", node.node)
                batch.command("SMEMBERS", node.children)
                batch.command("ZRANGE", node.keys, 0, -1, "WITHSCORES")
        results = iter(batch.execute())
        for shard in group:
            shard.infos = {key: next(results) for key in shard.objects}
            for prefix_hash in shard.node_hashes:
                fields, children, keys = next(results), next(results), next(results)
                shard.nodes[prefix_hash] = _Node(fields, set(children), dict(score_pairs(keys)))

    def check_shard(self, shard: _Shard) -> None:
        report = self.report
        report.shards += 1
        report.objects += len(shard.objects)
        report.nodes += len(shard.node_hashes)
        broken_nodes: set[str] = set()
        index_broken = False
        used = 0
        for key, score in shard.objects.items():
            info = shard.infos[key]
            if not info:
                report.add("object_index_stale", f"{key} indexed in shard {shard.name}, no object")
                index_broken = True
                continue
            used += int(info["size"])
            if score != _score(info):
                report.add("object_score", f"{key}: {score} != {_score(info)}")
                index_broken = True
            if self.index.config.enable_radix_tree:
                node = shard.nodes.get(info["prefix"])
                if node is None or key not in node.keys:
                    report.add("object_unregistered", f"{key} not under node {info['prefix']}")
                    broken_nodes.add(info["prefix"])
        self.shard_used += used
        stats = (int(shard.stats.get("used_bytes", 0)), int(shard.stats.get("objects", 0)))
        if stats != (used, sum(1 for i in shard.infos.values() if i)):
            report.add("shard_stats", f"shard {shard.name} (used_bytes, objects) {stats}")
            index_broken = True
        for prefix_hash, node in shard.nodes.items():
            if self._check_node(shard, prefix_hash, node):
                broken_nodes.add(prefix_hash)
        for leaf in (set(shard.leaves) | set(shard.soft_leaves)) - set(shard.nodes):
            report.add("leaf_index_stale", f"{leaf} in a leaf index of shard {shard.name}")
            broken_nodes.add(leaf)
        if self.repair:
            self._repair_shard(shard, index_broken, broken_nodes)

    def _check_node(self, shard: _Shard, prefix_hash: str, node: _Node) -> bool:
        """Local invariants of one node; True if any is broken."""
        report, before = self.report, len(self.report.problems)
        if not node.fields:
            report.add("node_index_stale", f"{prefix_hash} listed in shard {shard.name}, no node")
            return True
        if not node.keys and not node.children:
            report.add("empty_node", f"{prefix_hash} has no keys and no children")
        present = {}
        for key, score in node.keys.items():
            info = shard.infos.get(key) or {}
            if not info:
                report.add("registered_key_missing", f"{key} under {prefix_hash}")
            elif info["prefix"] != prefix_hash:
                report.add("registered_key_wrong_node", f"{key} under {prefix_hash}")
            else:
                present[key] = info
                if score != _score(info):
                    report.add("registered_key_score", f"{key}: {score} != {_score(info)}")
        counters = {"key_count": len(node.keys),
                    "bytes": sum(int(i["size"]) for i in present.values()),
                    "processing": sum(1 for i in present.values() if i["state"] != "complete"),
                    "soft_pins": sum(1 for i in present.values() if i["soft_pin"] == "1")}
        for name, expected in counters.items():
            if int(node.fields.get(name, 0)) != expected:
                report.add("node_counter", f"{prefix_hash} {name}={node.fields.get(name)} "
                                           f"!= {expected}")
        in_leaves = shard.leaves.get(prefix_hash), shard.soft_leaves.get(prefix_hash)
        expected_leaf: tuple[float | None, float | None] = (None, None)
        if present and not node.children:
            score = max(_score(i) for i in present.values())
            expected_leaf = (None, score) if counters["soft_pins"] else (score, None)
        if in_leaves != expected_leaf:
            report.add("leaf_index", f"{prefix_hash}: (leaves, soft_leaves) {in_leaves} "
                                     f"!= {expected_leaf}")
        return len(report.problems) > before

    def check_links(self, group: list[_Shard]) -> None:
        """Each node's parent exists and lists it; each listed child exists under it."""
        nodes = {h: n for shard in group for h, n in shard.nodes.items() if n.fields}
        up = [(h, n.fields["parent"]) for h, n in nodes.items() if n.fields.get("parent")]
        down = [(c, h) for h, n in nodes.items() for c in sorted(n.children)]
        batch = self.index.batch()
        for child, parent in up:
            keys = self.schema.node_keys(parent)
            batch.command("EXISTS", keys.node)
            batch.command("SISMEMBER", keys.children, child)
        for child, _ in down:
            batch.command("HMGET", self.schema.node_keys(child).node, "parent", "created_ms")
        results = batch.execute()
        relink: list[Link] = []
        unlink: list[Link] = []
        for (child, parent), exists, listed in zip(up, results[0:2 * len(up):2],
                                                   results[1:2 * len(up):2]):
            if not int(exists):
                self.report.add("parent_missing", f"{child} names parent {parent}, absent")
                relink.append((child, parent))
            elif not int(listed):
                self.report.add("parent_does_not_list_child", f"{parent} lacks child {child}")
                relink.append((child, parent))
        for (child, parent), (child_parent, created) in zip(down, results[2 * len(up):]):
            if created is None:
                self.report.add("dangling_child", f"{parent} lists {child}, which is absent")
                unlink.append((child, parent))
            elif child_parent not in (None, parent):
                self.report.add("child_of_other_parent",
                                f"{parent} lists {child} of {child_parent}")
                unlink.append((child, parent))
        if self.repair:
            self._repair_links(relink, unlink)

    def check_usage(self) -> None:
        seen = self.client.get(self.schema.usage)
        if int(seen or 0) == self.shard_used:
            return
        self.report.add("usage_counter", f"{self.schema.usage}={seen} != sum of sizes "
                                         f"{self.shard_used}")
        if self.repair:
            (done,) = self._run(lambda b: self.index.scripts.set_usage(b, seen, self.shard_used))
            if int(done):
                self.report.repaired["usage_counter"] += 1

    # -- repairs -------------------------------------------------------------------------

    def _repair_shard(self, shard: _Shard, index_broken: bool, broken_nodes: set[str]) -> None:
        scripts = self.index.scripts
        if index_broken:
            pairs = [(key, self.index.prefix_of(key)) for key in shard.objects]
            (result,) = self._run(lambda b: scripts.recount_shard(b, shard.name, pairs))
            if not isinstance(result, MooncakeRedisError) and result[0] == "recounted":
                self.report.repaired["shard_index"] += 1
        unregistered = [(key, info["prefix"]) for key, info in shard.infos.items()
                        if info and info["prefix"] in broken_nodes
                        and key not in shard.nodes.get(info["prefix"], _Node({}, set(), {})).keys]
        if unregistered and self.index.config.enable_radix_tree:
            for key, prefix_hash in unregistered:
                self.index.register_radix_tree_node(prefix_hash, None, [key])
            self.report.repaired["object_unregistered"] += len(unregistered)
        emptied: list[Link] = []
        for prefix_hash in sorted(broken_nodes):
            registered = self.client.zrange(self.schema.node_keys(prefix_hash).keys, 0, -1)
            (result,) = self._run(
                lambda b: scripts.recompute_node(b, prefix_hash, registered))  # noqa: B023
            if isinstance(result, MooncakeRedisError) or result[0] == "changed":
                continue
            self.report.repaired["node"] += 1
            if result[0] == "deleted" and result[1]:
                emptied.append((prefix_hash, result[1]))
        self.index.links.cascade(emptied)

    def _repair_links(self, relink: Iterable[Link], unlink: Iterable[Link]) -> None:
        relink, unlink = list(relink), list(unlink)
        batch = self.index.batch()
        self.index.links.queue_links(batch, relink)
        batch.execute()
        self.report.repaired["link"] += len(relink)
        if unlink:
            # unlink_child drops the reference and settles the parent (deleting it if empty,
            # then cascading) exactly as a deletion would.
            self.index.links.cascade(unlink)
            self.report.repaired["dangling_child"] += len(unlink)


def _score(info: dict[str, str]) -> float:
    if info["state"] != "complete" or info["hard_pin"] == "1":
        return INF
    return float(info["lease_ms"])


def _check_cycles(report: FsckReport, parents: dict[str, str | None]) -> None:
    state: dict[str, int] = {}
    for start in parents:
        path = []
        cursor: str | None = start
        while cursor is not None and cursor in parents and cursor not in state:
            state[cursor] = 1
            path.append(cursor)
            cursor = parents[cursor]
        if cursor is not None and state.get(cursor) == 1:
            report.add("cycle", f"cycle through {cursor}")
        for node in path:
            state[node] = 2

