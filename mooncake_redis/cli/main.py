"""The `mooncake-redis` command: demo, stats, inspect, tree, roots, namespaces (and the
command groups of the modules beside it: config, eviction, events, ingest, maintenance,
metrics, segments, and sim.cli).

Conventions, as rq, celery and redis-cli follow them: the global options (--url,
--namespace) are accepted before or after the command; `--version`; `python -m
mooncake_redis`. Exit codes: 0 ok; 1 a finding or a failure (not found, problems left,
warnings, Redis unreachable, a refused change), printed as one `error: ...` line with every
password masked; 2 a usage error (argparse's, or a value the command line cannot use)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence

import redis
from redis.exceptions import RedisClusterException

from mooncake_redis import __version__
from mooncake_redis.errors import AmbiguousHash, MooncakeRedisError, NoSuchHash
from mooncake_redis.index import Index
from mooncake_redis.prefix import PREFIX_HASH_LENGTH
from mooncake_redis.settings import (
    DEFAULT_NAMESPACE,
    DEFAULT_URL,
    ENV_NAMESPACE,
    ENV_PREFIX,
    ENV_URL,
)
from mooncake_redis.text import human_bytes, plural
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.urls import password_of, safe_url
from mooncake_redis.values import parent_of

from .render import Views
from .support import (
    OK,
    add_json_option,
    at_least,
    fail,
    jsonable,
    namespace_name,
    open_index,
    print_json,
    reader_gone,
    redis_url,
    url_of,
)

DEMO_NAMESPACE = "demo"
MIN_HASH_PREFIX = 8
"""Hex digits a shortened prefix hash needs (tree prints 12)."""
IN_PROCESS_COMMANDS = ("demo", "sim")
"""Commands meant to run on the in-process store when no URL is given: the others warn."""


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    index = open_index(args, read_only=True, namespace=args.namespace or DEMO_NAMESPACE)
    if args.reset:
        left = demo.reset(index)
        if left:
            return fail(f"namespace {index.namespace!r} still holds {plural(left, 'node')} "
                        "after --reset: is another client writing to it?")
    elif not demo.is_fresh(index):
        usage = index.usage()
        return fail(f"namespace {index.namespace!r} at {safe_url(url_of(args))} is in use "
                    f"({plural(usage.objects, 'object')} in {plural(usage.nodes, 'node')}, "
                    "stored settings): the demo writes only into a fresh one. Pass --namespace "
                    "NEW, or --reset to delete its objects first")
    return demo.run(index, args.conversations, args.turns, args.seed, args.depth,
                    ctx=index.ctx)


def cmd_stats(args: argparse.Namespace) -> int:
    from .config import settings_lines

    index = open_index(args, read_only=True, must_exist=True)
    usage = index.usage()
    running = bool(index.client.exists(index.ctx.schema.eviction_lock))
    if args.json:
        from mooncake_redis.capacity.admission import read_shards

        from .config import settings_document

        print_json({"namespace": index.namespace, "url": safe_url(url_of(args)),
                    "usage": {**jsonable(usage), "ratio": usage.ratio},
                    "shard_limits": {shard.shard: shard.limit for shard in read_shards(index.ctx)
                                     if shard.limit is not None},
                    "eviction_running": running, **settings_document(index)})
        return OK
    capacity = human_bytes(usage.capacity_bytes) if usage.capacity_bytes else "unlimited"
    print(f"namespace {index.namespace!r} at {safe_url(url_of(args))}")
    print(f"usage      {plural(usage.objects, 'object')} in {plural(usage.nodes, 'node')}, "
          f"{human_bytes(usage.used_bytes)} used of {capacity}"
          + (f" ({usage.ratio:.1%})" if usage.capacity_bytes else ""))
    print(f"admission  {admission_limits(index)}")
    print(f"eviction   {'a job is running' if running else 'no job running'}")
    print("\n".join(settings_lines(index)))
    return OK


def admission_limits(index: Index) -> str:
    """What put_start is checked against: per-shard byte limits (admission.py)."""
    from mooncake_redis.capacity.admission import default_shard_limit, read_shards

    capacity = index.settings.capacity_bytes
    limits = [shard.limit for shard in read_shards(index.ctx) if shard.limit is not None]
    if not capacity:
        return "no limit (capacity unlimited)"
    if not limits:
        share = default_shard_limit(capacity, index.settings.shard_count)
        return (f"{human_bytes(share)} per shard, an even share of "
                "capacity (no keeper has rebalanced yet)")
    return (f"per-shard limits {human_bytes(min(limits))} .. {human_bytes(max(limits))} (set "
            "by refused puts borrowing, and by the keeper: eviction, monitor, capacity change)")


HASH_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_HASH_PREFIX},{PREFIX_HASH_LENGTH - 1}}}")
SHORT_HASH_PREFIX = re.compile(rf"[0-9a-f]{{1,{MIN_HASH_PREFIX - 1}}}")


def short_prefix_hint(text: str) -> str:
    """For a name that is too short to be taken as a hash's beginning: what to give."""
    start = text.removesuffix("…")
    if not SHORT_HASH_PREFIX.fullmatch(start):
        return ""
    return (f"; a shortened hash needs its first {MIN_HASH_PREFIX} or more hex digits "
            f"({start!r} has {len(start)})")


