"""Memory: Redis bytes per node (of two objects) at 1M objects, per key kind, leaves and
interior nodes apart, and what Redis's encoding settings change."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import redis

from .common import (
    DEPLOY_CONF,
    NAMESPACE,
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    connect,
    open_index,
    used_memory,
)
from .trees import KEYS_PER_PAGE

NAME = "memory"
MIB = 1 << 20
CLASSIFY_CHUNK = 1000

ENCODING_SETTINGS = ("hash-max-listpack-entries", "hash-max-listpack-value",
                     "zset-max-listpack-entries", "zset-max-listpack-value")
"""The settings that decide how a node hash and the shard indexes are encoded."""


def deploy_settings() -> dict[str, str]:
    """The encoding settings deploy/redis.conf changes from the defaults."""
    settings = {}
    for line in DEPLOY_CONF.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ENCODING_SETTINGS:
            settings[words[0]] = words[1]
    return settings


VARIANTS: dict[str, dict[str, str]] = {
    "Redis defaults": {},
    "deploy/redis.conf": deploy_settings(),
    "no listpacks (entries 0)": {"hash-max-listpack-entries": "0",
                                 "zset-max-listpack-entries": "0"},
}
"""Settings compared on the same data: each applied with CONFIG SET, then DEBUG RELOAD
re-encodes every key under it (save, flush, load)."""


def tree_sizes(scale: Scale) -> list[int]:
    return [scale.memory_objects]


def kind_of(key: str) -> str:
    """The word after the shard tag (n, leaves, pending, stats, events ...), or after the
    namespace for namespace-wide keys (settings)."""
    parts = key.split(":")
    return parts[2] if len(parts) > 2 and parts[1].startswith("{") else parts[1]


def node_class(children: str | None, objects: str | None) -> str:
    """leaf (objects, no children), interior (children and objects), shell (children only)."""
    if int(children or 0) == 0:
        return "node: leaf"
    return "node: interior" if int(objects or 0) else "node: shell"


def classified(client: redis.Redis) -> Iterator[tuple[str, str]]:
    """(kind, key) of every key of the namespace; node keys by their class."""
    nodes: list[str] = []

    def flush() -> Iterator[tuple[str, str]]:
        pipe = client.pipeline(transaction=False)
        for key in nodes:
            pipe.hmget(key, "nc", "no")
        for key, (children, objects) in zip(nodes, pipe.execute()):
            yield node_class(children, objects), key
        nodes.clear()

    for key in client.scan_iter(match=f"{NAMESPACE}:*", count=1000):
        kind = kind_of(key)
        if kind != "n":
            yield kind, key
            continue
        nodes.append(key)
        if len(nodes) >= CLASSIFY_CHUNK:
            yield from flush()
    yield from flush()


def census(client: redis.Redis, per_kind: int) -> tuple[Counter[str], dict[str, list[str]]]:
    """How many keys of each kind there are, and the first `per_kind` of each that SCAN
    meets (SCAN's order is the hash table's, so effectively random)."""
    counts: Counter[str] = Counter()
    samples: dict[str, list[str]] = defaultdict(list)
    for kind, key in classified(client):
        counts[kind] += 1
        if len(samples[kind]) < per_kind:
            samples[kind].append(key)
    return counts, samples


def describe(client: redis.Redis, keys: list[str]) -> dict[str, Any]:
    """Type, encodings (share of samples), mean MEMORY USAGE and mean field count (hashes)
    of one kind's samples."""
    if not keys:
        return {"type": "-", "encodings": {}, "mean_bytes": 0.0, "samples": 0}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.object("encoding", key)
        pipe.memory_usage(key, samples=0)
    replies = pipe.execute()
    encodings = Counter(replies[1::3])
    info = {"type": replies[0], "samples": len(keys),
            "encodings": {name: count / len(keys) for name, count in encodings.most_common()},
            "mean_bytes": sum(replies[2::3]) / len(keys)}
    if replies[0] == "hash":
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hlen(key)
        info["mean_fields"] = sum(pipe.execute()) / len(keys)
    return info


def encoding_text(encodings: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" if share < 1 else name
                     for name, share in encodings.items()) or "-"


