"""`python -m benchmarks`: run the benchmarks, print their tables, write results.json."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import redis

from . import (
    cluster,
    dropin,
    engine,
    eviction,
    floor,
    goals,
    match_prefix,
    memory,
    prefix_query,
    read_floor,
    registration,
    side_by_side,
)
from .common import SCALES, Context, Table, TreeSnapshots, to_json

BENCHMARKS: dict[str, ModuleType] = {module.NAME: module for module in
                                     (engine, registration, memory, eviction, match_prefix,
                                      read_floor, side_by_side, prefix_query, cluster, dropin,
                                      floor)}

DESCRIPTION = """\
Benchmarks of mooncake-redis (data model v2) against its goals (issue 10), its baselines
and the real Mooncake master, each on its own throwaway redis-server (free port, temp dir,
no persistence unless said; never your Redis):

  registration  nodes/s, Redis CPU, EVALSHA, redis.call and round trips per node of
                batch_put_start / put_end / register / single put_start, next to the
                EVALSHA ceilings of the same run; the cost by batch size
  memory        bytes per node of two objects at 1M objects (Redis defaults), per key
                kind, leaves and interior nodes apart; effect of Redis settings
  eviction      objects/s evicting the same leaves from 100k- and 1M-object trees
  match_prefix  latency and round trips of match_prefix over 1,000-page chains; writes
                at the bottom of such a chain
  reads         match_prefix, batch_is_exist, batch_get, get_keys_by_prefix next to a
                lean hiredis pipeline of the same commands (the floor): wall time and
                client CPU, ours/floor
  mooncake      side by side with mooncake_master (if installed: scripts/
                install_mooncake_peer.sh): put/get/is_exist/remove, single and batch,
                keys/s and ours/theirs, on Redis with AOF, without, and in-process
  prefix_query  get_keys_by_prefix vs SCAN MATCH over a flat store, 10k/100k/1M objects
  cluster       registration and eviction on 1 redis-server vs a 3-master local cluster;
                how the shards spread over the masters
  dropin        1 MiB pages put and read through the Mooncake drop-in
                (mooncake_redis.mooncake) next to the real Mooncake client and master
                (tcp), the same calls on both: put, get, batch_put_from, batch_get_into,
                batch_is_exist, batch_remove; pages/s and the ratio
  floor         every write path (put_start, put_end, register, eviction) as a ratio to
                a minimal reference script of the same schema (benchmarks/floor_lua/),
                same server, same run, at each shard count a namespace can have

Trees are chat-shaped (system prompts, multi-turn chains, branches), two objects per
page, built once per run through the public API and loaded into each benchmark's server
as an RDB snapshot. Compare numbers as ratios within one run. A table of the goals,
measured against v1, ends the run.
"""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="full",
                        help="full: the sizes above (default); small: a smoke run of seconds")
    parser.add_argument("--only", action="append", choices=list(BENCHMARKS), metavar="NAME",
                        help="run only this benchmark (repeatable): " + ", ".join(BENCHMARKS))
    parser.add_argument("--out", type=Path, default=Path("out/bench"),
                        help="directory for results.json and tables.md (default: out/bench)")
    parser.add_argument("--snapshots", type=Path, default=None,
                        help="keep tree snapshots here and reuse them in later runs while the "
                             "library is unchanged (default: a temp dir, removed at the end)")
    parser.add_argument("--seed", type=int, default=7, help="seed of every generated tree")
    parser.add_argument("--skip-peer", action="store_true",
                        help="leave out the Mooncake master even where it can run")
    return parser.parse_args(argv)


def machine(server_version: str) -> dict[str, Any]:
    model = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), model)

    return {"cpus": os.cpu_count(), "cpu_model": model, "redis_server": server_version,
            "python": platform.python_version(), "redis_py": redis.__version__,
            "platform": platform.platform(), "loadavg_at_start": os.getloadavg()}


def redis_server_version() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "not installed"
    return subprocess.run([binary, "--version"], check=False, capture_output=True,
                          text=True).stdout.strip()


def trees_table(trees: list[dict[str, Any]]) -> Table:
    return Table("Trees built through the API (batch_put_start with parents + batch_put_end, "
                 "500 pages a call), one process",
                 ["objects", "nodes", "seconds from empty", "objects/s"],
                 [[t["objects"], t["nodes"], t["build_seconds"], t["objects_per_second"]]
                  for t in trees],
                 note="Snapshots reused from --snapshots keep the build time of their run.")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    scale = SCALES[args.scale]
    names = args.only or list(BENCHMARKS)
    temporary = args.snapshots is None
    snapshot_dir = Path(tempfile.mkdtemp(prefix="mooncake-bench-")) if temporary \
        else args.snapshots
    snapshots = TreeSnapshots(snapshot_dir, args.seed)
    context = Context(scale=scale, snapshots=snapshots, seed=args.seed,
                      skip_peer=args.skip_peer)
    report: dict[str, Any] = {"command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv
                                                                              is None else argv),
                              "scale": scale.name, "seed": args.seed,
                              "machine": machine(redis_server_version()), "benchmarks": {}}
    rendered = []
    started = time.perf_counter()
    try:
        snapshots.prepare(size for name in names
                          for size in BENCHMARKS[name].tree_sizes(scale))
        report["tree_build_seconds"] = time.perf_counter() - started
        report["trees"] = [{"objects": s.objects, "nodes": s.nodes,
                            "build_seconds": s.build_seconds,
                            "objects_per_second": s.objects / s.build_seconds}
                           for s in snapshots.built()]
        if report["trees"]:
            rendered.append(trees_table(report["trees"]).render())
            print(rendered[-1] + "\n", flush=True)
        for name in names:
            began = time.perf_counter()
            result = BENCHMARKS[name].run(context)
            took = time.perf_counter() - began
            report["benchmarks"][name] = {"seconds": took, "loadavg_after": os.getloadavg(),
                                          "results": result.results,
                                          "tables": [to_json(t) for t in result.tables]}
            for table in result.tables:
                rendered.append(table.render())
                print(rendered[-1] + "\n", flush=True)
            print(f"({name}: {took:.1f} s, load average {os.getloadavg()[0]:.2f})\n",
                  flush=True)
    finally:
        if temporary:
            shutil.rmtree(snapshot_dir, ignore_errors=True)
    summary, report["goals"] = goals.summarize(
        {name: bench["results"] for name, bench in report["benchmarks"].items()})
    if summary.rows:
        rendered.append(summary.render())
        print(rendered[-1] + "\n", flush=True)
    report["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / "tables.md").write_text("\n\n".join(rendered) + "\n")
    print(f"total {report['seconds']:.0f} s; wrote {args.out / 'results.json'} and "
          f"{args.out / 'tables.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
