"""Versions side by side in one session: the same registration (batch_put_start with
parents, then batch_put_end) through the public API of each checkout, interleaved and
repeated, so a busy shared machine slows every version alike. v1 against v2, or a
PROTOTYPE commit against its parent, without trusting numbers from another day.

    python -m benchmarks.versions --ref e45081b~1 --ref HEAD --ref WORKTREE
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import ROOT, Table

WORKTREE = "WORKTREE"
"""--ref naming the files of this checkout as they are (uncommitted changes included)."""

METRICS = ("per_second", "redis_cpu_us", "client_cpu_us", "evalsha", "script_commands",
           "round_trips")


def export(ref: str, into: Path) -> Path:
    """The files of `ref` in `into`, importable with PYTHONPATH=into: lua/ and workers/ are
    linked inside the package as the wheel installs them."""
    if ref == WORKTREE:
        shutil.copytree(ROOT, into, ignore=shutil.ignore_patterns(".git", ".venv*", "out",
                                                                  "__pycache__"))
    else:
        into.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for part in ("lua", "workers"):
        link = into / "mooncake_redis" / part
        if (into / part).is_dir() and not link.exists():
            link.symlink_to(Path("..") / part)
    return into


def probe(tree: Path, nodes: int, batch: int, keys_per_page: int, seed: int) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).with_name("version_probe.py")), str(nodes),
               str(batch), str(keys_per_page), str(seed), str(ROOT / "tests")]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode != 0:
        raise RuntimeError(f"probe failed in {tree}:\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def compare(refs: Sequence[str], nodes: int, batch: int, keys_per_page: int, repeat: int
            ) -> tuple[Table, dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = {ref: [] for ref in refs}
    with tempfile.TemporaryDirectory(prefix="mooncake-versions-") as tmp:
        trees = {ref: export(ref, Path(tmp) / f"v{number}") for number, ref in enumerate(refs)}
        for attempt in range(repeat):
            for ref in refs:
                runs[ref].append(probe(trees[ref], nodes, batch, keys_per_page, 7 + attempt))
    medians = {ref: {step: {metric: statistics.median(run[step][metric] for run in ref_runs)
                            for metric in METRICS}
                     for step in ref_runs[0]}
               for ref, ref_runs in runs.items()}
    table = Table(f"Versions in one session: {nodes:,} nodes of {keys_per_page or 1} "
                  f"object(s), {batch} pages a call, median of {repeat} interleaved runs",
                  ["version", "step", "nodes/s", "Redis CPU µs/node", "client CPU µs/node",
                   "EVALSHA/node", "redis.call/node", "round trips/node",
                   "Redis CPU in ceiling calls"])
    for ref, steps in medians.items():
        ceiling = steps["ceiling"]["redis_cpu_us"]
        for step, row in steps.items():
            table.rows.append([ref, step, row["per_second"], row["redis_cpu_us"],
                               row["client_cpu_us"], row["evalsha"], row["script_commands"],
                               row["round_trips"], row["redis_cpu_us"] / ceiling])
    table.note = ("ceiling = the same number of trivial EVALSHA calls (INCR), pipelined "
                  f"{batch} a round trip; the last column divides by its Redis CPU, which "
                  "cancels the machine's speed of the moment.")
    return table, {"refs": list(refs), "runs": runs, "medians": medians}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.versions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", action="append", required=True,
                        help=f"a git ref, or {WORKTREE} for the files as they are (repeatable)")
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="pages per call (500)")
    parser.add_argument("--keys-per-page", type=int, default=2,
                        help="objects per node: 2 (`_0_k`, `_0_v`, default), 1, or 0 (MLA: the "
                             "key is the hash)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    table, report = compare(args.ref, args.nodes, args.batch, args.keys_per_page, args.repeat)
    print(table.render())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
