"""Where a registered node's time goes: the client (cProfile, grouped by what the code does)
and Redis (SLOWLOG of every command: each script's time per call and per item, and the
commands scripts run). A diagnostic for docs/BENCHMARKS.md, not part of the timed run:

    python -m benchmarks.profiling [--nodes 20000] [--batch 500] [--op put_start|put_end]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from itertools import islice

import redis

from mooncake_redis import Index
from mooncake_redis.context import shared_scripts

from .common import (
    Table,
    bench_server,
    chunks,
    connect,
    open_index,
)
from .meter import Measured, measure
from .trees import chat_pages, put_items

AREAS = (
    ("socket reads (recv)", ("recv_into", "_socket.socket")),
    ("sending (socket send)", ("sendall",)),
    ("redis-py: packing commands", ("redis/connection.py", "hiredis.pack_command")),
    ("redis-py + hiredis: reading replies", ("redis/_parsers", "redis/client.py",
                                             "hiredis.Reader")),
    ("executor: queueing, shard-tag checks", ("mooncake_redis/executor.py",)),
    ("script calls: keys and arguments", ("mooncake_redis/scripts.py", "mooncake_redis/keys.py")),
    ("input checks: key split, hash form", ("mooncake_redis/validation.py",
                                            "mooncake_redis/prefix.py",
                                            "mooncake_redis/context.py", "re.Pattern")),
    ("protocol: items, replies, settle", ("mooncake_redis/store/registration.py",
                                          "mooncake_redis/tree/links.py",
                                          "mooncake_redis/store/objects.py",
                                          "mooncake_redis/store/deletion.py")),
    ("facade: Index", ("mooncake_redis/index.py",)),
)


def area_of(function: tuple[str, int, str]) -> str:
    filename, _, name = function
    where = f"{filename}:{name}"
    for area, needles in AREAS:
        if any(needle in where for needle in needles):
            return area
    return "other (builtins, dataclasses ...)"


def client_areas(profile: cProfile.Profile) -> dict[str, float]:
    """Own time (tottime) per area, in seconds. A builtin (isinstance, dict.get, str.find
    ...) counts for the areas of its callers, in proportion to the time each caller spent
    in it."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    areas: dict[str, float] = defaultdict(float)
    for function, (_, _, tottime, _, callers) in stats.items():
        if function[0] != "~" or not callers:
            areas[area_of(function)] += tottime
            continue
        for caller, (_, _, caller_tottime, _) in callers.items():
            areas[area_of(caller)] += caller_tottime
    return dict(areas)


def redis_scripts(client: redis.Redis) -> dict[str, dict[str, float]]:
    """From SLOWLOG (threshold 0): per script, calls, µs per call, node keys per call;
    per plain command, calls and µs (scripts' inner commands are logged too)."""
    names = {script.sha: script.name for script in shared_scripts().all}
    found: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for entry in client.slowlog_get(10_000_000):
        command = entry["command"]
        words = (command.decode() if isinstance(command, bytes) else command).split()
        if words[0].upper() == "EVALSHA":
            row = found["EVALSHA " + names.get(words[1], words[1][:8])]
            row["node_keys"] += int(words[2]) - 7
        else:
            row = found[words[0].upper()]
        row["calls"] += 1
        row["usec"] += entry["duration"]
    return {name: dict(row) for name, row in found.items()}


def send(index: Index, groups: list[list[tuple[str, int, str | None]]], op: str) -> None:
    for items in groups:
        if op == "put_end":
            index.batch_put_end([key for key, _, _ in items])
        else:
            index.batch_put_start(items)


def run(nodes: int, batch: int, op: str) -> list[Table]:
    """The op timed twice on the same shape: once plain (the CPU figures), once under
    cProfile and SLOWLOG (the shares)."""
    with bench_server("--slowlog-log-slower-than", "-1", "--slowlog-max-len",
                      "10000000") as server:
        client = connect(server)
        runs: list[Measured] = []
        for attempt in ("plain", "profiled"):
            index = open_index(server, namespace=attempt)
            pages = list(islice(chat_pages(11 + len(runs)), nodes))
            groups = [put_items(group) for group in chunks(pages, batch)]
            if op == "put_end":
                for items in groups:
                    index.batch_put_start(items)
            profile = cProfile.Profile(time.process_time)  # CPU: waits for Redis cost none
            if attempt == "profiled":
                client.config_set("slowlog-log-slower-than", 0)
                client.slowlog_reset()
                profile.enable()
            measured = measure(client, partial(send, index, groups, op))
            profile.disable()
            client.config_set("slowlog-log-slower-than", -1)
            runs.append(measured)
        scripts = redis_scripts(client)
    measured = runs[0]
    areas = client_areas(profile)
    profiled = sum(areas.values())
    client_table = Table(
        f"Client: where batch_{op}'s CPU goes ({nodes:,} nodes, {batch} pages a call; "
        f"cProfile own CPU time, scaled to the unprofiled client CPU of "
        f"{measured.client_cpu_seconds * 1e6 / nodes:.0f} µs/node)",
        ["area", "share", "µs/node"],
        [[area, seconds / profiled, seconds / profiled * measured.client_cpu_seconds
          * 1e6 / nodes] for area, seconds in sorted(areas.items(), key=lambda a: -a[1])])
    redis_table = Table(
        f"Redis: batch_{op} per node, by script and command (SLOWLOG durations; a script's "
        "time includes its commands, listed under their own names too)",
        ["script or command", "calls/node", "µs/call", "µs/node", "node keys/call"],
        [[name, row["calls"] / nodes, row["usec"] / row["calls"], row["usec"] / nodes,
          row.get("node_keys", 0) / row["calls"] if name.startswith("EVALSHA") else None]
         for name, row in sorted(scripts.items(), key=lambda s: -s[1]["usec"])])
    redis_cpu = measured.redis_cpu_seconds * 1e6 / nodes
    redis_table.note = (f"INFO cpu of the plain run: {redis_cpu:.0f} µs/node. SLOWLOG "
                        "durations are wall time, inflated by logging every command and by "
                        "a busy machine: read them as shares.")
    return [client_table, redis_table]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="pages per call")
    parser.add_argument("--op", choices=("put_start", "put_end"), default="put_start")
    args = parser.parse_args(argv)
    for table in run(args.nodes, args.batch, args.op):
        print(table.render() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