def full_hash(index: Index, text: str) -> str:
    """The hash of the one node whose hash begins with text, when text is 8 to 63 lowercase
    hex digits (a trailing … as tree prints it is dropped); text itself otherwise. Found by
    SCAN MATCH in the prefix's shard, stopped at the second match; no match raises
    NoSuchHash, two AmbiguousHash (both exit 1)."""
    start = text.removesuffix("…")
    if not HASH_PREFIX.fullmatch(start):
        return text
    found: list[str] = []
    shard = index.ctx.shard(start.ljust(64, "0"))  # the first byte decides the shard
    for page in scan_node_keys(index.ctx, shard, start):
        found += [index.ctx.schema.hash_of_node_key(key) for key in page]
        if len(found) > 1:
            raise AmbiguousHash(f"hash prefix {start!r} begins more than one node's hash "
                                f"({found[0]}, {found[1]}, …): give more digits")
    if not found:
        raise NoSuchHash(f"no node in namespace {index.namespace!r} has a hash beginning "
                         f"with {start!r}")
    return found[0]


def cmd_inspect(args: argparse.Namespace) -> int:
    index = open_index(args, read_only=True, must_exist=True)
    if index.object_info(args.target) is None:  # an object key is taken as it is
        args.target = full_hash(index, args.target)
    views = Views(index)
    now_ms = index.ctx.redis_time_ms()
    node = index.get_node(args.target) if index.ctx.names_a_node(args.target) else None
    info = index.object_info(args.target)
    if args.json and (node or info):
        print_json({"node": node, "object": info})
    elif node is not None:
        print("\n".join(views.node(node, now_ms)))
    if info is not None and not args.json:
        print("\n".join(views.object(info, now_ms,
                                     index.settings.put_start_release_timeout_ms)))
    if node is None and info is None:
        return fail(f"no node or object {args.target!r} in namespace {index.namespace!r} "
                    f"at {safe_url(url_of(args))}{short_prefix_hint(args.target)}")
    return OK


def cmd_tree(args: argparse.Namespace) -> int:
    index = open_index(args, read_only=True, must_exist=True)
    args.prefix_hash = full_hash(index, args.prefix_hash)
    if index.get_node(args.prefix_hash) is None:
        return fail(f"no node {args.prefix_hash!r} in namespace {index.namespace!r} at "
                    f"{safe_url(url_of(args))}{short_prefix_hint(args.prefix_hash)}")
    views = Views(index)
    if not args.json:
        print("\n".join(views.tree(args.prefix_hash, args.depth, args.max_nodes)))
        return OK
    steps, stopped = views.walk(args.prefix_hash, args.depth, args.max_nodes)
    print_json({"root": args.prefix_hash, "stopped_at_max_nodes": stopped is not None,
                "nodes": [{"prefix_hash": step.prefix_hash, "tree_parent": step.parent,
                           "depth": step.depth, "hidden_children": step.hidden,
                           "node": step.node} for step in steps]})
    return OK


def find_roots(index: Index, limit: int) -> tuple[list[str], bool]:
    """Up to limit hashes of nodes without a parent, in SCAN order (a SCAN over node keys,
    then each page's `p` fields in one batch), and whether more were left unlisted."""
    roots: list[str] = []
    for page in scan_node_keys(index.ctx):
        batch = index.ctx.batch()
        for key in page:
            batch.command("HGET", key, "p")
        for key, parent in zip(page, batch.execute()):
            if parent_of(parent) is None:
                if len(roots) == limit:
                    return roots, True
                roots.append(index.ctx.schema.hash_of_node_key(key))
    return roots, False


