"""The eviction commands of `mooncake-redis`: evict, worker, monitor."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from .doctor import diagnose
from .eviction import EvictionReport, Evictor
from .index import Index
from .render import human_bytes


def ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a ratio in [0, 1]")
    return value


def cmd_evict(args: argparse.Namespace) -> int:
    from .cli import open_index

    index = open_index(args)
    evictor = Evictor(index)
    with tqdm(total=None, unit="B", unit_scale=True, desc="evicting", leave=False,
              disable=args.quiet) as bar:
        def on_round(report: EvictionReport) -> None:
            bar.total = max(report.start_used_bytes - report.target_bytes, report.bytes)
            bar.update(report.bytes - bar.n)
            bar.set_postfix(rounds=report.rounds, leaves=report.leaves)

        report = evictor.run(args.target, max_rounds=args.rounds, on_round=on_round)
    print(f"stopped:          {report.stopped}")
    print(f"rounds:           {report.rounds}")
    print(f"leaves evicted:   {report.leaves}")
    print(f"objects evicted:  {report.objects} "
          f"({report.fallback_objects} by lease-ordered fallback)")
    print(f"bytes evicted:    {report.bytes} ({human_bytes(report.bytes)})")
    print(f"used:             {human_bytes(report.start_used_bytes)} -> "
          f"{human_bytes(report.used_bytes)} (target {human_bytes(report.target_bytes)})")
    print(f"time:             {report.seconds:.3f} s")
    return 0


def open_checked_index(args: argparse.Namespace) -> Index:
    """Long-running processes warn at start if Redis would lose index state."""
    from .cli import open_index

    index = open_index(args)
    for warning in diagnose(index.client):
        print(f"warning: {warning}", file=sys.stderr)
    return index


def cmd_worker(args: argparse.Namespace) -> int:
    from mooncake_redis.workers.worker import run_worker

    run_worker(open_checked_index(args).config.queue_url, burst=args.burst)
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    from mooncake_redis.workers.monitor import watch

    watch(open_checked_index(args), args.interval, args.iterations)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    evict = subparsers.add_parser(
        "evict", help="run one eviction job in the foreground (like Index.evict) and report it")
    evict.add_argument("--target", type=ratio, default=None,
                       help="evict down to this fraction of capacity (0 = everything "
                            "evictable; default: high_watermark - eviction_ratio)")
    evict.add_argument("--rounds", type=int, default=None,
                       help="round limit (default: the namespace's max_rounds_per_job)")
    evict.add_argument("--quiet", action="store_true", help="no progress bar")
    evict.set_defaults(func=cmd_evict)

    worker = subparsers.add_parser(
        "worker", help="run an RQ worker for eviction jobs (queue: the namespace's queue_url)")
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.set_defaults(func=cmd_worker)

    monitor = subparsers.add_parser(
        "monitor", help="enqueue an eviction job whenever usage is above the high watermark")
    monitor.add_argument("--interval", type=float, default=1.0, help="seconds between checks "
                                                                     "(default: 1)")
    monitor.add_argument("--iterations", type=int, default=None,
                         help="stop after this many checks (default: run forever)")
    monitor.set_defaults(func=cmd_monitor)
