"""`sim --backend redis` on the generated workload: its page chains, in the order the turns
arrive, replayed on the service with the radix tree (leaf-first eviction) and without it
(Mooncake's lease-ordered eviction). The replay itself is `service/replay.py`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from dataclasses import asdict

from mooncake_redis.sim.arguments import refuse
from mooncake_redis.sim.indexes.workload import SpanKind, Workload, page_chains
from mooncake_redis.sim.service.replay import PageLayout
from mooncake_redis.sim.service.runner import (
    ServiceRunMetrics,
    ServiceSettings,
    run_on_service,
)
from mooncake_redis.sim.service_cli import run_service_replay, service_settings
from mooncake_redis.sim.trace.kv_layout import kv_object_bytes
from mooncake_redis.sim.trace.pages import ServicePages, hash_chain_pages

CSV_NAME = "redis_results.csv"
JSON_NAME = "redis_results.json"

DEFAULT_CAPACITY_FRACTION = 0.3
"""Capacity as a fraction of the workload's distinct pages."""


def page_layout(workload: Workload, page_tokens: int) -> PageLayout:
    """fp16 K (or V) of every layer and head for the page's tokens, as one object."""
    config = workload.config
    return PageLayout(kv_object_bytes(page_tokens, config.layers, config.heads))


def requests_in_arrival_order(
    workload: Workload, chains: Sequence[Sequence[Sequence[str]]]
) -> Iterator[list[str]]:
    """The page chains in the order the workload's turns arrive: sessions interleave, as
    users of one server do, so sessions compete for the cache as they would there."""
    turns_served = [0] * len(chains)
    for span in workload.spans:
        if span.kind is SpanKind.QUESTION_ASKED:
            session = span.sequence - 1
            yield list(chains[session][turns_served[session]])
            turns_served[session] += 1


def workload_pages(workload: Workload, page_tokens: int) -> ServicePages:
    """The workload's requests as numbered pages under their sha256 prefix hashes."""
    chains = page_chains(workload, page_tokens)
    return hash_chain_pages(requests_in_arrival_order(workload, chains), "generated workload",
                            page_tokens)


def replay_on_service(
    workload: Workload,
    page_tokens: int,
    capacity_fraction: float,
    url: str | None = None,
    namespace: str = "mc",
    show_progress: bool = False,
) -> list[ServiceRunMetrics]:
    """Both modes, each in its own namespace, at `capacity_fraction` of the distinct pages."""
    return run_on_service(workload_pages(workload, page_tokens),
                          page_layout(workload, page_tokens),
                          ServiceSettings(capacity_fractions=(capacity_fraction,)),
                          url, namespace, show_progress)


def run_redis_backend(workload: Workload, args: argparse.Namespace) -> int:
    """The `sim --backend redis` command without --trace."""
    try:
        settings = service_settings(args, (args.capacity_fraction,))
    except ValueError as error:
        return refuse(str(error))
    description = {"workload": asdict(workload.config),
                   "capacity_fraction": args.capacity_fraction}
    return run_service_replay(workload_pages(workload, args.page_tokens),
                              page_layout(workload, args.page_tokens), settings, args,
                              description, CSV_NAME, JSON_NAME)
