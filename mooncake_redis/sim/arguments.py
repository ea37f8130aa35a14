"""Parsers of the `sim` options' values: each raises ArgumentTypeError saying what is wrong."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mooncake_redis.cli.support import at_least
from mooncake_redis.sim.indexes.runner import check_capacity_fractions, check_names

BAD_INPUT_EXIT_CODE = 2
"""What `sim` returns for input it cannot use, as argparse exits for an option it rejects."""


def refuse(problem: str) -> int:
    """Say what is wrong with the input on stderr; the exit code for it."""
    print(f"mooncake-redis sim: error: {problem}", file=sys.stderr)
    return BAD_INPUT_EXIT_CODE


def capacity_fractions(text: str) -> tuple[float, ...]:
    try:
        fractions = tuple(float(part) for part in text.split(","))
        check_capacity_fractions(fractions)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return fractions


def capacity_fraction(text: str) -> float:
    fractions = capacity_fractions(text)
    if len(fractions) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one fraction, not a list")
    return fractions[0]


def names_from(known: Sequence[str], kind: str) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        try:
            check_names(kind, names, known)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return names

    return parse


def integers_at_least(minimum: int) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of integers, each at least `minimum`."""
    parse_one = at_least(minimum)

    def parse(text: str) -> tuple[int, ...]:
        return tuple(parse_one(part.strip()) for part in text.split(","))

    return parse
