"""The maintenance commands of `mooncake-redis`: fsck and doctor."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from mooncake_redis.operations.doctor import examine
from mooncake_redis.operations.fsck import FsckReport, check
from mooncake_redis.text import plural
from mooncake_redis.urls import safe_url

from .logs import doctor_says_it
from .render import resolver_summary
from .support import (
    FINDING,
    OK,
    USAGE,
    add_json_option,
    at_least,
    fail,
    namespace_of,
    open_index,
    print_json,
    url_of,
)


def cmd_fsck(args: argparse.Namespace) -> int:

    if args.json and args.repair:
        return fail("--json is for the read-only check: run fsck --repair without it",
                    code=USAGE)
    index = open_index(args, read_only=not args.repair, must_exist=True)
    shards = args.shard or None
    total = len(shards) if shards else len(index.ctx.all_shards())
    with tqdm(total=total, unit="shard", desc="fsck",
              leave=False, disable=True if args.quiet else None) as bar:  # only on a TTY
        report = check(index.ctx, repair=args.repair, shards=shards, progress=bar.update)
    if args.json:
        print_json({"clean": report.clean, "shards": report.shards, "nodes": report.nodes,
                    "objects": report.objects, "zombies": report.zombies,
                    "counts": report.counts, "resolver": report.resolver,
                    "problems": [{"kind": kind, "detail": detail}
                                 for kind, detail in report.problems[:args.show]]})
        return OK if report.clean else FINDING
    print("\n".join(report_lines(report, args.show)))
    if report.clean:
        print("clean")
        return OK
    if not args.repair:
        return FINDING
    left = check(index.ctx, shards=shards)
    if left.clean:
        print("clean after repair")
        return OK
    print(f"{plural(len(left.problems), 'problem')} left after repair: "
          + ", ".join(f"{kind}: {count}" for kind, count in sorted(left.counts.items())))
    return FINDING


def report_lines(report: FsckReport, show: int) -> list[str]:
    lines = [f"checked {plural(report.shards, 'shard')}: {plural(report.nodes, 'node')}, "
             f"{plural(report.objects, 'object')}"]
    if report.zombies:
        lines.append(f"  {plural(report.zombies, 'processing object')} past "
                     "put_start_release_timeout (evictable, not a problem)")
    lines += [f"  {kind}: {count}" for kind, count in sorted(report.counts.items())]
    lines += [f"    {kind}: {detail}" for kind, detail in report.problems[:show]]
    if len(report.problems) > show:
        lines.append(f"    … {len(report.problems) - show} more (use --show)")
    lines += [f"  repaired {kind}: {count}" for kind, count in sorted(report.repaired.items())]
    resolver = report.resolver
    if resolver:
        lines.append(f"  resolver: {resolver_summary(resolver)}")
    return lines


def cmd_doctor(args: argparse.Namespace) -> int:

    url = url_of(args)
    with doctor_says_it():
        index = open_index(args, read_only=True)
    diagnosis = examine(index.ctx, url, safe_url(url))
    if args.json:
        print_json({"namespace": namespace_of(args), "url": safe_url(url), "ok":
                    not diagnosis.warnings, "facts": diagnosis.facts,
                    "warnings": diagnosis.warnings})
        return FINDING if diagnosis.warnings else OK
    print(f"namespace {namespace_of(args)!r} at {safe_url(url)}")
    for fact in diagnosis.facts:
        print(f"  {fact}")
    for warning in diagnosis.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if diagnosis.warnings:
        return FINDING
    print("ok: Redis persists its data, never evicts keys on its own, and the namespace "
          "holds no v1 keys")
    return OK


def shard(text: str) -> str:
    if len(text) not in (1, 2) or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shard (one lowercase hex digit, or two for 0.1's layout)")
    return text


def register(subparsers: argparse._SubParsersAction) -> None:

    fsck = subparsers.add_parser(
        "fsck", help="check every invariant of the tree and store (reads only); --repair "
                     "fixes what it can; exit 1 if problems are left")
    fsck.add_argument("--repair", action="store_true",
                      help="run the resolver and repair what can be repaired without losing "
                           "data")
    fsck.add_argument("--shard", action="append", type=shard,
                      help="only this shard (repeatable; default: all, and cycles)")
    fsck.add_argument("--show", type=at_least(0), default=20, help="problems listed (default: 20)")
    fsck.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_option(fsck)
    fsck.set_defaults(func=cmd_fsck)

    doctor = subparsers.add_parser(
        "doctor", help="warn if Redis persists nothing or evicts keys on its own, or the "
                       "namespace holds data model v1 keys (reads only); exit 1 on a warning")
    add_json_option(doctor)
    doctor.set_defaults(func=cmd_doctor)
