"""Registration: nodes/s, Redis CPU, script calls and round trips per node of every write
path, next to the EVALSHA ceilings of the same run; and how batch size moves the cost."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import redis
from tqdm import tqdm

from mooncake_redis import Index
from mooncake_redis.scripts import read_lua

from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    chunks,
    connect,
    open_index,
)
from .meter import Measured, measure
from .trees import OBJECT_BYTES, Page, chat_pages, put_items

NAME = "registration"
CEILING_SCRIPT = "redis.call('INCR', KEYS[1]) return 1"
"""The cheapest useful script: one key touched, one reply; what no script call can beat
(v1's ceiling, kept so runs on different days compare)."""

EMPTY_SHARD_SCRIPT = "\nreturn 1"
"""Appended to lua/_lib.lua: a shard script with no items. It costs what every call of
every shard script pays before its first item (the library's definitions, TIME)."""

HEADER = json.dumps(["bench", 600_000, 1000, 60_000, 2, 16, ""])
"""The packed argument of a shard script with no items (lua/_lib.lua's header)."""


SEGMENT = "node-0:7000"
"""The segment the replicated path's replicas name (mounted for the run)."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


ONE_SHARD = "00"
"""The shard of every page of the one-shard row: each batch is then one script call per
protocol step, which shows what the per-call cost of many shards adds to a node."""

LEGACY_SHARDS = 256
"""The shard count of the stored-namespace rows (namespaces created before shard_count):
next to the default rows (16 shards), what the count alone changes."""


def pages_of(seed: int, count: int, shard: str | None = None) -> list[Page]:
    return list(islice(chat_pages(seed, shard), count))


def batches(label: str, groups: Sequence[Any], send: Callable[[Any], Any]) -> Callable[[], None]:
    def work() -> None:
        for group in tqdm(groups, desc=label, unit="call", leave=False):
            send(group)
    return work


def checked(results: list[Any]) -> None:
    refused = [r for r in results if not r.ok]
    if refused:
        raise RuntimeError(f"{len(refused)} refused, e.g. {refused[0].key}: {refused[0].error}")


def put_pages(index: Index) -> Callable[[Sequence[Page]], None]:
    """batch_put_start of pages (2 objects each, with their parents), all must be written."""
    return lambda group: checked(index.batch_put_start(put_items(group)))


def script_ceiling(client: redis.Redis, source: str, keys: Sequence[str], args: Sequence[Any],
                   calls: int, per_pipeline: int) -> Callable[[], None]:
    sha = client.script_load(source)

    def work() -> None:
        for start in range(0, calls, per_pipeline):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(per_pipeline, calls - start)):
                pipe.evalsha(sha, len(keys), *keys, *args)
            pipe.execute()
    return work


def row(path: str, unit: str, count: int, m: Measured) -> dict[str, Any]:
    return {"path": path, "unit": unit, "count": count, **m.per(count)}


def registration_rows(client: redis.Redis, server: Any, context: Context) -> list[dict[str, Any]]:
    scale = context.scale
    nodes, size = scale.registration_nodes, scale.registration_batch
    tree_mha, tree_mla, tree_b, tree_single = (pages_of(context.seed + n, count) for n, count in
                                               enumerate([nodes] * 3 + [scale.single_nodes]))
    tree_one_shard = pages_of(context.seed + 4, nodes, ONE_SHARD)
    tree_replicas = pages_of(context.seed + 5, nodes)
    tree_legacy = pages_of(context.seed + 6, nodes)
    mha, mla, path_b, single, one_shard, replicated = (open_index(server, namespace=f"reg{n}")
                                                       for n in range(6))
    legacy = open_index(server, namespace="reg-legacy", shard_count=LEGACY_SHARDS)
    shards = mha.settings.shard_count
    replicated.mount_segment(SEGMENT, 1 << 50)
    replica = [(SEGMENT, "/mnt/kv/segment-0/0123456789abcdef", "disk")]
    shard_keys = ["bench:{00}:stats"]
    empty_shard = read_lua("_lib") + EMPTY_SHARD_SCRIPT
    for group in tqdm(chunks(tree_b, 1000), desc="path B objects", leave=False):
        checked(path_b.batch_put_start([(page, OBJECT_BYTES, None) for page, _ in group]))
        checked(path_b.batch_put_end([page for page, _ in group]))
    mha_keys = [key for key, _, _ in put_items(tree_mha)]
    legacy_keys = [key for key, _, _ in put_items(tree_legacy)]
    warm = tree_single.pop(0)  # the first write reads Redis TIME once for link epochs
    single.put_start(warm[0], OBJECT_BYTES, warm[1])
    rows = [
        row("ceiling: pipelined EVALSHA (INCR)", "call", nodes,
            measure(client, script_ceiling(client, CEILING_SCRIPT, ["bench:ceiling"], [], nodes,
                                           size))),
        row("ceiling: pipelined empty shard script (_lib.lua)", "call", nodes,
            measure(client, script_ceiling(client, empty_shard, shard_keys, [HEADER], nodes,
                                           size))),
        row(f"batch_put_start, 2 objects/node, with parent ({size} nodes/call, {shards} "
            "shards)", "node", nodes,
            measure(client, batches("batch_put_start MHA", chunks(tree_mha, size),
                                    put_pages(mha)))),
        row(f"batch_put_start, 2 objects/node, with parent ({size} nodes/call, "
            f"{LEGACY_SHARDS} shards)", "node", nodes,
            measure(client, batches("batch_put_start 256 shards", chunks(tree_legacy, size),
                                    put_pages(legacy)))),
        row(f"batch_put_start, 2 objects/node, with parent, all pages in shard {ONE_SHARD} "
            f"({size} nodes/call)", "node", nodes,
            measure(client, batches("batch_put_start one shard", chunks(tree_one_shard, size),
                                    put_pages(one_shard)))),
        row(f"batch_put_end, 2 objects/node ({size} nodes/call, {shards} shards)", "node",
            nodes, measure(client, batches("batch_put_end", chunks(mha_keys, 2 * size),
                                           lambda g: checked(mha.batch_put_end(g))))),
        row(f"batch_put_end, 2 objects/node ({size} nodes/call, {LEGACY_SHARDS} shards)",
            "node", nodes, measure(client, batches(
                "batch_put_end 256 shards", chunks(legacy_keys, 2 * size),
                lambda g: checked(legacy.batch_put_end(g))))),
        row(f"batch_put_start, 1 object/node (MLA), with parent ({size} nodes/call)", "node",
            nodes, measure(client, batches(
                "batch_put_start MLA", chunks(tree_mla, size),
                lambda g: checked(mla.batch_put_start([(p, OBJECT_BYTES, q) for p, q in g]))))),
        row(f"batch_put_start, 1 object/node (MLA) with 1 replica, with parent ({size} "
            "nodes/call)", "node", nodes, measure(client, batches(
                "batch_put_start replicas", chunks(tree_replicas, size),
                lambda g: checked(replicated.batch_put_start(
                    [(p, OBJECT_BYTES, q, replica) for p, q in g]))))),
        row(f"batch_register_radix_tree_node ({size} nodes/call)", "node", nodes,
            measure(client, batches(
                "register", chunks(tree_b, size),
                lambda g: checked(path_b.batch_register_radix_tree_node(
                    [(page, parent, [page]) for page, parent in g]))))),
        row("ceiling: one EVALSHA (INCR) per round trip", "call", scale.single_nodes,
            measure(client, script_ceiling(client, CEILING_SCRIPT, ["bench:ceiling"], [],
                                           scale.single_nodes, 1))),
        row("put_start (single, 1 object, with parent)", "node", len(tree_single),
            measure(client, batches("put_start", tree_single,
                                    lambda p: single.put_start(p[0], OBJECT_BYTES, p[1])))),
    ]
    for index in (mha, mla, path_b, single, one_shard, replicated, legacy):
        index.close()
    return rows


def sweep_rows(client: redis.Redis, server: Any, context: Context) -> list[dict[str, Any]]:
    """batch_put_start of the same shape at several batch sizes: the cost per call (one
    script call per shard and step, whatever its item count) against the cost per item."""
    scale = context.scale
    rows = []
    for number, size in enumerate(scale.batch_sweep):
        index: Index = open_index(server, namespace=f"sweep{number}")
        tree = pages_of(context.seed + 100 + number, scale.sweep_nodes)
        m = measure(client, batches(f"sweep {size}", chunks(tree, size), put_pages(index)))
        index.close()
        calls = len(chunks(tree, size))
        rows.append({"pages_per_call": size, "calls": calls,
                     "evalsha_per_call": m.evalsha / calls, **row("sweep", "node",
                                                                   scale.sweep_nodes, m)})
    return rows


def run(context: Context) -> BenchmarkResult:
    with bench_server() as server:
        client = connect(server)
        rows = registration_rows(client, server, context)
        sweep = sweep_rows(client, server, context)
    ceiling = rows[0]["per_second"]
    table = Table(
        "Registration: per node (or per call for the ceilings), one process, one Redis",
        ["path", "count", "seconds", "per second", "ratio to pipelined ceiling",
         "EVALSHA", "redis.call in scripts", "round trips", "Redis CPU µs", "client CPU µs",
         "CPU-bound per second", "Redis busy"],
        [[r["path"], r["count"], r["seconds"], r["per_second"], r["per_second"] / ceiling,
          r["evalsha"], r["script_commands"], r["round_trips"], r["redis_cpu_us"],
          r["client_cpu_us"], r["cpu_bound_per_second"], r["redis_busy"]] for r in rows],
        note="Redis CPU from INFO cpu (user + sys of the server) before/after; client CPU "
             "is this process's time.process_time(); redis.call in scripts = every command "
             "in INFO commandstats minus the commands this process sent. CPU-bound per "
             "second = 1 / (Redis + client CPU per unit): the rate of one process on an "
             "otherwise idle machine (client and Redis take turns on each round trip).")
    sweep_table = Table(
        f"batch_put_start (2 objects/node, with parent) by batch size, "
        f"{context.scale.sweep_nodes:,} nodes each",
        ["pages per call", "nodes/s", "EVALSHA per call", "EVALSHA/node",
         "redis.call/node", "Redis CPU µs/node", "client CPU µs/node", "CPU-bound nodes/s",
         "Redis busy"],
        [[r["pages_per_call"], r["per_second"], r["evalsha_per_call"], r["evalsha"],
          r["script_commands"], r["redis_cpu_us"], r["client_cpu_us"],
          r["cpu_bound_per_second"], r["redis_busy"]] for r in sweep],
        note="Each call sends one script call per shard per protocol step (link, put_start), "
             "so small batches pay the per-call cost (the empty shard script's row above) "
             "for only a few items.")
    return BenchmarkResult([table, sweep_table], {"paths": rows, "sweep": sweep})
