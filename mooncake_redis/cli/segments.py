"""The `segments` command: list, mount, remount and unmount the segments replicas live on
(segments.py); unmount shows its sweep's progress on a terminal."""

from __future__ import annotations

import argparse
import sys

from mooncake_redis.errors import ConfigurationError
from mooncake_redis.settings import coerce
from mooncake_redis.store.segments import UnmountReport, unmount
from mooncake_redis.text import human_bytes

from .support import OK, add_json_option, at_least, fail, open_index, print_json


def capacity(text: str) -> int:
    """A size like 64GiB, 512MB or 1000000 (as capacity_bytes takes)."""
    try:
        value = coerce("capacity_bytes", text)
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not value:
        raise argparse.ArgumentTypeError("a segment's capacity must be positive")
    return int(value)


def cmd_segments(args: argparse.Namespace) -> int:
    action = args.action or "list"
    index = open_index(args, read_only=action == "list", must_exist=action == "list")
    if action == "mount":
        index.mount_segment(args.name, args.capacity)
    elif action == "remount":
        if args.name not in index.usage().segments:  # Index.remount_segment would mount it
            return fail(f"no segment {args.name!r} in namespace {index.namespace!r} "
                        "(`segments list` shows them; `segments mount` registers a new one)")
        index.remount_segment(args.name, args.capacity)
    elif action == "unmount":
        report = unmount(index.ctx, args.name, args.max_nodes,
                         on_page=_progress if sys.stderr.isatty() else None)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        if args.json:
            print_json(report)
            return OK
        print(f"{report.segment}: {'unmounted' if report.done else 'unmount not finished'}"
              f" ({report.nodes} nodes swept, {report.objects} objects lost a replica, "
              f"{report.deleted} deleted, {human_bytes(report.bytes)} freed)")
        return OK
    segments = index.usage().segments
    if args.json:
        print_json(list(segments.values()))
        return OK
    if not segments:
        print(f"no segments (capacity: capacity_bytes = {index.settings.capacity_bytes})")
    for s in segments.values():
        print(f"{s.name}  {s.state}  {human_bytes(s.used_bytes)} of "
              f"{human_bytes(s.capacity_bytes)}")
    return OK


def _progress(report: UnmountReport) -> None:
    print(f"\r{report.segment}: {report.nodes} nodes swept, {report.objects} objects lost a "
          f"replica, {report.deleted} deleted", end="", file=sys.stderr, flush=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    segments = subparsers.add_parser(
        "segments", help="list segments (reads only), or mount / remount / unmount one")
    add_json_option(segments)
    actions = segments.add_subparsers(dest="action", metavar="ACTION")
    add_json_option(actions.add_parser("list", help="each segment's state, used and "
                                                    "capacity bytes"), sub_command=True)
    for name, text in (("mount", "register a segment with its capacity"),
                       ("remount", "mount again, or change a mounted segment's capacity")):
        action = actions.add_parser(name, help=text)
        action.add_argument("name", help="segment name (e.g. host:port)")
        action.add_argument("capacity", type=capacity, help="bytes, e.g. 64GiB")
    drop = actions.add_parser(
        "unmount", help="refuse new replicas on it, drop its replicas, delete objects left "
                        "without one (resumes an unfinished unmount)")
    drop.add_argument("name")
    drop.add_argument("--max-nodes", type=at_least(1), default=None,
                      help="stop after sweeping this many nodes (run again to resume)")
    add_json_option(drop, sub_command=True)
    segments.set_defaults(func=cmd_segments)

