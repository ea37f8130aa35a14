"""The client's own instructions per key (per page for match_prefix) of a hot path,
counted by callgrind on this Python process, next to the floor's: the same commands the
call sent, packed by hiredis and read by a hiredis Reader on a raw socket (read_floor.py).
Unlike CPU time, which the machine's load moves more than a small change does, the
counts are the same from run to run (docs/BENCHMARKS.md, section 11).

    python -m benchmarks.client_instructions [--op remove] [--pages 2000]

Re-runs itself under valgrind. On a private redis-server (16 shards) the pages
(chat-shaped, with parents) and one leaf page under each are stored; then the op runs
over the leaf pages, 500 pages (1,000 keys) a call: remove (batch_remove), get
(batch_get, a lease each), is_exist (batch_is_exist), match_prefix (the 500 leaf hashes;
all match, so two round trips a call); or stores them (only the pages stored before):
put (batch_put, the one-phase put with parents), put_start_end (batch_put_start with
parents, then batch_put_end). The first call is not counted (imports, scripts loaded);
the floor replays every pipeline the counted calls sent, one round trip each.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import bench_server, chunks, open_index, store_pages
from .instructions import CALL_PAGES, counted
from .read_floor import Floor, recording
from .registration import checked, pages_of
from .trees import page_keys, put_items, random_hash

INSIDE = "MOONCAKE_CLIENT_CALLGRIND_OUT"
"""Set (to the output file's stem) when this process runs under callgrind."""

OPS = ("remove", "get", "is_exist", "match_prefix", "put", "put_start_end")
WRITES = ("put", "put_start_end")
"""Ops that store the leaf pages (with their parents) rather than find them stored."""


def call_of(index: Any, op: str) -> Callable[[list[str]], Any]:
    """The op on one call's keys (hashes for match_prefix), its answer checked."""
    def is_exist(keys: list[str]) -> None:
        if not all(index.batch_is_exist(keys)):
            raise RuntimeError("batch_is_exist: a stored key answered False")

    def match_prefix(hashes: list[str]) -> None:
        if index.match_prefix(hashes) < 1:
            raise RuntimeError("match_prefix: the first page did not match")

    def put_start_end(items: list[Any]) -> None:
        checked(index.batch_put_start(items))
        checked(index.batch_put_end([key for key, _, _ in items]))

    return {"remove": lambda keys: checked(index.batch_remove(keys)),
            "get": lambda keys: checked(index.batch_get(keys)),
            "is_exist": is_exist, "match_prefix": match_prefix,
            "put": lambda items: checked(index.batch_put(items)),
            "put_start_end": put_start_end}[op]


def measure(op: str, pages_count: int, out: Path) -> tuple[float, float]:
    """Instructions per unit of our calls and of the floor's replay of their commands."""
    with bench_server() as server:
        index = open_index(server, shard_count=16)
        pages = pages_of(7, pages_count)
        rng = random.Random(11)
        leaves = [(random_hash(rng), page) for page, _ in pages]
        stored = pages if op in WRITES else pages + leaves
        store_pages(index, iter(stored), len(stored), "store")
        units: list[list[Any]]
        if op in WRITES:
            units = [put_items(group) for group in chunks(leaves, CALL_PAGES)]
        elif op == "match_prefix":
            units = [[page for page, _ in group] for group in chunks(leaves, CALL_PAGES)]
        else:
            units = [[key for page, _ in group for key in page_keys(page)]
                     for group in chunks(leaves, CALL_PAGES)]
        run = call_of(index, op)
        run(units[0])
        with recording() as pipelines:
            ours = counted(os.getpid(), out, lambda: [run(unit) for unit in units[1:]])
        index.close()
        floor = Floor(server.port)
        try:
            theirs = counted(os.getpid(), out, lambda: [floor.pipeline(commands)
                                                        for commands in pipelines])
        finally:
            floor.close()
    per = sum(map(len, units[1:]))
    return ours / per, theirs / per


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", choices=OPS, default="remove")
    parser.add_argument("--pages", type=int, default=2000)
    args = parser.parse_args()
    if os.environ.get(INSIDE):
        ours, floor = measure(args.op, args.pages, Path(os.environ[INSIDE]))
        unit = "page" if args.op == "match_prefix" else "key"
        print(f"client instructions per {unit} of {args.op} ({args.pages} leaf pages, "
              f"{CALL_PAGES} a call, the first not counted): ours {ours:,.0f}, the floor "
              f"(its commands by hiredis on a raw socket) {floor:,.0f}, ours/floor "
              f"{ours / floor:.2f}")
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="mooncake-callgrind-client-") as out_dir:
        out = Path(out_dir) / "client.out"
        env = {**os.environ, INSIDE: str(out), "PYTHONHASHSEED": "0"}
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                               sys.executable, "-m", "benchmarks.client_instructions",
                               "--op", args.op, "--pages", str(args.pages)], env=env,
                              stderr=subprocess.DEVNULL, check=False)
    raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
