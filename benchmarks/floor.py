"""Floor: every write hot path as a ratio to a minimal reference of the same schema
(benchmarks/floor_lua/: blind writes, one script call a batch), on one throwaway server in
one run, at each shard count a new namespace can have (issue 19, item 6)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from mooncake_redis import Index
from mooncake_redis.settings import Settings

from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    chunks,
    connect,
    open_index,
    used_memory,
)
from .eviction import timed_eviction
from .meter import Measured, measure, total
from .registration import batches, checked, pages_of, put_pages
from .trees import KEYS_PER_PAGE, OBJECT_BYTES, Page, page_keys, put_items

NAME = "floor"
LUA = Path(__file__).with_name("floor_lua")
FLOOR_TOKEN = "floor"
"""The writer token in the floor's object values (ours are 10 characters)."""

SUFFIXES = [key[64:] for key in page_keys("0" * 64)]
"""The key suffixes of a page's objects ('_0_k', '_0_v'): the node's o:<suffix> fields."""

EVICT_LEAVES_PER_CALL = 64
WARM_UP_PAGES = 100

SHARD_COUNTS = (256, 16)
"""Run at each once namespaces take a shard_count setting: stored namespaces keep 256,
new ones get 16."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


def shard_settings() -> list[dict[str, int]]:
    """The Index arguments of each layout to run: every SHARD_COUNTS where the checkout's
    Settings has shard_count, else the one layout there is (the Index's default)."""
    if "shard_count" in {f.name for f in fields(Settings)}:
        return [{"shard_count": count} for count in SHARD_COUNTS]
    return [{}]


def shard_count(index: Index) -> int:
    """How many shards the namespace's keys spread over."""
    return len(index.schema.shards)


class FloorScripts:
    """The two reference scripts, loaded once (EVALSHA)."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.register_sha = client.script_load((LUA / "register.lua").read_text())
        self.evict_sha = client.script_load((LUA / "evict.lua").read_text())

    def register(self, index: Index, pages: Sequence[Page], events_cap: int = 0) -> int:
        """Write one batch of pages (parents first) as the real scripts leave them, in
        the index's namespace and layout: one call. Returns the pages written."""
        node = index.schema.node
        args: list[Any] = [FLOOR_TOKEN, OBJECT_BYTES, events_cap, len(SUFFIXES), *SUFFIXES]
        for page, parent in pages:
            args += (node(page), node(parent) if parent else "")
        return int(self.client.evalsha(self.register_sha, 0, *args))

    def evict(self, index: Index, leaves: int, events_cap: int = 0) -> tuple[int, int]:
        """Evict `leaves` leaves (parents that become leaves included), the oldest of each
        shard first, EVICT_LEAVES_PER_CALL a call. Returns (leaves, objects)."""
        namespace, count = index.namespace, shard_count(index)
        evicted = objects = start = 0
        while evicted < leaves:
            got, freed, start = self.client.evalsha(
                self.evict_sha, 0, namespace, count,
                min(EVICT_LEAVES_PER_CALL, leaves - evicted), start, events_cap,
                index.schema.tag_width)
            if not got:
                raise RuntimeError(f"the floor found no leaf to evict after {evicted}")
            evicted, objects = evicted + int(got), objects + int(freed)
        return evicted, objects


def row(shards: int, path: str, unit: str, count: int, m: Measured, keys: int,
        memory: int | None = None) -> dict[str, Any]:
    return {"shards": shards, "path": path, "unit": unit, "count": count, **m.per(count),
            "client_cpu_us_per_key": m.client_cpu_seconds * 1e6 / keys,
            "memory_per_page": memory / count if memory is not None else None}


def with_memory(client: redis.Redis, work: Callable[[], Any]) -> tuple[Measured, int]:
    """Measured work and the used_memory it added."""
    before = used_memory(client)
    m = measure(client, work)
    return m, used_memory(client) - before


def warm_up(server: Any, scripts: FloorScripts, setting: dict[str, int], label: str,
            pages: Sequence[Page]) -> None:
    """One untimed batch of the floor and of ours first, in namespaces of their own: the
    first calls of a run pay for imports, caches and the executor's first use, which the
    floor's short rows would otherwise carry."""
    floor, ours = (open_index(server, namespace=f"warm{name}{label}", **setting)
                   for name in ("floor", "ours"))
    scripts.register(floor, pages)
    items = put_items(pages)
    checked(ours.batch_put_start(items))
    checked(ours.batch_put_end([key for key, _, _ in items]))
    ours.close()


def layout_rows(client: redis.Redis, server: Any, context: Context, scripts: FloorScripts,
                setting: dict[str, int]) -> list[dict[str, Any]]:
    """Every row at one shard layout: the floor's registration (without and with events)
    and ours (path A: put_start with parents + put_end; path B: put_start + put_end, then
    register), all of the same pages; then eviction of the same leaves from each tree."""
    scale = context.scale
    size, leaves = scale.registration_batch, scale.eviction_leaves
    pages = pages_of(context.seed, scale.registration_nodes)
    keys, label = len(pages) * KEYS_PER_PAGE, "-".join(map(str, setting.values()))
    floor, floor_events, path_a, path_b = (open_index(server, namespace=f"{name}{label}",
                                                      **setting)
                                           for name in ("floor", "floorev", "ours", "pathb"))
    shards = shard_count(path_a)
    events_cap = path_a.settings.events_max_len
    groups = chunks(pages, size)
    warm_up(server, scripts, setting, label, pages_of(context.seed + 1, WARM_UP_PAGES))

    def floor_work(index: Index, cap: int) -> Callable[[], None]:
        def work() -> None:
            for group in tqdm(groups, desc=f"floor {shards}", unit="call", leave=False):
                if scripts.register(index, group, cap) != len(group):
                    raise RuntimeError("the floor wrote fewer pages than it was given")
        return work

    def path_b_objects(group: Sequence[Page]) -> None:
        items = put_items((page, None) for page, _ in group)
        checked(path_b.batch_put_start(items))
        checked(path_b.batch_put_end([key for key, _, _ in items]))

    measured = {
        "floor": with_memory(client, floor_work(floor, 0)),
        "floor_events": with_memory(client, floor_work(floor_events, events_cap)),
        "put_start": with_memory(client, batches("batch_put_start", groups,
                                                 put_pages(path_a))),
        "put_end": with_memory(client, batches(
            "batch_put_end", chunks([key for key, _, _ in put_items(pages)], 2 * size),
            lambda group: checked(path_a.batch_put_end(group)))),
        "path_b_objects": with_memory(client, batches("path B objects", groups,
                                                      path_b_objects)),
        "register": with_memory(client, batches(
            "register", groups, lambda group: checked(path_b.batch_register_radix_tree_node(
                [(page, parent, page_keys(page)) for page, parent in group])))),
    }
    path_a.close()
    path_b.close()

    def both(*names: str) -> tuple[Measured, int]:
        return total([measured[n][0] for n in names]), sum(measured[n][1] for n in names)

    n = len(pages)
    registration = [
        ("floor: registration (one call a batch)", *measured["floor"]),
        ("floor + events: registration with a 'stored' event an object",
         *measured["floor_events"]),
        (f"ours path A: batch_put_start with parents ({size} pages a call)",
         *measured["put_start"]),
        (f"ours path A: batch_put_end ({size} pages a call)", *measured["put_end"]),
        ("ours path A: put_start + put_end", *both("put_start", "put_end")),
        (f"ours path B: batch_put_start without parents + batch_put_end ({size} pages a "
         "call)", *measured["path_b_objects"]),
        (f"ours path B: batch_register_radix_tree_node ({size} pages a call)",
         *measured["register"]),
        ("ours path B: put_start + put_end + register", *both("path_b_objects", "register")),
    ]
    rows = [row(shards, path, "page", n, m, keys, memory) for path, m, memory in registration]
    floor_evicted = measure(client, lambda: scripts.evict(floor, leaves))
    floor_events_evicted = measure(client, lambda: scripts.evict(floor_events, leaves,
                                                                 events_cap))
    ours_evicted = timed_eviction(client, path_a, leaves)
    per_round = path_a.settings.leaves_per_round
    for path, m, objects in [
            (f"floor: eviction ({EVICT_LEAVES_PER_CALL} leaves a call, cascade inside)",
             floor_evicted, floor_evicted.result[1]),
            ("floor + events: eviction with an 'evicted' event an object", floor_events_evicted,
             floor_events_evicted.result[1]),
            (f"ours: eviction job (Evictor.run, leaves_per_round {per_round})", ours_evicted,
             ours_evicted.result.objects)]:
        rows.append({**row(shards, path, "object", objects, m, objects), "leaves": (
            m.result[0] if isinstance(m.result, tuple) else m.result.leaves)})
    return rows


def ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's rate and Redis CPU over its floor's (the first row of its unit and
    shard count): rate ratio < 1 and CPU ratio > 1 are what ours costs more."""
    floors: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        base = floors.setdefault((r["shards"], r["unit"]), r)
        r["rate_ratio"] = r["per_second"] / base["per_second"]
        r["cpu_bound_ratio"] = r["cpu_bound_per_second"] / base["cpu_bound_per_second"]
        r["redis_cpu_ratio"] = r["redis_cpu_us"] / base["redis_cpu_us"]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 19's targets that this run measures, per shard count."""
    out = []
    for shards in dict.fromkeys(r["shards"] for r in rows):
        mine = [r for r in rows if r["shards"] == shards]
        floor, put, evict_floor, evict = (next(r for r in mine if r["path"].startswith(p)) for p
                                          in ("floor: registration", "ours path A: put_start +",
                                              "floor: eviction", "ours: eviction"))
        out += [
            {"shards": shards, "measure": "Redis CPU per page, put_start + put_end ÷ floor",
             "target": "≤ 2.0", "value": put["redis_cpu_ratio"]},
            {"shards": shards, "measure": "pages/s, put_start + put_end ÷ floor",
             "target": "≥ 0.4", "value": put["rate_ratio"]},
            {"shards": shards, "measure": "CPU-bound pages/s, put_start + put_end ÷ floor",
             "target": "≥ 0.4", "value": put["cpu_bound_ratio"]},
            {"shards": shards, "measure": "client CPU µs per key, put_start + put_end",
             "target": "≤ 20", "value": put["client_cpu_us_per_key"]},
            {"shards": shards, "measure": "eviction objects/s ÷ floor registration pages/s",
             "target": "≥ 1.0", "value": evict["per_second"] / floor["per_second"]},
            {"shards": shards, "measure": "the same, CPU-bound rates",
             "target": "≥ 1.0",
             "value": evict["cpu_bound_per_second"] / floor["cpu_bound_per_second"]},
            {"shards": shards, "measure": "Redis CPU per evicted object ÷ floor eviction",
             "target": "-", "value": evict["redis_cpu_us"] / evict_floor["redis_cpu_us"]},
        ]
    return out


def run(context: Context) -> BenchmarkResult:
    with bench_server() as server:
        client = connect(server)
        scripts = FloorScripts(client)
        rows = [r for setting in shard_settings()
                for r in layout_rows(client, server, context, scripts, setting)]
    ratios(rows)
    goals = targets(rows)
    scale = context.scale
    table = Table(
        f"Floor: every write path next to the minimal reference of the same schema, "
        f"{scale.registration_nodes:,} pages of 2 objects, then {scale.eviction_leaves:,} "
        f"leaves evicted; one server, one run",
        ["shards", "path", "unit", "count", "per second", "rate ÷ floor",
         "CPU-bound rate ÷ floor", "Redis CPU µs", "Redis CPU ÷ floor", "client CPU µs/key",
         "round trips", "EVALSHA", "redis.call in scripts", "memory B/page"],
        [[r["shards"], r["path"], r["unit"], r["count"], r["per_second"], r["rate_ratio"],
          r["cpu_bound_ratio"], r["redis_cpu_us"], r["redis_cpu_ratio"],
          r["client_cpu_us_per_key"], r["round_trips"], r["evalsha"], r["script_commands"],
          r["memory_per_page"]] for r in rows],
        note="Per unit (page or evicted object). The floor (benchmarks/floor_lua/) writes the "
             "state batch_put_start + batch_put_end leave, blind, in one script call a batch; "
             "its eviction pops 64 leaves a call and unlinks each from its parent in the same "
             "call. Ratios are to the floor row of the same unit and shard count: rate ÷ "
             "floor < 1 and Redis CPU ÷ floor > 1 are what ours costs more. CPU-bound rate "
             "= 1 / (Redis + client CPU per unit), which waits for a busy core do not move. "
             "memory = "
             "used_memory growth per page (event streams are capped: a fixed cost, large "
             "per page in small runs).")
    goal_table = Table(
        "Issue 19 targets measured against the floor (same run)",
        ["shards", "measure", "target", "this run"],
        [[g["shards"], g["measure"], g["target"], g["value"]] for g in goals])
    return BenchmarkResult([table, goal_table],
                           {"paths": rows, "targets": goals,
                            "shard_counts": sorted({r["shards"] for r in rows})})
