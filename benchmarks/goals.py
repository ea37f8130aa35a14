"""Issue 10's goals for data model v2, read off one run's results, next to v1's numbers
(docs/BENCHMARKS.md before v2, and issue 10).

Round-trip goals are read to one decimal: a client re-reads the namespace settings every
settings_refresh_seconds (5 s), which adds one round trip to whichever call comes due."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .common import Table

Results = dict[str, dict[str, Any]]
"""benchmark name -> its results (results.json's benchmarks.<name>.results)."""


@dataclass(frozen=True)
class Goal:
    item: str
    goal: str
    benchmark: str
    read: Callable[[dict[str, Any]], float | None]
    meets: Callable[[float], bool] | None
    """None: no number to meet, only to report."""
    v1: str
    unit: str = ""


def path(results: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The registration row whose path starts with `prefix`."""
    return next(row for row in results["paths"] if row["path"].startswith(prefix))


def tree(results: dict[str, Any], objects: str, per_round: str) -> dict[str, Any]:
    """The eviction row of the largest (objects='max') or smallest tree at the default
    (per_round='default') or the raised leaves_per_round."""
    rows = results["trees"]
    settings = sorted({row["leaves_per_round"] for row in rows})
    wanted = settings[0] if per_round == "default" else settings[-1]
    rows = [row for row in rows if row["leaves_per_round"] == wanted]
    return max(rows, key=lambda r: r["tree_objects"]) if objects == "max" else \
        min(rows, key=lambda r: r["tree_objects"])


def matched_all(results: dict[str, Any]) -> dict[str, Any]:
    return results["calls"][0]


def mooncake_ratio(op: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        row = next(row for row in results["ops"] if row["op"] == op)
        return row["redis_aof"]["ratio"]
    return read


def our_rate(op: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        row = next(row for row in results["ops"] if row["op"] == op)
        return float(row["redis_aof"]["keys_per_second"])
    return read


REGISTERED = "batch_put_start, 2 objects/node"

GOALS = (
    Goal("memory per node of two objects, 1M objects, Redis defaults", "≤ 500 B", "memory",
         lambda r: r["totals"]["bytes_per_node"], lambda x: x <= 500,
         "3,117 B (2,200 B with zset-max-listpack-value 128)", " B"),
    Goal("Redis CPU per registered node (batch_put_start, 2 objects)", "≤ 15 µs",
         "registration", lambda r: path(r, REGISTERED)["redis_cpu_us"], lambda x: x <= 15,
         "57.8 µs (1 object/node)", " µs"),
    Goal("Redis CPU per registered node, 1 object (v1's shape)", "≤ 15 µs", "registration",
         lambda r: path(r, "batch_put_start, 1 object")["redis_cpu_us"], lambda x: x <= 15,
         "57.8 µs", " µs"),
    Goal("EVALSHA per registered node", "-", "registration",
         lambda r: path(r, REGISTERED)["evalsha"], None, "4"),
    Goal("redis.call per registered node", "-", "registration",
         lambda r: path(r, REGISTERED)["script_commands"], None, "~34"),
    Goal("nodes/s registered from one process", "≥ 40,000", "registration",
         lambda r: path(r, REGISTERED)["per_second"], lambda x: x >= 40_000, "8,221"),
    Goal("nodes/s CPU-bound: 1 / (Redis + client CPU per node)", "≥ 40,000", "registration",
         lambda r: path(r, REGISTERED)["cpu_bound_per_second"], lambda x: x >= 40_000, "-"),
    Goal("round trips of a single put_start with a parent (single Redis)", "1",
         "registration", lambda r: path(r, "put_start (single")["round_trips"],
         lambda x: round(x, 1) <= 1.0, "3 (3-4)"),
    Goal("eviction objects/s, 1M tree, default leaves_per_round", "≥ 50,000", "eviction",
         lambda r: tree(r, "max", "default")["objects_per_second"], lambda x: x >= 50_000,
         "12,386 (leaves_per_round 256)"),
    Goal("eviction objects/s, 1M tree, raised leaves_per_round", "≥ 50,000", "eviction",
         lambda r: tree(r, "max", "raised")["objects_per_second"], lambda x: x >= 50_000, "-"),
    Goal("eviction time ratio 1M / 100k tree (same leaves), default", "≤ 1.3", "eviction",
         lambda r: tree(r, "max", "default")["time_ratio"], lambda x: x <= 1.3,
         "0.70 (0.90 in another run)"),
    Goal("eviction time ratio 1M / 100k tree, raised leaves_per_round", "≤ 1.3", "eviction",
         lambda r: tree(r, "max", "raised")["time_ratio"], lambda x: x <= 1.3, "-"),
    Goal("eviction CPU ratio 1M / 100k tree (Redis + client), default", "≤ 1.3", "eviction",
         lambda r: tree(r, "max", "default")["cpu_ratio"], lambda x: x <= 1.3, "-"),
    Goal("match_prefix on 1,000 cached pages, p50", "≤ 2 ms", "match_prefix",
         lambda r: matched_all(r)["p50_ms"], lambda x: x <= 2.0, "7.4 ms", " ms"),
    Goal("match_prefix on 1,000 cached pages, round trips", "≤ 2", "match_prefix",
         lambda r: matched_all(r)["round_trips_per_call"], lambda x: round(x, 1) <= 2.0, "2"),
    Goal("per-rank batch of 200 pages at depth 1,000, round trips", "-", "match_prefix",
         lambda r: r["deep_writes"][0]["round_trips"], None, "1,203"),
    Goal("batch_is_exist keys/s (batches of the side-by-side)", "-", "mooncake",
         our_rate("is_exist, batch"), None, "Mooncake 8.6x faster"),
    Goal("batch put (metadata) vs Mooncake, ours/theirs", "≥ 1", "mooncake",
         mooncake_ratio("put, batch"), lambda x: x >= 1, "1/15 = 0.067", "x"),
    Goal("batch get vs Mooncake, ours/theirs", "≥ 1", "mooncake",
         mooncake_ratio("get, batch"), lambda x: x >= 1, "-", "x"),
    Goal("batch_is_exist vs Mooncake, ours/theirs", "≥ 1", "mooncake",
         mooncake_ratio("is_exist, batch"), lambda x: x >= 1, "1/8.6 = 0.12", "x"),
    Goal("batch_remove vs Mooncake, ours/theirs", "≥ 1", "mooncake",
         mooncake_ratio("remove, batch"), lambda x: x >= 1, "1/13.6 = 0.074", "x"),
    Goal("single put (metadata) vs Mooncake, ours/theirs", "-", "mooncake",
         mooncake_ratio("put, single"), None, "1/4.8 = 0.21", "x"),
)


def summarize(results: Results) -> tuple[Table, list[dict[str, Any]]]:
    """Every goal whose benchmark ran: measured, met or not, v1."""
    table = Table("Issue 10 goals: measured in this run, next to v1",
                  ["item", "goal", "measured", "meets goal", "v1"])
    rows = []
    for goal in GOALS:
        if goal.benchmark not in results:
            continue
        try:
            value = goal.read(results[goal.benchmark])
        except (KeyError, StopIteration, IndexError, TypeError):
            value = None
        meets = None if value is None or goal.meets is None else goal.meets(value)
        rows.append({"item": goal.item, "goal": goal.goal, "measured": value, "meets": meets,
                     "v1": goal.v1})
        shown = "-" if value is None else f"{value:,.3g}{goal.unit}" if value < 100 \
            else f"{value:,.0f}{goal.unit}"
        table.rows.append([goal.item, goal.goal, shown,
                           {True: "yes", False: "NO", None: "-"}[meets], goal.v1])
    return table, rows
