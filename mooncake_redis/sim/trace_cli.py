"""`sim --trace FILE`: the options of a trace replay, and the run that prints and writes it."""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mooncake_redis.sim.anchors import best_possible_note, optimum_note
from mooncake_redis.sim.arguments import at_least, refuse
from mooncake_redis.sim.indexes.metrics import TraceRunMetrics, timer_overhead_ns
from mooncake_redis.sim.indexes.optimum import OPTIMUM_POLICY
from mooncake_redis.sim.report import (
    RUN_COLUMNS,
    TIMING_COLUMNS,
    PlotPanel,
    bytes_column,
    format_table,
    number_column,
    pair_column,
    wrapped,
    write_hit_rate_plot,
    write_results,
    written_line,
)
from mooncake_redis.sim.routers_cli import add_router_arguments, router_settings, run_router_study
from mooncake_redis.sim.service.replay import PageLayout
from mooncake_redis.sim.service_cli import run_service_replay, service_settings
from mooncake_redis.sim.trace.kv_layout import kv_object_bytes, kv_page_bytes
from mooncake_redis.sim.trace.page_replay import TOUCH_ORDERS
from mooncake_redis.sim.trace.pages import read_page_trace, service_pages
from mooncake_redis.sim.trace.runner import (
    TRACE_INDEX_NAMES,
    TraceSettings,
    run_trace_experiment,
)

CSV_NAME = "trace_results.csv"
JSON_NAME = "trace_results.json"
SERVICE_CSV_NAME = "trace_redis_results.csv"
SERVICE_JSON_NAME = "trace_redis_results.json"
PLOT_NAME = "sim_trace_hit_rate.png"

RATE_COLUMNS = (
    *RUN_COLUMNS,
    number_column("per-page", "hit_rate", "{:.2%}"),
    number_column("usable", "usable_prefix_hit_rate", "{:.2%}"),
    number_column("of optimum", "usable_prefix_hit_rate_of_optimum", "{:.1%}"),
    pair_column("orphans mean/peak", "mean_orphaned_pages", "peak_orphaned_pages", "{:,.1f}",
                "{:,}"),
    bytes_column("peak orphaned", "peak_orphaned_bytes"),
)
COST_COLUMNS = (
    *RUN_COLUMNS,
    *TIMING_COLUMNS,
    number_column("B/page", "memory_bytes_per_page", "{:,.0f}"),
    number_column("seconds", "seconds", "{:.2f}"),
)


def format_trace_results(results: Sequence[TraceRunMetrics]) -> str:
    """The trace replay's two tables: hit rates and orphans, then costs."""
    return "\n\n".join([
        format_table(results, RATE_COLUMNS,
                     "Hit rate (capacity: fraction of the trace's distinct pages; per-page: "
                     "cached pages found anywhere in the chain; usable: the cached leading "
                     "run, what an engine reuses; orphans: cached pages whose parent is not)"),
        format_table(results, COST_COLUMNS,
                     "Costs (lookup: ns per request, eviction: ns per evicted page, median/p99; "
                     "index, policy and heap bytes per cached page; seconds per replay)"),
    ])


_PLOT_PANELS = (
    PlotPanel("hit_rate", "per-page hit rate (%)", "Cached pages found, wherever in the chain"),
    PlotPanel("usable_prefix_hit_rate", "usable-prefix hit rate (%)",
              "Cached leading run of each chain (what an engine reuses)"),
)


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    trace = parser.add_argument_group(
        "trace",
        "replay the page chains of a Mooncake trace (JSONL: timestamp, input_length, "
        "output_length, hash_ids) instead of the generated workload, in memory or with "
        "--backend redis on the service (--modes, --leaves-per-round); --capacities are "
        "fractions of the trace's distinct pages, --half-life-uses counts page uses, "
        "--layers and --heads size its 512-token pages",
    )
    # No default shown for these two: absent means the generated workload, or every request.
    trace.add_argument("--trace", type=Path, metavar="FILE", default=argparse.SUPPRESS,
                       help="the trace file")
    trace.add_argument("--limit", type=at_least(1), metavar="N", default=argparse.SUPPRESS,
                       help="replay only the first N requests (default: all)")
    add_router_arguments(trace)
    trace.add_argument(
        "--touch-order",
        choices=TOUCH_ORDERS,
        default=TOUCH_ORDERS[0],
        help="order in which a request's page uses reach the policy: chain (root first), "
             "tip-first (last page first, as vLLM frees blocks) or shuffled (seeded; as when "
             "the pages share one timestamp and ties fall by key)",
    )


def run_trace(args: argparse.Namespace) -> int:
    """Replay the trace in memory, or with --backend redis on the service, or with
    --routers run the routers study; print the table, write CSV and JSON (and in memory,
    with --plot, the PNG); 2 for input the replay cannot use."""
    routers = hasattr(args, "routers")
    if routers and args.backend == "redis":
        return refuse("--routers runs in memory: drop --backend redis")
    try:
        trace = read_page_trace(args.trace, getattr(args, "limit", None))
        if routers:
            study = router_settings(args)
        elif args.backend == "redis":
            service = service_settings(args, args.capacities)
        else:
            settings = TraceSettings(
                indexes=getattr(args, "indexes", TRACE_INDEX_NAMES),
                policies=args.policies,
                capacity_fractions=args.capacities,
                half_life_uses=args.half_life_uses,
                touch_order=args.touch_order,
                page_bytes=kv_page_bytes(trace.page_tokens, args.layers, args.heads),
            )
    except (OSError, ValueError) as error:
        return refuse(str(error))
    if not trace.distinct_pages:
        return refuse(f"{args.trace}: no request has a page to cache")
    description: dict[str, Any] = {
        "trace": str(args.trace),
        "limit": getattr(args, "limit", None),
    }
    if routers:
        return run_router_study(trace, study, args, description)
    if args.backend == "redis":
        layout = PageLayout(kv_object_bytes(trace.page_tokens, args.layers, args.heads))
        return run_service_replay(service_pages(trace), layout, service, args, description,
                                  SERVICE_CSV_NAME, SERVICE_JSON_NAME)
    results = run_trace_experiment(trace, settings, show_progress=not args.no_progress)
    print(format_trace_results(results))
    print("\n" + wrapped(best_possible_note(trace.best_possible_hit_rate)))
    if OPTIMUM_POLICY in settings.policies:
        print("\n" + wrapped(optimum_note()))
    description.update({
        "requests": len(trace.chains),
        "requested_pages": trace.requested_pages,
        "distinct_pages": trace.distinct_pages,
        "page_tokens": trace.page_tokens,
        "settings": asdict(settings),
        "timer_overhead_ns": timer_overhead_ns(),
        "python": platform.python_version(),
    })
    written = write_results(results, description, args.out, CSV_NAME, JSON_NAME,
                            TraceRunMetrics)
    if args.plot:
        written.append(args.out / PLOT_NAME)
        write_hit_rate_plot(results, written[-1], _PLOT_PANELS,
                            "cache capacity (fraction of the trace's distinct pages)")
    print(written_line(written))
    return 0
