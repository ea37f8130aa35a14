"""Extension point for `sim --backend redis`: replay the workload's page chains on the service."""

from __future__ import annotations

import argparse
import sys

from mooncake_redis.sim.workload import Workload, page_chains

NOT_IMPLEMENTED_EXIT_CODE = 2


def run_redis_backend(workload: Workload, args: argparse.Namespace) -> int:
    """Replay `page_chains(workload, args.page_tokens)` against a mooncake-redis Index.

    Not built yet. The intended replay, per session and request in order: `match_prefix`
    on the chain (the hit length), then `put_start`/`put_end` and
    `register_radix_tree_node(page, parent=previous page)` for the pages that missed,
    and the service's own eviction running under its watermarks; the metrics are hit
    rate and per-call latency, written through report.py like the in-memory backend's.
    """
    chains = page_chains(workload, args.page_tokens)
    pages = sum(len(request) for session in chains for request in session)
    print(
        f"mooncake-redis sim: error: --backend redis is not implemented yet "
        f"({len(chains)} sessions, {pages} page references generated, nothing replayed); "
        "use --backend memory",
        file=sys.stderr,
    )
    return NOT_IMPLEMENTED_EXIT_CODE
