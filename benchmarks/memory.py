"""Memory: Redis bytes per object and per node, encodings per key kind, and what settings change."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import redis

from .common import (
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

NAME = "memory"
NODE_KINDS = ("obj", "node", "children", "keys")
"""The kinds with one key per object or node: what the settings decide the encoding of."""
MIB = 1 << 20

RECOMMENDED = {"zset-max-listpack-value": "128"}
"""Object keys are 68+ characters (`<64 hex>_0_k`; MHA+TP keys longer still), past the
default 64 of zset-max-listpack-value, which turns every node's small keys ZSET into a
skiplist. 128 keeps them listpacks; the per-shard indexes stay skiplists (their entry
count, not their value length, is over the limit)."""

VARIANTS: dict[str, dict[str, str]] = {
    "Redis defaults": {},
    "recommended": RECOMMENDED,
    "no listpacks (entries 0)": {"hash-max-listpack-entries": "0",
                                 "zset-max-listpack-entries": "0",
                                 "set-max-listpack-entries": "0",
                                 "set-max-intset-entries": "0"},
}
"""Settings compared on the same data: each applied with CONFIG SET, then DEBUG RELOAD
re-encodes every key under it (save, flush, load)."""


def tree_sizes(scale: Scale) -> list[int]:
    return [scale.memory_objects]


def kind_of(key: str) -> str:
    """The word after the shard tag (obj, node, children, keys, leaves, objects, ...), or
    after the namespace for namespace-wide keys (config, usage)."""
    parts = key.split(":")
    return parts[2] if parts[1].startswith("{") else parts[1]


def census(client: redis.Redis, per_kind: int) -> tuple[Counter[str], dict[str, list[str]]]:
    """How many keys of each kind there are, and the first `per_kind` of each that SCAN
    meets (SCAN's order is the hash table's, so effectively random)."""
    counts: Counter[str] = Counter()
    samples: dict[str, list[str]] = defaultdict(list)
    for key in client.scan_iter(match=f"{NAMESPACE}:*", count=1000):
        kind = kind_of(key)
        counts[kind] += 1
        if len(samples[kind]) < per_kind:
            samples[kind].append(key)
    return counts, samples


def describe(client: redis.Redis, keys: list[str]) -> dict[str, Any]:
    """Type, encodings (share of samples) and mean MEMORY USAGE of one kind's samples."""
    if not keys:
        return {"type": "-", "encodings": {}, "mean_bytes": 0.0, "samples": 0}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.object("encoding", key)
        pipe.memory_usage(key, samples=0)
    replies = pipe.execute()
    encodings = Counter(replies[1::3])
    return {"type": replies[0], "samples": len(keys),
            "encodings": {name: count / len(keys) for name, count in encodings.most_common()},
            "mean_bytes": sum(replies[2::3]) / len(keys)}


def encoding_text(encodings: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" if share < 1 else name
                     for name, share in encodings.items()) or "-"


def compare_settings(client: redis.Redis, samples: dict[str, list[str]], empty: int,
                     objects: int) -> tuple[Table, list[dict[str, Any]]]:
    """Each variant on the same data: its settings (the others at their defaults), then
    DEBUG RELOAD, which re-encodes every key as Redis would have built it."""
    names = sorted({name for settings in VARIANTS.values() for name in settings})
    defaults = {name: value for name in names for value in client.config_get(name).values()}
    table = Table("Redis settings on the same data (CONFIG SET, then DEBUG RELOAD)",
                  ["settings", "applied", "used_memory MiB", "bytes per object", "vs defaults",
                   *(f"{kind} encoding" for kind in NODE_KINDS)])
    variants: list[dict[str, Any]] = []
    for name, settings in VARIANTS.items():
        applied = {key: value for key, value in settings.items() if key in defaults}
        for key, value in {**defaults, **applied}.items():
            client.config_set(key, value)
        client.execute_command("DEBUG", "RELOAD")
        grown = used_memory(client) - empty
        encodings = {kind: describe(client, samples[kind])["encodings"] for kind in NODE_KINDS}
        variant = {"name": name, "applied": applied,
                   "unknown_to_this_redis": sorted(set(settings) - set(applied)),
                   "used_memory_delta": grown, "bytes_per_object": grown / objects,
                   "vs_defaults": grown / variants[0]["used_memory_delta"] if variants else 1.0,
                   "encodings": encodings}
        variants.append(variant)
        table.rows.append([name, " ".join(f"{k} {v}" for k, v in applied.items()) or "-",
                           grown / MIB, variant["bytes_per_object"], variant["vs_defaults"],
                           *(encoding_text(encodings[kind]) for kind in NODE_KINDS)])
    return table, variants


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    with bench_server() as server:
        client = connect(server)
        empty = used_memory(client)
        snapshot = context.snapshots.load(server, scale.memory_objects)
        loaded = used_memory(client) - empty
        usage = open_index(server).usage()
        counts, samples = census(client, scale.memory_samples)
        kinds = {kind: {"count": count, **describe(client, samples[kind])}
                 for kind, count in counts.most_common()}
        settings_table, variants = compare_settings(client, samples, empty, usage.objects)

    kinds_table = Table(f"Memory per key kind at {usage.objects:,} objects, {usage.nodes:,} "
                        "nodes (MEMORY USAGE SAMPLES 0 of sampled keys, Redis defaults)",
                        ["key kind", "type", "count", "encoding", "mean bytes", "est. total MiB",
                         "bytes per object"])
    for kind, info in kinds.items():
        total = info["mean_bytes"] * info["count"]
        kinds_table.rows.append([kind, info["type"], info["count"],
                                 encoding_text(info["encodings"]), info["mean_bytes"],
                                 total / MIB, total / usage.objects])
    totals = {"objects": usage.objects, "nodes": usage.nodes,
              "used_memory_delta_loaded": loaded,
              "used_memory_delta_built": snapshot.used_memory_delta,
              "bytes_per_object": loaded / usage.objects, "bytes_per_node": loaded / usage.nodes,
              "estimated_from_kinds": sum(k["mean_bytes"] * k["count"] for k in kinds.values())}
    totals_table = Table("Memory totals (used_memory growth; per object and per node are the "
                         "same total divided two ways)", ["measure", "value"],
                         [["objects", usage.objects], ["nodes", usage.nodes],
                          ["used_memory growth, RDB loaded (MiB)", loaded / MIB],
                          ["used_memory growth, built through the API (MiB)",
                           snapshot.used_memory_delta / MIB],
                          ["sum of per-kind estimates (MiB)", totals["estimated_from_kinds"] / MIB],
                          ["bytes per object", totals["bytes_per_object"]],
                          ["bytes per node", totals["bytes_per_node"]]])
    return BenchmarkResult([totals_table, kinds_table, settings_table],
                           {"totals": totals, "kinds": kinds, "settings": variants})
