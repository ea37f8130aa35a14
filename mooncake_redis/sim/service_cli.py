"""`sim --backend redis`: the options of a replay on the service, where it runs, and the
table and files it reports (for the generated workload and for traces alike)."""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import asdict
from typing import Any

from mooncake_redis.settings import DEFAULT_URL, ENV_URL, Settings
from mooncake_redis.sim.arguments import integers_at_least, names_from
from mooncake_redis.sim.report import (
    format_table,
    number_column,
    pair_column,
    text_column,
    write_results,
    written_line,
)
from mooncake_redis.sim.service.replay import READ_LEASE_TTL_MS, PageLayout
from mooncake_redis.sim.service.runner import (
    MODE_NAMES,
    ServiceRunMetrics,
    ServiceSettings,
    run_on_service,
)
from mooncake_redis.sim.trace.kv_layout import KV_SUFFIXES
from mooncake_redis.sim.trace.pages import ServicePages
from mooncake_redis.urls import redact

DEFAULT_NAMESPACE = "mc"

TABLE_COLUMNS = (
    text_column("mode", "mode"),
    number_column("leaves", "leaves_per_round", "{:,}"),
    number_column("capacity", "capacity_fraction", "{:.2f}"),
    number_column("per-page", "hit_rate", "{:.2%}"),
    number_column("usable", "usable_prefix_hit_rate", "{:.2%}"),
    number_column("ideal", "ideal_usable_prefix_hit_rate", "{:.2%}"),
    number_column("at marks", "ideal_watermark_usable_prefix_hit_rate", "{:.2%}"),
    number_column("jobs", "eviction_jobs", "{:,}"),
    pair_column("orphans", "orphaned_pages", "peak_orphaned_pages", "{:,}"),
    number_column("census", "census_orphaned_pages", "{:,}"),
    number_column("seconds", "seconds", "{:.1f}"),
)
TABLE_TITLE = (
    "On the service (leaves: per eviction round; capacity: fraction of the distinct pages; "
    "usable: the leading run found stored; ideal: in-memory leaf-first LRU at the capacity; "
    "at marks: the same at the service's watermarks, in exact order; orphans: pages "
    "stored without their parent page, at the end/peak; census: the end's, read page by page)"
)


def add_service_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--modes",
        type=names_from(MODE_NAMES, "mode"),
        default=",".join(MODE_NAMES),
        help="redis backend: radix (the radix tree on: leaf-first eviction), lease (off: "
             "Mooncake's lease-ordered eviction per page)",
    )
    group.add_argument(
        "--leaves-per-round",
        type=integers_at_least(1),
        default=str(Settings.leaves_per_round),
        metavar="N[,N...]",
        help="redis backend: the namespace's leaves_per_round; a list runs every mode at "
             "each, to compare the service's order with the ideal leaf-first LRU",
    )


def service_settings(args: argparse.Namespace, capacity_fractions: tuple[float, ...]
                     ) -> ServiceSettings:
    """ValueError for a combination the replay cannot run."""
    return ServiceSettings(modes=args.modes, capacity_fractions=capacity_fractions,
                           leaves_per_round=args.leaves_per_round)


def service_location(args: argparse.Namespace) -> tuple[str, str]:
    """(URL, namespace): the main CLI's global --url/--namespace when present, else
    MOONCAKE_REDIS_URL or the in-process memory:// store, and "mc"."""
    url = getattr(args, "url", None) or os.environ.get(ENV_URL) or DEFAULT_URL
    return url, getattr(args, "namespace", None) or DEFAULT_NAMESPACE


def run_service_replay(pages: ServicePages, layout: PageLayout, settings: ServiceSettings,
                       args: argparse.Namespace, description: dict[str, Any],
                       csv_name: str, json_name: str) -> int:
    """Replay, print the table, write CSV and JSON (with the run's conditions)."""
    url, namespace = service_location(args)
    load_before = os.getloadavg()
    results = run_on_service(pages, layout, settings, url, namespace,
                             show_progress=not args.no_progress)
    print(format_table(results, TABLE_COLUMNS, TABLE_TITLE))
    description = {
        **description,
        "requests": len(pages.trace.chains),
        "requested_pages": pages.trace.requested_pages,
        "distinct_pages": pages.trace.distinct_pages,
        "page_tokens": pages.trace.page_tokens,
        "object_bytes": layout.object_bytes,
        "key_suffixes": list(KV_SUFFIXES),
        "settings": asdict(settings),
        "read_lease_ttl_ms": READ_LEASE_TTL_MS,
        "url": redact(url),
        "namespace": namespace,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    written = write_results(results, description, args.out, csv_name, json_name,
                            ServiceRunMetrics)
    print(written_line(written))
    return 0
