"""The eviction commands of `mooncake-redis`: evict, worker, monitor."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
from typing import Any

from tqdm import tqdm

from mooncake_redis.capacity.eviction import (
    NO_CAPACITY,
    ROUND_LIMIT,
    TARGET_REACHED,
    EvictionReport,
    Evictor,
)
from mooncake_redis.index import Index
from mooncake_redis.operations.doctor import examine
from mooncake_redis.settings import ENV_PREFIX, ENV_URL
from mooncake_redis.text import human_bytes, plural
from mooncake_redis.urls import safe_url

from .logs import LEVELS, configure_logging, doctor_says_it
from .render import resolver_summary
from .support import (
    FINDING,
    LOOPBACK,
    OK,
    at_least,
    listen_address,
    namespace_of,
    non_negative,
    open_index,
    port_number,
    url_of,
)

log = logging.getLogger(__name__)

UNTIL_DONE = sys.maxsize
"""evict's default round limit: in the foreground it goes on until the target (a worker's
job stops at max_rounds_per_job and enqueues a follow-up instead)."""


def ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a ratio in [0, 1]")
    return value


def cmd_evict(args: argparse.Namespace) -> int:

    index = open_index(args, read_only=True, must_exist=True)  # needs no setting filled in
    with tqdm(total=None, unit="B", unit_scale=True, desc="evicting", leave=False,
              disable=True if args.quiet else None) as bar:  # None: only on a terminal
        def on_round(report: EvictionReport) -> None:
            bar.total = max(report.start_used_bytes - report.target_bytes, report.bytes)
            bar.update(report.bytes - bar.n)
            bar.set_postfix(rounds=report.rounds, leaves=report.leaves)

        report = Evictor(index.ctx).run(args.target, max_rounds=args.rounds or UNTIL_DONE,
                                        on_round=on_round)
    print("\n".join(report_lines(report)))
    if report.stopped == ROUND_LIMIT:
        print(f"error: stopped at --rounds {args.rounds} above the target; run evict again "
              "or raise --rounds (without it evict goes on until the target)", file=sys.stderr)
    elif report.stopped not in (TARGET_REACHED, NO_CAPACITY):
        print(f"error: stopped above the target: {report.stopped} (leased, pinned or "
              "processing objects stay; `mooncake-redis stats` shows the usage)",
              file=sys.stderr)
    return OK if report.stopped in (TARGET_REACHED, NO_CAPACITY) else FINDING


def report_lines(report: EvictionReport) -> list[str]:
    resolver = report.resolver
    return [
        f"stopped:          {report.stopped}",
        f"rounds:           {report.rounds}",
        f"leaves evicted:   {report.leaves}",
        f"interior nodes:   {report.interior_nodes} (path-breaking eviction: their objects "
        "went, they stay as shells)",
        f"objects evicted:  {report.objects}",
        f"bytes evicted:    {report.bytes} ({human_bytes(report.bytes)})",
        f"used:             {human_bytes(report.start_used_bytes)} -> "
        f"{human_bytes(report.used_bytes)} (target {human_bytes(report.target_bytes)})",
        f"resolver:         {resolver_summary(resolver)}",
        f"time:             {report.seconds:.3f} s",
    ]


def open_checked_index(args: argparse.Namespace, queue_url: str) -> Index:
    """Long-running processes open the namespace as its clients do (settings not stored yet
    are filled in from the environment), and warn at start if Redis would lose index state."""
    with doctor_says_it():
        index = open_index(args, queue_url=queue_url)
    for warning in examine(index.ctx, url_of(args), safe_url(url_of(args))).warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"namespace {namespace_of(args)!r} at {safe_url(url_of(args))}", file=sys.stderr)
    return index


def queue_url_of(args: argparse.Namespace) -> str:
    """The eviction queue of `worker` and `monitor`: $MOONCAKE_REDIS_QUEUE_URL, else the
    index's own Redis (rq's convention: its keys, all under `rq:`, sit beside the data),
    checked and said on stderr before any work."""
    from mooncake_redis.workers.jobs import ENV_QUEUE_URL, eviction_queue  # rq: only here

    queue_url = os.environ.get(ENV_QUEUE_URL) or url_of(args)
    eviction_queue(queue_url)  # a queue that cannot serve: said now, before any work
    print(f"eviction queue {safe_url(queue_url)}"
          + (f" (the index's Redis: no ${ENV_QUEUE_URL})" if queue_url == url_of(args) else ""),
          file=sys.stderr)
    return queue_url


def cmd_worker(args: argparse.Namespace) -> int:
    from mooncake_redis.workers.worker import run_worker

    configure_logging(args.log_level)
    queue_url = queue_url_of(args)
    index = open_checked_index(args, queue_url)
    # Jobs carry only the namespace and read the index and queue URLs from the environment
    # of the process that runs them (this one, or its work horses): a job's follow-up goes
    # to the queue it came from.
    os.environ[ENV_URL] = url_of(args)
    os.environ[ENV_PREFIX + "QUEUE_URL"] = queue_url
    if args.metrics_port is not None:
        exporter = start_metrics(index, args)
        exporter.count_this_process()
    run_worker(queue_url, burst=args.burst, logging_level=args.log_level,
               in_process=args.metrics_port is not None)
    return OK


def start_metrics(index: Index, args: argparse.Namespace) -> Any:
    """The metrics exporter, serving from a thread of this process (cli/metrics.py) on
    --metrics-address and --metrics-port."""
    from .metrics import exporter_for, serve

    exporter = exporter_for([index.ctx])
    serve(exporter, args.metrics_port, args.metrics_address)
    return exporter


def cmd_monitor(args: argparse.Namespace) -> int:
    from mooncake_redis.workers.monitor import watch

    configure_logging(args.log_level)
    index = open_checked_index(args, queue_url_of(args))
    stop = threading.Event()
    stopping = (signal.SIGTERM, signal.SIGINT)  # docker stop, Ctrl-C: finish the check
    previous = [signal.signal(number, lambda number, frame: stop.set()) for number in stopping]
    on_enqueued = None
    if args.metrics_port is not None:
        exporter = start_metrics(index, args)
        exporter.count_this_process()  # failovers seen and healed, among others
        on_enqueued = functools.partial(exporter.observe_request, index.namespace)
    log.info("monitor started: namespace %r, a check every %g s", index.namespace,
             args.interval)
    try:
        enqueued = watch(index.ctx, args.interval, args.iterations, stop, on_enqueued)
    finally:
        for number, handler in zip(stopping, previous):
            signal.signal(number, handler)
    log.info("monitor stopped: %s enqueued", plural(enqueued, "eviction job"))
    print(f"{plural(enqueued, 'eviction job')} enqueued")
    return OK


def add_process_options(parser: argparse.ArgumentParser) -> None:
    """The long-running commands' options: logging and the metrics they serve."""
    parser.add_argument("--log-level", choices=LEVELS, default="INFO", type=str.upper,
                        help="log lines on stderr, each written out at once (default: INFO: "
                             "one line per eviction job and per enqueued job)")
    parser.add_argument("--metrics-port", type=port_number, default=None,
                        help="serve Prometheus metrics on this port (needs the metrics "
                             "extra; a worker then runs jobs in its own process, unforked, "
                             "so it can count them)")
    parser.add_argument("--metrics-address", type=listen_address, default=LOOPBACK,
                        help=f"the address the metrics listen on (default: {LOOPBACK}, this "
                             "machine only; 0.0.0.0 for every interface)")