def compare_settings(client: redis.Redis, samples: dict[str, list[str]], empty: int,
                     nodes: int) -> tuple[Table, list[dict[str, Any]]]:
    """Each variant on the same data: its settings (the others at their defaults), then
    DEBUG RELOAD, which re-encodes every key as Redis would have built it."""
    names = sorted({name for settings in VARIANTS.values() for name in settings})
    defaults: dict[str, str] = {name: str(value) for name in names
                                for value in client.config_get(name).values()}
    node_kinds = sorted(kind for kind in samples if kind.startswith("node"))
    table = Table("Redis settings on the same data (CONFIG SET, then DEBUG RELOAD)",
                  ["settings", "applied", "used_memory MiB", "bytes per node", "vs defaults",
                   *(f"{kind} encoding" for kind in node_kinds)])
    variants: list[dict[str, Any]] = []
    for name, settings in VARIANTS.items():
        applied = {key: value for key, value in settings.items() if key in defaults}
        for key, value in {**defaults, **applied}.items():
            client.config_set(key, value)
        client.execute_command("DEBUG", "RELOAD")
        grown = used_memory(client) - empty
        encodings = {kind: describe(client, samples[kind])["encodings"] for kind in node_kinds}
        variant = {"name": name, "applied": applied, "used_memory_delta": grown,
                   "bytes_per_node": grown / nodes,
                   "vs_defaults": grown / variants[0]["used_memory_delta"] if variants else 1.0,
                   "encodings": encodings}
        variants.append(variant)
        table.rows.append([name, " ".join(f"{k} {v}" for k, v in applied.items()) or "-",
                           grown / MIB, variant["bytes_per_node"], variant["vs_defaults"],
                           *(encoding_text(encodings[kind]) for kind in node_kinds)])
    for key, value in defaults.items():
        client.config_set(key, value)
    return table, variants


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    with bench_server() as server:
        client = connect(server)
        settings = {name: value for name in ENCODING_SETTINGS
                    for value in client.config_get(name).values()}
        empty = used_memory(client)
        snapshot = context.snapshots.load(server, scale.memory_objects)
        loaded = used_memory(client) - empty
        usage = open_index(server).usage()
        counts, samples = census(client, scale.memory_samples)
        kinds = {kind: {"count": count, **describe(client, samples[kind])}
                 for kind, count in sorted(counts.items())}
        settings_table, variants = compare_settings(client, samples, empty, usage.nodes)

    kinds_table = Table(
        f"Memory per key kind at {usage.objects:,} objects, {usage.nodes:,} nodes "
        "(MEMORY USAGE SAMPLES 0 of sampled keys, Redis defaults)",
        ["key kind", "type", "count", "encoding", "fields (mean)", "mean bytes",
         "est. total MiB", "bytes per node"])
    for kind, info in kinds.items():
        total = info["mean_bytes"] * info["count"]
        kinds_table.rows.append([kind, info["type"], info["count"],
                                 encoding_text(info["encodings"]), info.get("mean_fields"),
                                 info["mean_bytes"], total / MIB, total / usage.nodes])
    totals = {"objects": usage.objects, "nodes": usage.nodes,
              "objects_per_node": usage.objects / usage.nodes,
              "used_memory_delta_loaded": loaded,
              "used_memory_delta_built": snapshot.used_memory_delta,
              "bytes_per_object": loaded / usage.objects, "bytes_per_node": loaded / usage.nodes,
              "estimated_from_kinds": sum(k["mean_bytes"] * k["count"] for k in kinds.values()),
              "redis_settings": settings,
              "node_bytes": {kind: info["mean_bytes"] for kind, info in kinds.items()
                             if kind.startswith("node")}}
    totals_table = Table(
        f"Memory totals (used_memory growth from an empty server; {KEYS_PER_PAGE} objects "
        "per node)", ["measure", "value"],
        [["objects", usage.objects], ["nodes", usage.nodes],
         ["Redis encoding settings", " ".join(f"{k} {v}" for k, v in settings.items())],
         ["used_memory growth, RDB loaded (MiB)", loaded / MIB],
         ["used_memory growth, built through the API (MiB)", snapshot.used_memory_delta / MIB],
         ["sum of per-kind estimates (MiB)", totals["estimated_from_kinds"] / MIB],
         ["bytes per node (all keys)", totals["bytes_per_node"]],
         ["bytes per object (all keys)", totals["bytes_per_object"]]])
    return BenchmarkResult([totals_table, kinds_table, settings_table],
                           {"totals": totals, "kinds": kinds, "settings": variants})