def cmd_roots(args: argparse.Namespace) -> int:
    index = open_index(args, read_only=True, must_exist=True)
    roots, more = find_roots(index, args.limit)
    if args.json:
        print_json({"roots": roots, "more": more})
        return OK
    print("\n".join(roots))
    if more:
        print(f"… stopped at {plural(args.limit, 'root')}; use --limit", file=sys.stderr)
    return OK


def cmd_namespaces(args: argparse.Namespace) -> int:
    from mooncake_redis.connection import connect
    from mooncake_redis.operations.namespaces import namespace_usages

    found, refused = namespace_usages(connect(url_of(args)))
    if refused:
        print(f"note: {plural(len(refused), 'namespace')} this user may not read (ACL): "
              + ", ".join(refused), file=sys.stderr)
    if args.json:
        print_json({"namespaces": [{"namespace": item.namespace, **jsonable(item.usage),
                                    "ratio": item.usage.ratio} for item in found],
                    "not_readable": refused})
        return OK
    if not found:
        print(f"no namespace{' readable' if refused else ''} at {safe_url(url_of(args))}",
              file=sys.stderr)
        return OK
    width = max(len("NAMESPACE"), *(len(item.namespace) for item in found))
    print(f"{'NAMESPACE':<{width}}  {'OBJECTS':>10}  {'NODES':>10}  {'USED':>10}  "
          f"{'CAPACITY':>10}  {'USED%':>6}")
    for item in found:
        usage = item.usage
        capacity = human_bytes(usage.capacity_bytes) if usage.capacity_bytes else "unlimited"
        ratio = f"{usage.ratio:.1%}" if usage.capacity_bytes else "-"
        print(f"{item.namespace:<{width}}  {usage.objects:>10}  {usage.nodes:>10}  "
              f"{human_bytes(usage.used_bytes):>10}  {capacity:>10}  {ratio:>6}")
    return OK


def add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """--url and --namespace, on the top parser and on every command's: a command's copy
    has no default, so it overrides only when given after the command."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--url", type=redis_url, default=default,
                        help="redis://[user:password@]host:port/db, rediss://…, unix://…, "
                             "redis+cluster://host:port[,host:port…], or memory:// for the "
                             f"in-process store (default: ${ENV_URL} or {DEFAULT_URL})")
    parser.add_argument("--namespace", type=namespace_name, default=default,
                        help=f"key namespace (default: ${ENV_NAMESPACE} or {DEFAULT_NAMESPACE}; "
                             f"the demo's: {DEMO_NAMESPACE})")


def command_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, sub-commands (config get/set) included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # aliases once
                found += [command, *command_parsers(command)]
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mooncake-redis",
        description="Redis-backed prefix index and metadata store for LLM KV-cache objects.",
        epilog=f"Namespace settings not stored yet can be given as {ENV_PREFIX}<SETTING> "
               f"environment variables (e.g. {ENV_PREFIX}CAPACITY_BYTES=64GiB); stored ones "
               "change only with `config set`. --url and --namespace go before or after the "
               "command. Exit codes: 0 ok, 1 a finding or a failure, 2 a usage error.",
    )
    parser.add_argument("-V", "--version", action="version",
                        version=f"%(prog)s {__version__}")
    add_global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="serve multi-turn chats page by page, then show stats, a subtree, "
                     "prefix queries, a node's raw data, leaf-first eviction and fsck")
    demo.add_argument("--conversations", type=at_least(1), default=4, help="default: 4")
    demo.add_argument("--turns", type=at_least(1), default=5, help="default: 5")
    demo.add_argument("--seed", type=int, default=7, help="default: 7")
    demo.add_argument("--depth", type=at_least(0), default=10,
                      help="tree depth shown (default: 10)")
    demo.add_argument("--reset", action="store_true",
                      help="delete every object of the namespace first (the demo refuses a "
                           "namespace in use otherwise)")
    demo.set_defaults(func=cmd_demo)

    stats = commands.add_parser("stats", help="usage, admission, settings (reads only)")
    add_json_option(stats)
    stats.set_defaults(func=cmd_stats)

    inspect = commands.add_parser(
        "inspect", help="a node (by prefix hash) or an object (by key), with the redis-cli "
                        "commands that show its raw data (reads only)")
    inspect.add_argument("target", help="a prefix hash (or its first 8+ hex digits, if no "
                                        "other node's hash begins with them) or an object key")
    add_json_option(inspect)
    inspect.set_defaults(func=cmd_inspect)

    tree = commands.add_parser("tree", help="draw the subtree under a prefix hash (reads only)")
    tree.add_argument("prefix_hash", help="a prefix hash, or its first 8+ hex digits")
    tree.add_argument("--depth", type=at_least(0), default=8, help="default: 8")
    tree.add_argument("--max-nodes", type=at_least(1), default=200, help="default: 200")
    add_json_option(tree)
    tree.set_defaults(func=cmd_tree)

    roots = commands.add_parser(
        "roots", help="list the hashes of nodes without a parent, in SCAN order (reads only)")
    roots.add_argument("--limit", type=at_least(1), default=100,
                       help="roots listed at most (default: 100)")
    add_json_option(roots)
    roots.set_defaults(func=cmd_roots)

    namespaces = commands.add_parser(
        "namespaces", help="list the namespaces in the Redis at --url, with their objects, "
                           "nodes, used and capacity bytes (reads only)")
    add_json_option(namespaces)
    namespaces.set_defaults(func=cmd_namespaces)

    for register in extra_commands():
        register(commands)
    for command in command_parsers(parser):
        known = {option for action in command._actions for option in action.option_strings}
        if not known & {"--url", "--namespace"}:
            add_global_options(command, top=False)
    return parser


def extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands that live beside the modules they drive."""
    from .config import register as register_config
    from .events import register as register_events
    from .eviction import register as register_eviction
    from .ingest import register as register_ingest
    from .maintenance import register as register_maintenance
    from .metrics import register as register_metrics
    from .segments import register as register_segments

    return [register_config, register_eviction, register_events, register_ingest,
            register_maintenance, register_metrics, register_segments, register_sim]


