"""The `events` command: print a namespace's events (what was stored, removed, revoked,
evicted), or follow them as they happen; one line per event, JSON lines with --json."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mooncake_redis.errors import EventsLost
from mooncake_redis.operations.namespaces import namespace_exists
from mooncake_redis.store.events import DEFAULT_BLOCK_MS, DEFAULT_COUNT, STARTS, Item

from .support import FINDING, OK, USAGE, at_least, fail, jsonable, open_index

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class Stopped(Exception):
    """SIGTERM or SIGINT: the follower ends cleanly."""


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise Stopped (also out of a blocking read) while inside."""
    def stop(number: int, frame: Any) -> None:
        raise Stopped

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """A stop signal arriving inside waits until the block is done: an event printed is
    also noted as printed."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def line_of(item: Item, as_json: bool) -> str:
    if isinstance(item, EventsLost):
        if as_json:
            return json.dumps({"type": "lost", "shard": item.shard, "count": item.count})
        return f"lost {item}"
    if as_json:
        return json.dumps(jsonable(item), allow_nan=False)
    return " ".join([item.id, item.shard, item.type, item.key, f"size={item.size}",
                     f"parent={item.parent or '-'}",
                     *(f"{name}={value}" for name, value in
                       [("replicas", item.replicas_raw), *sorted(item.extra.items())]
                       if value is not None)])


def cmd_events(args: argparse.Namespace) -> int:
    if args.consumer and not args.group:
        return fail("--consumer names a consumer of a --group; give the group too",
                    code=USAGE)
    # a listing of a namespace that holds nothing is a typo more often than not; a
    # follower may be started before the namespace's first write: it is told, and waits
    index = open_index(args, read_only=True, must_exist=not args.follow)
    if args.follow and not namespace_exists(index.ctx):
        print(f"warning: namespace {index.namespace!r} holds nothing yet (no settings, "
              "segments or shard stats): following it all the same", file=sys.stderr)
    start = args.start or ("latest" if args.follow else "earliest")
    consumer = index.events(args.group, args.consumer, start=start, count=args.count,
                            block_ms=args.block_ms, follow=args.follow)
    lost, printed = 0, []
    try:
        with stopped_by_signals():
            for item in consumer:
                lost += isinstance(item, EventsLost)
                with signals_deferred():
                    print(line_of(item, args.json), flush=True)
                    printed = [item]  # done, though a signal may stop the loop before it
                    # asks for the next one (which is when the consumer counts it done)
    except Stopped:
        pass
    finally:
        consumer.ack(printed)
        consumer.close()
    return FINDING if lost and not args.follow else OK


def register(subparsers: argparse._SubParsersAction) -> None:
    events = subparsers.add_parser(
        "events", help="print the events kept in the shards' streams (stored, removed, "
                       "revoked, evicted), or follow them; one line each (docs/EVENTS.md)",
        description="Without --follow, print the events still kept and exit (1 if some were "
                    "lost: the streams are capped at events_max_len per shard). With "
                    "--follow, print events as they happen until Ctrl-C or SIGTERM (exit 0). "
                    "With --group, events are read through a consumer group and acked once "
                    "printed: a restart with the same --group and --consumer prints the "
                    "unacked ones again first (at least once). Reads only, except a group's "
                    "bookkeeping (XGROUP CREATE, XACK).")
    events.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events until interrupted")
    events.add_argument("--group", help="read through this consumer group (created if "
                                        "missing, at --start)")
    events.add_argument("--consumer", help="this reader's name in the group (default: the "
                                           "host name)")
    events.add_argument("--start", choices=STARTS,
                        help="where a new reader or group begins: every event kept "
                             "(earliest; the default without --follow) or new ones only "
                             "(latest; the default with --follow)")
    events.add_argument("--count", type=at_least(1), default=DEFAULT_COUNT,
                        help=f"events read per shard per round trip (default: {DEFAULT_COUNT})")
    events.add_argument("--block-ms", type=at_least(1), default=DEFAULT_BLOCK_MS,
                        help=f"how long one read waits for news (default: {DEFAULT_BLOCK_MS})")
    events.add_argument("--json", action="store_true",
                        help="print one JSON object per line (JSON lines) instead of text")
    events.set_defaults(func=cmd_events)
