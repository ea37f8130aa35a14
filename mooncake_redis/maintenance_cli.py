"""The maintenance commands of `mooncake-redis`: fsck and doctor."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from .doctor import diagnose
from .fsck import check
from .prefix import SHARD_COUNT


def cmd_fsck(args: argparse.Namespace) -> int:
    from .cli import open_index

    index = open_index(args)
    shards = args.shard or None
    with tqdm(total=len(shards) if shards else SHARD_COUNT, unit="shard", desc="fsck",
              leave=False, disable=args.quiet) as bar:
        report = check(index, repair=args.repair, shards=shards, progress=bar.update)
    print(f"checked {report.shards} shards: {report.nodes} nodes, {report.objects} objects")
    for kind, count in sorted(report.counts.items()):
        print(f"  {kind}: {count}")
    for kind, detail in report.problems[:args.show]:
        print(f"    {kind}: {detail}")
    for kind, count in sorted(report.repaired.items()):
        print(f"  repaired {kind}: {count}")
    if report.clean:
        print("clean")
        return 0
    return 0 if args.repair and not check(index, shards=shards).problems else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from .cli import open_index

    warnings = diagnose(open_index(args).client)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not warnings:
        print("ok: Redis persists its data and never evicts keys on its own")
    return 1 if warnings else 0


def shard(text: str) -> str:
    if len(text) != 2 or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard (two lowercase hex digits)")
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    fsck = subparsers.add_parser(
        "fsck", help="check every invariant of the tree and store; --repair fixes what it can")
    fsck.add_argument("--repair", action="store_true",
                      help="repair what can be repaired without losing data")
    fsck.add_argument("--shard", action="append", type=shard,
                      help="only this shard (repeatable; default: all 256 and global checks)")
    fsck.add_argument("--show", type=int, default=20, help="problems listed (default: 20)")
    fsck.add_argument("--quiet", action="store_true", help="no progress bar")
    fsck.set_defaults(func=cmd_fsck)

    doctor = subparsers.add_parser(
        "doctor", help="warn if Redis persists nothing or evicts keys on its own")
    doctor.set_defaults(func=cmd_doctor)
