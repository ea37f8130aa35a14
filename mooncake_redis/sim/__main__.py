"""`python -m mooncake_redis.sim`: the `sim` sub-command without the rest of the CLI."""

from __future__ import annotations

import argparse
import sys

from mooncake_redis.sim.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mooncake_redis.sim")
    register(parser.add_subparsers(dest="command", required=True))
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] != ["sim"]:
        arguments.insert(0, "sim")  # `python -m mooncake_redis.sim --plot` needs no `sim`
    args = parser.parse_args(arguments)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
