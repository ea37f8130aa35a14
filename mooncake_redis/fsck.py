"""Checks every invariant of a namespace's tree and object store (read-only)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .index import Index
from .prefix import all_shards

INF = math.inf


@dataclass
class FsckReport:
    """Problems found, each as (kind, detail); `counts` says how many of each kind."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    nodes: int = 0
    objects: int = 0

    def add(self, kind: str, detail: str) -> None:
        self.problems.append((kind, detail))

    @property
    def counts(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.problems)

    @property
    def clean(self) -> bool:
        return not self.problems


def check(index: Index) -> FsckReport:
    """Walk every shard and compare the tree, the leaf index, the counters and the object
    store against each other. Meant for tests and `mooncake-redis fsck`."""
    report = FsckReport()
    client, schema = index.client, index.schema
    node_hashes: dict[str, list[str]] = defaultdict(list)
    for key in client.scan_iter(match=f"{schema.namespace}:{{*}}:node:*", count=1000):
        shard = key[len(schema.namespace) + 2:len(schema.namespace) + 4]
        node_hashes[shard].append(key.split(":node:", 1)[1])

    parents: dict[str, str | None] = {}
    children_of: dict[str, set[str]] = {}
    total_bytes = 0
    for shard in all_shards():
        shard_keys = schema.shard_keys(shard)
        objects = dict(client.zrange(shard_keys.objects, 0, -1, withscores=True))
        plain_leaves = dict(client.zrange(shard_keys.leaves, 0, -1, withscores=True))
        soft_leaves = dict(client.zrange(shard_keys.soft_leaves, 0, -1, withscores=True))
        for both in set(plain_leaves) & set(soft_leaves):
            report.add("leaf_index_twice", f"{both} in leaves and soft_leaves of shard {shard}")
        leaves = {leaf: (score, False) for leaf, score in plain_leaves.items()}
        leaves.update((leaf, (score, True)) for leaf, score in soft_leaves.items())
        shard_bytes = 0
        for key, score in objects.items():
            info = index.object_info(key)
            if info is None:
                report.add("object_index_stale", f"{key} listed in {shard_keys.objects}")
                continue
            shard_bytes += info.size
            expected = INF if info.state != "complete" or info.hard_pin else info.lease_ms
            if score != expected:
                report.add("object_score", f"{key}: {score} != {expected}")
            if index.config.enable_radix_tree and client.zscore(
                    schema.node_keys(info.prefix_hash).keys, key) is None:
                report.add("object_unregistered", f"{key} not under node {info.prefix_hash}")
        total_bytes += shard_bytes
        stats = client.hgetall(shard_keys.stats)
        for name, actual in (("used_bytes", shard_bytes), ("objects", len(objects)),
                             ("nodes", len(node_hashes[shard]))):
            if int(stats.get(name, 0)) != actual:
                report.add("shard_stats", f"shard {shard} {name}={stats.get(name)} != {actual}")
        for prefix_hash in node_hashes[shard]:
            _check_node(index, report, prefix_hash, leaves, parents, children_of)
        for leaf in set(leaves) - set(node_hashes[shard]):
            report.add("leaf_index_stale", f"{leaf} in leaves of shard {shard} but no node")
        report.objects += len(objects)
        report.nodes += len(node_hashes[shard])

    for child, parent in parents.items():
        if parent is None:
            continue
        if parent not in children_of:
            report.add("parent_missing", f"{child} names parent {parent}, which does not exist")
        elif child not in children_of[parent]:
            report.add("parent_does_not_list_child", f"{parent} does not list child {child}")
    for parent, children in children_of.items():
        for child in children:
            if child not in parents:
                report.add("dangling_child", f"{parent} lists {child}, which does not exist")
            elif parents[child] not in (None, parent):
                report.add("child_of_other_parent", f"{parent} lists {child} of {parents[child]}")
    _check_cycles(report, parents)
    used = int(client.get(schema.usage) or 0)
    if used != total_bytes:
        report.add("usage_counter", f"{schema.usage}={used} != sum of sizes {total_bytes}")
    return report


def _check_node(index: Index, report: FsckReport, prefix_hash: str,
                leaves: dict[str, tuple[float, bool]],
                parents: dict[str, str | None], children_of: dict[str, set[str]]) -> None:
    node = index.get_node(prefix_hash)
    if node is None:
        return
    parents[prefix_hash] = node.parent
    children_of[prefix_hash] = set(node.children)
    if not node.keys and not node.children:
        report.add("empty_node", f"{prefix_hash} has no keys and no children")
    infos = [index.object_info(key) for key in node.keys]
    for key, info in zip(node.keys, infos):
        if info is None:
            report.add("registered_key_missing", f"{key} under {prefix_hash} is not an object")
        elif info.prefix_hash != prefix_hash:
            report.add("registered_key_wrong_node", f"{key} under {prefix_hash}")
    present = [i for i in infos if i is not None]
    if node.bytes != sum(i.size for i in present):
        report.add("node_bytes", f"{prefix_hash} bytes={node.bytes}")
    if node.processing != sum(1 for i in present if i.state != "complete"):
        report.add("node_processing", f"{prefix_hash} processing={node.processing}")
    if node.soft_pins != sum(1 for i in present if i.soft_pin):
        report.add("node_soft_pins", f"{prefix_hash} soft_pins={node.soft_pins}")
    if node.is_leaf:
        score = max((INF if i.state != "complete" or i.hard_pin else i.lease_ms)
                    for i in present) if present else None
        expected = (score, node.soft_pins > 0)
        if leaves.get(prefix_hash) != expected:
            report.add("leaf_index", f"{prefix_hash}: (score, soft) "
                                     f"{leaves.get(prefix_hash)} != {expected}")
    elif prefix_hash in leaves:
        report.add("leaf_index_stale", f"{prefix_hash} is in the leaf index but not a leaf")


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
