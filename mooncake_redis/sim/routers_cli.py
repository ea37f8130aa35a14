"""`sim --trace FILE --routers`: N gateways with an index each against one shared index,
on the trace; its options, the table, the files and the plot."""

from __future__ import annotations

import argparse
import platform
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mooncake_redis.sim.anchors import routers_note
from mooncake_redis.sim.arguments import integers_at_least, names_from
from mooncake_redis.sim.report import (
    Line,
    PlotPanel,
    format_table,
    merge_identical,
    number_column,
    text_column,
    wrapped,
    write_line_plot,
    write_results,
    written_line,
)
from mooncake_redis.sim.trace.pages import PageTrace
from mooncake_redis.sim.trace.routers import (
    ROUTER_COUNTS,
    ROUTING_SEED,
    ROUTINGS,
    RouterRunMetrics,
    RouterSettings,
    run_routers,
)

CSV_NAME = "routers_results.csv"
JSON_NAME = "routers_results.json"
PLOT_NAME = "sim_routers.png"

TABLE_COLUMNS = (
    text_column("routing", "routing"),
    number_column("capacity", "capacity_fraction", "{:.2f}"),
    number_column("routers", "routers", "{:,}"),
    number_column("shared", "shared_hit_rate", "{:.2%}"),
    number_column("separate", "separate_hit_rate", "{:.2%}"),
    number_column("f-up shared", "shared_follow_up_hit_rate", "{:.2%}"),
    number_column("f-up separate", "separate_follow_up_hit_rate", "{:.2%}"),
    number_column("stale", "stale_pages", "{:,}"),
    number_column("entries", "separate_index_pages", "{:,}"),
)

_PLOT_PANELS = (
    PlotPanel("hit_rate", "hit rate (%)", "Every request"),
    PlotPanel("follow_up_hit_rate", "follow-up hit rate (%)",
              "Follow-ups (a session's later requests)"),
)


def add_router_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--routers",
        nargs="?",
        const=",".join(map(str, ROUTER_COUNTS)),
        type=integers_at_least(1),
        default=argparse.SUPPRESS,
        metavar="N[,N...]",
        help="instead of the policy matrix, what one shared index buys N routers: N "
             "gateways each with its own index against one index all share, on the trace, "
             f"in memory (given alone: {','.join(map(str, ROUTER_COUNTS))}); --capacities "
             "are the pool's (default 1: it keeps every page)",
    )
    group.add_argument(
        "--routing",
        type=names_from(ROUTINGS, "routing"),
        default=",".join(ROUTINGS),
        help="with --routers: how requests reach a gateway: random (any, uniformly) or "
             "sticky (its session's; sessions are the trace's, else derived from the "
             f"chains); seeded ({ROUTING_SEED}), so runs repeat",
    )


def router_settings(args: argparse.Namespace) -> RouterSettings:
    """ValueError for a combination the study cannot run."""
    return RouterSettings(routings=args.routing, router_counts=tuple(args.routers),
                          capacity_fractions=args.capacities)


def format_router_results(results: Sequence[RouterRunMetrics]) -> str:
    sessions = "the trace's" if results and results[0].sessions_from_trace else "derived"
    return format_table(
        results, TABLE_COLUMNS,
        "Hit rate of N routers (pages of each request's leading run found by the index its "
        "router consults and held by the pool; shared: one index, the pool's; separate: "
        "each router's own, of what it routed; f-up: follow-ups, a session's later "
        f"requests, sessions {sessions}; stale: pages a separate index listed that the pool had "
        "evicted; entries: pages the separate indexes list, summed; capacity: the pool's)")


def router_plot_lines(results: Sequence[RouterRunMetrics], field: str) -> list[Line]:
    """Hit rate against the router count: per index kind (and capacity, when several) one
    colour, per routing one style; identical lines drawn once."""
    capacities = list(dict.fromkeys(result.capacity_fraction for result in results))
    series = []
    for fraction in capacities:
        for kind in ("shared", "separate"):
            colour = kind if len(capacities) == 1 else f"{kind} at {fraction:g}"
            for routing in dict.fromkeys(result.routing for result in results):
                points = [(float(result.routers), getattr(result, f"{kind}_{field}"))
                          for result in results
                          if (result.capacity_fraction, result.routing) == (fraction, routing)]
                series.append((colour, routing, points))
    return merge_identical(series)


def run_router_study(trace: PageTrace, settings: RouterSettings, args: argparse.Namespace,
                     description: dict[str, Any]) -> int:
    """Run, print the table and the anchor, write CSV, JSON and (with --plot) the PNG."""
    results = run_routers(trace, settings, show_progress=not args.no_progress)
    print(format_router_results(results))
    print("\n" + wrapped(routers_note()))
    description = {
        **description,
        "requests": len(trace.chains),
        "requested_pages": trace.requested_pages,
        "distinct_pages": trace.distinct_pages,
        "settings": asdict(settings),
        "routing_seed": ROUTING_SEED,
        "python": platform.python_version(),
    }
    written = write_results(results, description, args.out, CSV_NAME, JSON_NAME,
                            RouterRunMetrics)
    if args.plot:
        written.append(args.out / PLOT_NAME)
        write_router_plot(results, written[-1])
    print(written_line(written))
    return 0


def write_router_plot(results: Sequence[RouterRunMetrics], path: Path) -> list[list[str]]:
    panels = [(panel, router_plot_lines(results, panel.field)) for panel in _PLOT_PANELS]
    return write_line_plot(path, panels, "routers (gateways)", x_log2=True)