def register(subparsers: argparse._SubParsersAction) -> None:

    evict = subparsers.add_parser(
        "evict", help="run one eviction job in the foreground (like Index.evict) and report "
                      "it; exit 1 if it stopped above its target")
    evict.add_argument("--target", type=ratio, default=None,
                       help="evict down to this fraction of capacity (0 = everything "
                            "evictable; default: high_watermark - eviction_ratio)")
    evict.add_argument("--rounds", type=at_least(1), default=None,
                       help="round limit (default: none, go on until the target is reached "
                            "or nothing is evictable; a worker's job stops at "
                            "max_rounds_per_job and enqueues a follow-up)")
    evict.add_argument("--quiet", action="store_true", help="no progress bar")
    evict.set_defaults(func=cmd_evict)

    worker = subparsers.add_parser(
        "worker", help="run an RQ worker for eviction jobs (queue: $MOONCAKE_REDIS_QUEUE_URL, "
                       "else the index's Redis)")
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    add_process_options(worker)
    worker.set_defaults(func=cmd_worker)

    monitor = subparsers.add_parser(
        "monitor", help="keep the shards' admission limits fresh, enqueue an eviction job "
                        "whenever usage is above the high watermark, and repair the links "
                        "a Redis failover broke "
                        "(queue: $MOONCAKE_REDIS_QUEUE_URL, else the index's Redis)")
    monitor.add_argument("--interval", type=non_negative, default=1.0,
                         help="seconds between checks (default: 1)")
    monitor.add_argument("--iterations", type=at_least(1), default=None,
                         help="stop after this many checks (default: run forever; "
                              "SIGTERM or Ctrl-C stops it cleanly)")
    add_process_options(monitor)
    monitor.set_defaults(func=cmd_monitor)
