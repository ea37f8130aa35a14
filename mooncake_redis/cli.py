"""The `mooncake-redis` command: demo, inspect, tree, stats (and the commands that live
beside the modules they drive: eviction_cli, maintenance_cli, sim.cli)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import redis

from .config import DEFAULT_URL, ENV_PREFIX, ENV_URL
from .connection import redact
from .errors import MooncakeRedisError
from .index import Index
from .render import describe_node, describe_object, draw_tree, human_bytes, short

Command = Callable[[argparse.Namespace], int]


def open_index(args: argparse.Namespace, **config: object) -> Index:
    return Index.from_url(args.url, namespace=args.namespace, **config)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import serve

    index = open_index(args)
    print(f"Serving {args.conversations} conversations x {args.turns} turns "
          f"on {redact(args.url)} (namespace {args.namespace!r})…")
    report = serve(index, args.conversations, args.turns, args.seed)
    print(f"\n{report.requests} requests, {report.pages_requested} pages asked for: "
          f"{report.pages_reused} reused through match_prefix "
          f"({report.pages_reused / max(report.pages_requested, 1):.0%}), "
          f"{report.pages_stored} stored.\n")
    print_stats(index)
    root = report.chains[0][0]
    print(f"\nThe tree under the first system-prompt page (depth {args.depth}):")
    print("\n".join(draw_tree(index, root, max_depth=args.depth, max_nodes=60)))
    last_chain = report.chains[-1]
    page = last_chain[len(last_chain) // 2]
    print(f"\nPrefix query: get_keys_by_prefix({short(page)}) -> one ZRANGE, whatever the size:")
    for key in index.get_keys_by_prefix(page):
        print(f"  {key}")
    print(f"match_prefix(last request's {len(last_chain)} pages) -> "
          f"{index.match_prefix(last_chain)}")
    print("\nInspect any node by hash, with the redis-cli commands that show its raw data:")
    print("\n".join(describe_node(index, index.get_node(page))))  # type: ignore[arg-type]
    print_eviction(index, report.chains)
    return 0


def print_eviction(index: Index, chains: list[list[str]]) -> None:
    from .demo import squeeze_and_evict
    from .fsck import check

    print("\nEviction: capacity shrinks so usage is above the high watermark "
          f"({index.config.high_watermark:.0%}); a job evicts leaves first, cascading upward.")
    before, after, summary = squeeze_and_evict(index)
    print(f"  before: {before.objects} objects, {before.nodes} nodes, "
          f"{before.ratio:.1%} of capacity")
    print(f"  after:  {after.objects} objects, {after.nodes} nodes, {after.ratio:.1%} of capacity "
          f"({summary})")
    usable = [index.match_prefix(chain) for chain in chains]
    print(f"  match_prefix of the first request: {usable[0]}/{len(chains[0])} pages; "
          f"of the last: {usable[-1]}/{len(chains[-1])} (leaves went first: the tails of "
          "conversations; the shared prefixes they hang from stay usable)")
    report = check(index)
    print(f"  tree check: {'clean' if report.clean else report.counts} "
          f"({report.nodes} nodes: every live page's parent is alive, no orphans)")


def print_stats(index: Index) -> None:
    usage = index.usage()
    capacity = human_bytes(usage.capacity_bytes) if usage.capacity_bytes else "unlimited"
    print(f"objects {usage.objects}, nodes {usage.nodes}, used {human_bytes(usage.used_bytes)} "
          f"of {capacity}" + (f" ({usage.ratio:.1%})" if usage.capacity_bytes else ""))


def cmd_stats(args: argparse.Namespace) -> int:
    index = open_index(args)
    print_stats(index)
    config = index.config
    print(f"high watermark {config.high_watermark:.0%}, eviction target "
          f"{config.eviction_target_ratio:.0%}, lease {config.lease_ttl_ms} ms, "
          f"radix tree {'on' if config.enable_radix_tree else 'off'}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    index = open_index(args)
    found = False
    node = index.get_node(args.target)
    if node is not None:
        print("\n".join(describe_node(index, node)))
        found = True
    info = index.object_info(args.target)
    if info is not None:
        print("\n".join(describe_object(index, info)))
        found = True
    if not found:
        print(f"no node or object {args.target!r} in namespace {args.namespace!r} "
              f"at {redact(args.url)}", file=sys.stderr)
        return 1
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    index = open_index(args)
    if index.get_node(args.prefix_hash) is None:
        print(f"no node {args.prefix_hash!r} in namespace {args.namespace!r}", file=sys.stderr)
        return 1
    print("\n".join(draw_tree(index, args.prefix_hash, args.depth, args.max_nodes)))
    return 0


def positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mooncake-redis",
        description="Redis-backed prefix index and metadata store for LLM KV-cache objects.",
        epilog=f"Options of a namespace can also be set as {ENV_PREFIX}<OPTION> "
               "environment variables (e.g. MOONCAKE_REDIS_CAPACITY_BYTES).",
    )
    parser.add_argument("--url", default=os.environ.get(ENV_URL, DEFAULT_URL),
                        help="redis://host:port/db, rediss://…, or memory:// for the in-process "
                             f"store (default: ${ENV_URL} or {DEFAULT_URL})")
    parser.add_argument("--namespace", default="mc", help="key namespace (default: mc)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="build a tree of SGLang-style pages from multi-turn "
                                            "chats and show stats, a subtree and prefix queries")
    demo.add_argument("--conversations", type=positive_int, default=4, help="default: 4")
    demo.add_argument("--turns", type=positive_int, default=5, help="default: 5")
    demo.add_argument("--seed", type=int, default=7, help="default: 7")
    demo.add_argument("--depth", type=positive_int, default=10,
                      help="tree depth shown (default: 10)")
    demo.set_defaults(func=cmd_demo)

    stats = commands.add_parser("stats", help="usage, counts and configuration")
    stats.set_defaults(func=cmd_stats)

    inspect = commands.add_parser("inspect", help="show a node (by prefix hash) or an object "
                                                  "(by key), with the redis-cli commands for it")
    inspect.add_argument("target", help="a prefix hash or an object key")
    inspect.set_defaults(func=cmd_inspect)

    tree = commands.add_parser("tree", help="draw the subtree under a prefix hash")
    tree.add_argument("prefix_hash")
    tree.add_argument("--depth", type=positive_int, default=8, help="default: 8")
    tree.add_argument("--max-nodes", type=positive_int, default=200, help="default: 200")
    tree.set_defaults(func=cmd_tree)

    for register in extra_commands():
        register(commands)
    return parser


def extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands that live beside the modules they drive."""
    from .eviction_cli import register as register_eviction
    from .maintenance_cli import register as register_maintenance
    from .sim.cli import register as register_sim

    return [register_eviction, register_maintenance, register_sim]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except MooncakeRedisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except redis.RedisError as error:
        print(f"error: Redis at {redact(args.url)}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
