"""Synthetic traces in Mooncake's JSONL format: chat-shaped page chains of any size, for
tests and for timing the replay on traces larger than the published ones.

    python -m mooncake_redis.sim.trace_synthesis OUT.jsonl --requests 12000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from mooncake_redis.sim.trace import TRACE_BLOCK_TOKENS


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
    follow_up: float = 0.6
    branch: float = 0.1
    recent_requests: int = 400


def synthetic_chains(requests: int, seed: int = 0,
                     shape: ChainShape | None = None) -> list[list[int]]:
    """Chains of hash ids, parent first; the same arguments give the same chains."""
    shape = shape or ChainShape()
    rng = random.Random(seed)
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        next_id += count
        return list(range(next_id - count, next_id))

    prompts = [fresh(rng.randint(*shape.system_prompt_pages))
               for _ in range(shape.system_prompts)]
    chains: list[list[int]] = []
    for _ in range(requests):
        if chains and rng.random() < shape.follow_up:
            base = rng.choice(chains[-shape.recent_requests:])
            if rng.random() < shape.branch:
                base = base[:rng.randint(1, len(base))]
        else:
            base = rng.choice(prompts)
        chains.append(base + fresh(rng.randint(*shape.new_pages)))
    return chains


def write_trace(path: Path, chains: Sequence[Sequence[int]]) -> None:
    """One Mooncake request a line: a millisecond apart, every page a full block."""
    with path.open("w", encoding="utf-8") as handle:
        for number, chain in enumerate(chains):
            record = {"timestamp": number, "input_length": len(chain) * TRACE_BLOCK_TOKENS,
                      "output_length": 0, "hash_ids": list(chain)}
            handle.write(json.dumps(record) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mooncake_redis.sim.trace_synthesis",
                                     description="Write a synthetic Mooncake-format trace.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=12_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    chains = synthetic_chains(args.requests, args.seed)
    write_trace(args.out, chains)
    distinct = len({page for chain in chains for page in chain})
    print(f"wrote {args.out}: {len(chains)} requests, {sum(map(len, chains))} pages, "
          f"{distinct} distinct; shape: "
          + ", ".join(f"{field.name}={getattr(ChainShape(), field.name)}"
                      for field in fields(ChainShape)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
