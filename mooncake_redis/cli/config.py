"""The `config` command: show a namespace's settings, and change or reset them through
Index.set_config / reset_config (configuration.py has the rules; nothing is written here)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from mooncake_redis.errors import ConfigurationError
from mooncake_redis.index import Index
from mooncake_redis.settings import SETTING_NAMES, Settings, coerce
from mooncake_redis.text import human_bytes

from .support import OK, USAGE, add_json_option, fail, open_index, print_json


def read_settings(index: Index, names: list[str] | None = None
                  ) -> tuple[list[tuple[str, object, bool]], dict[str, str]]:
    """(name, value, stored) of each setting as every client of the namespace reads it
    (all, or those named), and the stored names this version does not know."""
    stored = index.client.hgetall(index.ctx.schema.settings)
    settings = index.ctx.reload_settings()
    known = [(field.name, getattr(settings, field.name), field.name in stored)
             for field in fields(Settings) if not names or field.name in names]
    unknown = {name: stored[name] for name in sorted(set(stored) - set(SETTING_NAMES))
               if not names or name in names}
    return known, unknown


def unreadable_settings(index: Index, names: list[str] | None = None) -> dict[str, str]:
    """Stored values that cannot be read (as of the last read_settings), by name."""
    return {name: value for name, value in sorted(index.ctx.unreadable_settings.items())
            if not names or name in names}


def settings_document(index: Index, names: list[str] | None = None) -> dict[str, object]:
    """The settings for --json: {name: {value, stored}}, unknown stored names, and stored
    values that cannot be read (their setting takes the default)."""
    known, unknown = read_settings(index, names)
    return {"settings": {name: {"value": value, "stored": stored}
                         for name, value, stored in known},
            "unknown_stored_settings": unknown,
            "unreadable_stored_settings": unreadable_settings(index, names)}


def settings_lines(index: Index, names: list[str] | None = None) -> list[str]:
    """The settings as every client of the namespace reads them, marking the ones not
    stored (their default applies), stored values that cannot be read, and stored names
    this version does not know."""
    known, unknown = read_settings(index, names)
    unreadable = unreadable_settings(index, names)
    lines = [f"settings of namespace {index.namespace!r} ({index.ctx.schema.settings}; "
             "* = not stored, the default applies):"]
    for name, value, stored in known:
        shown = str(value)
        if name in ("capacity_bytes", "max_object_size") and isinstance(value, int) and value:
            shown += f" ({human_bytes(value)})"
        elif name == "capacity_bytes":
            shown += " (unlimited)"
        if name in unreadable:
            shown += (f" (UNREADABLE stored value {unreadable[name][:80]!r}: mend it with "
                      f"`config set {name}=VALUE` or `config reset {name}`)")
        lines.append(f"  {name:<30} {shown}{'' if stored else ' *'}")
    lines += [f"  {name:<30} {value} (not a setting of this version: ignored)"
              for name, value in unknown.items()]
    return lines


def assignment(text: str) -> tuple[str, str]:
    """NAME=VALUE with a known setting and a value in its range (else a usage error)."""
    name, equals, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    if name not in SETTING_NAMES:
        raise argparse.ArgumentTypeError(f"unknown setting {name!r}; settings: "
                                         + ", ".join(SETTING_NAMES))
    try:
        coerce(name, value)
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name, value


def cmd_config_get(args: argparse.Namespace) -> int:

    unknown = [name for name in args.names if name not in SETTING_NAMES]
    if unknown:
        return fail(f"unknown settings {', '.join(unknown)}; settings: {', '.join(SETTING_NAMES)}",
                    code=USAGE)
    index = open_index(args, read_only=True)
    if args.json:
        print_json({"namespace": index.namespace, **settings_document(index, args.names)})
    else:
        print("\n".join(settings_lines(index, args.names)))
    return OK


def cmd_config_set(args: argparse.Namespace) -> int:

    index = open_index(args, read_only=True)  # store exactly the changes asked for
    changes = dict(args.assignments)
    index.set_config(**changes)
    print("\n".join(settings_lines(index, list(changes))))
    return OK


def cmd_config_reset(args: argparse.Namespace) -> int:

    index = open_index(args, read_only=True)
    index.reset_config(*args.names)
    print("\n".join(settings_lines(index, list(args.names))))
    return OK


def setting_name(text: str) -> str:
    if text not in SETTING_NAMES:
        raise argparse.ArgumentTypeError(f"unknown setting {text!r}; settings: "
                                         + ", ".join(SETTING_NAMES))
    return text


def register(subparsers: argparse._SubParsersAction) -> None:

    config = subparsers.add_parser(
        "config", help="show the namespace's settings, or change them for every client")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = actions.add_parser("get", help="show settings (all, or those named; reads only)")
    get.add_argument("names", nargs="*", metavar="NAME")
    add_json_option(get)
    get.set_defaults(func=cmd_config_get)
    set_ = actions.add_parser(
        "set", help="store settings (NAME=VALUE ...); a new capacity_bytes rebalances the "
                    "shards' admission limits; prefix_extractor and enable_radix_tree are "
                    "refused on a namespace that holds nodes")
    set_.add_argument("assignments", nargs="+", type=assignment, metavar="NAME=VALUE")
    set_.set_defaults(func=cmd_config_set)
    reset = actions.add_parser(
        "reset", help="drop stored settings (NAME ...): every client then reads the default; "
                      "mends a stored value that cannot be read; the same rules as set")
    reset.add_argument("names", nargs="+", type=setting_name, metavar="NAME")
    reset.set_defaults(func=cmd_config_reset)
