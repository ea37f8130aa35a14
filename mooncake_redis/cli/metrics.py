"""The `metrics` command: a Prometheus exporter for one or more namespaces (and the
exporter the worker and monitor start with --metrics-port)."""

from __future__ import annotations

import argparse
import functools
import importlib
import signal
import threading
from typing import TYPE_CHECKING, Any

from mooncake_redis.errors import ConfigurationError
from mooncake_redis.urls import redact

from .logs import configure_logging
from .support import (
    LOOPBACK,
    OK,
    fail,
    listen_address,
    namespace_name,
    namespace_of,
    open_index,
    port_number,
    url_of,
)

if TYPE_CHECKING:
    from mooncake_redis.operations.metrics import Exporter

DEFAULT_PORT = 9810


def metrics_module() -> Any:
    """mooncake_redis.operations.metrics, or a ConfigurationError that says which extra to
    install."""
    try:
        return importlib.import_module("mooncake_redis.operations.metrics")
    except ImportError as error:
        raise ConfigurationError(f"metrics need prometheus-client ({error}): pip install "
                                 "'mooncake-redis[metrics]'") from None


def exporter_for(sources: list[Any]) -> Exporter:
    return metrics_module().Exporter(sources)  # type: ignore[no-any-return]


def serve(exporter: Exporter, port: int, address: str) -> None:
    """Serve the exporter from a thread of this process; a port taken or an address this
    machine does not have is a ConfigurationError (one error line), raised before any other
    work starts."""
    try:
        exporter.serve(port, address)
    except OSError as error:
        raise ConfigurationError(f"cannot serve metrics on {address}:{port}: "
                                 f"{error.strerror or error}") from None


def cmd_metrics(args: argparse.Namespace) -> int:

    opener = metrics_module().Opener
    names = args.namespaces or [namespace_of(args)]
    # opened at the first scrape that reaches Redis: an exporter started while Redis is
    # down serves mooncake_redis_up 0 instead of exiting
    exporter = exporter_for([opener(name, functools.partial(
        lambda name: open_index(args, read_only=True, namespace=name).ctx, name))
        for name in names])
    if args.once:
        print(exporter.text(), end="")
        down = [name for name, up in exporter.collector.last_up.items() if not up]
        if down:
            return fail(f"namespace {', '.join(map(repr, down))} down or does not exist at "
                        f"{redact(url_of(args))} (mooncake_redis_up 0)", url_of(args))
        return OK
    configure_logging(args.log_level)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda number, frame: stop.set())
    serve(exporter, args.port, args.address)
    stop.wait()
    return OK


def register(subparsers: argparse._SubParsersAction) -> None:
    from .logs import LEVELS

    metrics = subparsers.add_parser(
        "metrics", help="serve Prometheus metrics of namespaces (used and capacity bytes, "
                        "objects, nodes, leaves; read from Redis at each scrape); reads only")
    metrics.add_argument("namespaces", nargs="*", metavar="NAMESPACE", type=namespace_name,
                         help="namespaces to export (default: --namespace)")
    metrics.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                         help=f"default: {DEFAULT_PORT}")
    metrics.add_argument("--address", type=listen_address, default=LOOPBACK,
                         help=f"the address to listen on (default: {LOOPBACK}, this machine "
                              "only; 0.0.0.0 for every interface)")
    metrics.add_argument("--once", action="store_true",
                         help="print one scrape's text to stdout and exit")
    metrics.add_argument("--log-level", choices=LEVELS, default="INFO", type=str.upper)
    metrics.set_defaults(func=cmd_metrics)