def register_sim(subparsers: argparse._SubParsersAction) -> None:
    """The simulator's command; if it cannot be imported, a stand-in that says why, so the
    other commands still work."""
    try:
        from mooncake_redis.sim.cli import register
    except ImportError as error:
        reason = f"the sim command cannot load ({error})"
        stand_in = subparsers.add_parser("sim", help=f"(unavailable: {reason})", add_help=False)
        stand_in.add_argument("ignored", nargs=argparse.REMAINDER)
        stand_in.set_defaults(func=lambda args: fail(reason))
        return
    register(subparsers)


def warn_if_in_process(args: argparse.Namespace) -> None:
    """A forgotten URL must not look like an empty store: say which store is used."""
    if args.command in IN_PROCESS_COMMANDS or args.url or os.environ.get(ENV_URL):
        return
    print(f"warning: no --url and no ${ENV_URL}: `{args.command}` runs on the in-process "
          f"store {DEFAULT_URL}, which is empty and gone when the command exits; pass --url "
          "redis://host:port/db for a Redis server", file=sys.stderr)


def missing_for(args: argparse.Namespace) -> str | None:
    """What an optional dependency the command needs lacks, found before any work starts."""
    if args.command == "sim" and getattr(args, "plot", False):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return ("sim --plot needs matplotlib, which is not installed: pip install "
                    "'mooncake-redis[plot]', or run without --plot")
    return None


def authentication_failure(url: str) -> str:
    """What to do when Redis refused to let the client in (redis-py says only what the
    server answered HELLO or AUTH)."""
    if password_of(url) is None:
        return (f"Redis at {safe_url(url)} needs a password: put it in the URL, "
                "redis://:PASSWORD@host:port/db (redis://USER:PASSWORD@… for an ACL user)")
    return (f"Redis at {safe_url(url)} refused the user and password of the URL (a wrong "
            "password, an unknown user or a disabled one)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    url = url_of(args)
    queue_url = os.environ.get(ENV_PREFIX + "QUEUE_URL", "")
    missing = missing_for(args)
    if missing:
        return fail(missing)
    warn_if_in_process(args)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a reader gone is found here, not at exit
        return code
    except BrokenPipeError:
        return reader_gone()
    except MooncakeRedisError as error:
        return fail(str(error), url, queue_url)
    except redis.AuthenticationError:
        return fail(authentication_failure(url), url, queue_url)
    except (redis.RedisError, RedisClusterException) as error:
        return fail(f"Redis at {safe_url(url)}: {error}", url, queue_url)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
