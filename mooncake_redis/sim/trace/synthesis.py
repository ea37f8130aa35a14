"""Synthetic traces in Mooncake's JSONL format: chat-shaped page chains of any size and
shape, for tests, for timing the replay beyond the published traces' sizes, and for
workloads they do not cover.

    python -m mooncake_redis.sim.trace.synthesis OUT.jsonl --requests 12000 --seed 1 \
        --system-prompt-pages 20,60 --branch 0.3
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple

from mooncake_redis.sim.trace.files import TRACE_BLOCK_TOKENS


@dataclass(frozen=True)
class ChainShape:
    """How requests extend each other. A request is a follow-up of one of the last
    `recent_requests` requests (with probability `follow_up`), else a new conversation on
    one of the shared system prompts; a follow-up resumes from a random earlier page of its
    base with probability `branch` (an edited or regenerated turn), and adds `new_pages`
    pages of its own (drawn from the range, both ends included)."""

    system_prompts: int = 8
    system_prompt_pages: tuple[int, int] = (1, 8)
    new_pages: tuple[int, int] = (1, 12)
    follow_up: float = 0.7
    branch: float = 0.1
    recent_requests: int = 3000

    def __post_init__(self) -> None:
        for name in ("system_prompt_pages", "new_pages"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name} must be a range low,high with 0 <= low <= high")
        if self.system_prompts < 1 or self.recent_requests < 1 or self.system_prompt_pages[0] < 1:
            raise ValueError("system_prompts, recent_requests and system prompt pages must be "
                             "at least 1")
        for name in ("follow_up", "branch"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} is a probability, in 0..1")


class SyntheticRequest(NamedTuple):
    chain: list[int]
    """Hash ids, parent first."""
    session: int
    """A new conversation starts a session; a follow-up is in its base's session."""


def synthetic_chains(requests: int, seed: int = 0,
                     shape: ChainShape | None = None) -> list[list[int]]:
    """Chains of hash ids, parent first; the same arguments give the same chains."""
    return [request.chain for request in synthetic_requests(requests, seed, shape)]


def synthetic_requests(requests: int, seed: int = 0,
                       shape: ChainShape | None = None) -> list[SyntheticRequest]:
    """Chains with their sessions; the same arguments give the same requests."""
    shape = shape or ChainShape()
    rng = random.Random(seed)
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        next_id += count
        return list(range(next_id - count, next_id))

    prompts = [fresh(rng.randint(*shape.system_prompt_pages))
               for _ in range(shape.system_prompts)]
    made: list[SyntheticRequest] = []
    sessions = 0
    for _ in range(requests):
        if made and rng.random() < shape.follow_up:
            base, session = rng.choice(made[-shape.recent_requests:])
            if rng.random() < shape.branch:
                base = base[:rng.randint(1, len(base))]
        else:
            base, session = rng.choice(prompts), sessions
            sessions += 1
        made.append(SyntheticRequest(base + fresh(rng.randint(*shape.new_pages)), session))
    return made


def write_trace(path: Path, chains: Sequence[Sequence[int]],
                sessions: Sequence[int] | None = None) -> None:
    """One Mooncake request a line: a millisecond apart, every page a full block; with
    `sessions`, each line also names its session (a field Mooncake's traces do not have,
    which readers of them ignore)."""
    with path.open("w", encoding="utf-8") as handle:
        for number, chain in enumerate(chains):
            record: dict[str, object] = {
                "timestamp": number, "input_length": len(chain) * TRACE_BLOCK_TOKENS,
                "output_length": 0, "hash_ids": list(chain)}
            if sessions is not None:
                record["session"] = sessions[number]
            handle.write(json.dumps(record) + "\n")


def _page_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition(",")
    try:
        return int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a range like 1,8") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mooncake_redis.sim.trace.synthesis",
        description="Write a synthetic Mooncake-format trace. " + " ".join(
            (ChainShape.__doc__ or "").split()),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=12_000, help="requests to write")
    parser.add_argument("--seed", type=int, default=0,
                        help="the same seed and shape give the same trace")
    defaults = ChainShape()
    for field in fields(ChainShape):
        default = getattr(defaults, field.name)
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            type=_page_range if isinstance(default, tuple) else type(default),
            default=default,
            help=field.name.replace("_", " ")
            + (" (pages: low,high)" if isinstance(default, tuple) else ""))
    args = parser.parse_args(argv)
    try:
        shape = ChainShape(**{field.name: getattr(args, field.name)
                              for field in fields(ChainShape)})
    except ValueError as error:
        parser.error(str(error))
    made = synthetic_requests(args.requests, args.seed, shape)
    chains = [request.chain for request in made]
    write_trace(args.out, chains, [request.session for request in made])
    distinct = len({page for chain in chains for page in chain})
    sessions = len({request.session for request in made})
    print(f"wrote {args.out}: {len(chains)} requests in {sessions} sessions, "
          f"{sum(map(len, chains))} pages, {distinct} distinct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
