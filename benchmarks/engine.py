"""The headline benchmark (DESIGN v4, item 7): the engine request, side by side with the real
Mooncake master on this machine, in one run.

An engine request checks a chain of 24-72 pages (batch_is_exist, two keys a page) and
stores the 16 pages it lacked with their parents (benchmarks/engine_client.py). 1, 4 and 8
client processes run a stream of them at once, against mooncake-redis (a redis-server of
its own, no persistence) and against mooncake_master (tcp, metadata-only writes): requests
per second, and CPU microseconds per request on each side, the server's (redis-server's
INFO cpu; the master's threads' /proc schedstat) and the clients'. A third side, the floor, is what
Redis itself needs for the same work (engine_client.py). Sides are interleaved, their
order rotated repeat after repeat, never one side first; the load is printed with every
row. The machine is shared: compare the ratios of one run.

    python -m benchmarks.engine [--clients 1,4,8] [--repeats 3] [--conversations 25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from . import mooncake_peer
from .common import BenchmarkResult, Context, Scale, Table, bench_server

NAME = "engine"
ROOT = Path(__file__).resolve().parent.parent
CLIENT_COUNTS = (1, 4, 8)


def tree_sizes(scale: Scale) -> list[int]:
    return []  # every side starts from an empty store


def process_cpu_s(pid: int) -> float:
    """The CPU time of every thread of a process, in seconds: the nanoseconds each has
    run (its /proc schedstat), not /proc stat's clock ticks (10 ms each: a run of 100
    requests at 0.3 ms would read 3 ticks, give or take one)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_clients(command: list[str], clients: int, conversations: int, seed: int,
                server_cpu: Any, python: str, env: dict[str, str]) -> dict[str, float]:
    """Start `clients` processes, wait until each is set up, let them go at once; their
    requests/s and the CPU per request on each side."""
    processes = [subprocess.Popen(
        [python, "-m", "benchmarks.engine_client", *command, "--client", str(number),
         "--conversations", str(conversations), "--seed", str(seed)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for number in range(clients)]
    try:
        for process in processes:
            line = process.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "ready":
                raise RuntimeError(f"a client did not start: {line!r}")
        before = server_cpu()
        for process in processes:
            process.stdin.write("go\n")  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        reports = [json.loads(process.stdout.readline())  # type: ignore[union-attr]
                   for process in processes]
        server = server_cpu() - before
        for process in processes:
            if process.wait(timeout=120) != 0:
                raise RuntimeError(f"a client failed: {' '.join(command)}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    requests = sum(report["requests"] for report in reports)
    wall = max(report["wall_s"] for report in reports)  # all started at once
    return {"requests": requests, "requests_per_s": requests / wall,
            "server_cpu_us": server * 1e6 / requests,
            "client_cpu_us": sum(r["cpu_s"] for r in reports) * 1e6 / requests,
            "pages_checked": sum(r["pages_checked"] for r in reports) / requests,
            "refused": sum(r["refused"] for r in reports), "load": os.getloadavg()[0]}


@contextmanager
def mooncake_master() -> Iterator[tuple[str, str, int]]:
    """A fresh mooncake_master on loopback: (its address, its metadata URL, its pid)."""
    python = mooncake_peer.peer_python()
    if python is None:
        raise RuntimeError("the Mooncake peer is not installed")
    binary = Path(mooncake_peer._probe(python)["dir"]) / "mooncake_master"
    with tempfile.TemporaryDirectory(prefix="mooncake-engine-") as workdir:
        master = mooncake_peer.start_master(binary, Path(workdir))
        try:
            yield master.address, master.metadata_server, master.process.pid
        finally:
            mooncake_peer._stop(master.process)


def run_mooncake(clients: int, conversations: int, seed: int) -> dict[str, float]:
    python = mooncake_peer.peer_python()
    assert python is not None
    with mooncake_master() as (master, metadata, pid):
        return run_clients(["--side", "mooncake", "--master", master, "--metadata", metadata],
                           clients, conversations, seed, lambda: process_cpu_s(pid), python,
                           {**os.environ, **mooncake_peer.CLIENT_ENV,
                            "PYTHONPATH": str(ROOT)})


def run_redis(side: str, url: str, clients: int, conversations: int,
              seed: int) -> dict[str, float]:
    """Ours or the floor, on a flushed redis-server of its own."""
    client = redis.Redis.from_url(url)
    client.flushall()
    return run_clients(["--side", side, "--url", url], clients, conversations, seed,
                       lambda: redis_cpu_s(client), sys.executable, dict(os.environ))


SIDES = ("mooncake", "ours", "floor")


def orders(repeats: int) -> Iterator[list[str]]:
    """Each repeat's order of the sides: rotated, so no side is always first or last."""
    for repeat in range(repeats):
        yield [SIDES[(repeat + i) % len(SIDES)] for i in range(len(SIDES))]


def measure(client_counts: Sequence[int], repeats: int, conversations: int,
            peer: bool) -> dict[str, Any]:
    """Each (side, clients) `repeats` times, interleaved (mooncake, ours, floor; then ours,
    floor, mooncake; ...); the medians, and every run."""
    runs: dict[str, list[dict[str, float]]] = {}
    seed = 1000
    with bench_server() as server:
        for order in orders(repeats):
            for clients in client_counts:
                for side in order:
                    if side == "mooncake" and not peer:
                        continue
                    seed += 1
                    got = run_mooncake(clients, conversations, seed) if side == "mooncake" \
                        else run_redis(side, server.url, clients, conversations, seed)
                    runs.setdefault(f"{side}/{clients}", []).append(got)
    medians = {name: {field: statistics.median(run[field] for run in found)
                      for field in found[0]} for name, found in runs.items()}
    return {"runs": runs, "medians": medians}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def refusals(measured: dict[str, Any]) -> str:
    """A sentence on the puts a side refused, if any did (Mooncake's, under load)."""
    counts = {name: sum(run["refused"] for run in runs)
              for name, runs in measured["runs"].items()}
    found = {name: count for name, count in counts.items() if count}
    if not found:
        return ""
    return "Puts refused (not retried; their requests still count): " + ", ".join(
        f"{name} {count}" for name, count in sorted(found.items())) + ". "


def table(measured: dict[str, Any], client_counts: Sequence[int]) -> Table:
    medians = measured["medians"]
    rows = []
    for clients in client_counts:
        ours = medians.get(f"ours/{clients}")
        if ours is None:
            continue
        floor = medians.get(f"floor/{clients}", {})
        theirs = medians.get(f"mooncake/{clients}", {})
        ours_cpu = ours["server_cpu_us"] + ours["client_cpu_us"]
        theirs_cpu = theirs and theirs["server_cpu_us"] + theirs["client_cpu_us"]
        rows.append([
            clients, ours["requests_per_s"], theirs.get("requests_per_s"),
            ratio(ours["requests_per_s"], theirs.get("requests_per_s")),
            ours["server_cpu_us"], floor.get("server_cpu_us"),
            ratio(ours["server_cpu_us"], floor.get("server_cpu_us")),
            theirs.get("server_cpu_us"), ours["client_cpu_us"], floor.get("client_cpu_us"),
            theirs.get("client_cpu_us"), ratio(theirs_cpu or None, ours_cpu), ours["load"]])
    return Table(
        "The engine request (check a 24-72-page chain, store 16 new pages with parents): "
        "mooncake-redis, the floor (what Redis itself needs) and the Mooncake master, side "
        "by side (medians of interleaved runs)",
        ["clients", "ours req/s", "Mooncake req/s", "ours / theirs", "Redis CPU us/req",
         "floor's Redis us/req", "ours / floor", "master CPU us/req",
         "our client CPU us/req", "floor's client us/req", "their client CPU us/req",
         "their CPU / ours", "load (1 min)"], rows,
        note=refusals(measured) + (
            "CPU per request: the server process's (redis-server, mooncake_master) and "
            "the clients' own, each over its requests; `their CPU / ours` is server and "
            "client together. The floor: a raw hiredis pipeline of one HMGET a page, and "
            "one call of benchmarks/floor_lua/register.lua for the 16 pages. The machine "
            "has 2 cores: with 4 and 8 clients every side shares them with its clients."))

def run(context: Context) -> BenchmarkResult:
    peer = not context.skip_peer and mooncake_peer.available() is None
    small = context.scale.name == "small"
    counts = (1,) if small else CLIENT_COUNTS
    measured = measure(counts, 1 if small else 3, 2 if small else 25, peer)
    return BenchmarkResult([table(measured, counts)], measured)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,4,8",
                        help="client process counts, comma-separated (default 1,4,8)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each (side, clients), interleaved (default 3)")
    parser.add_argument("--conversations", type=int, default=25,
                        help="conversations per client, 4 requests each (default 25)")
    parser.add_argument("--skip-peer", action="store_true", help="leave Mooncake out")
    parser.add_argument("--json", type=Path, help="also write the runs to this file")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.clients.split(",")]
    reason = None if args.skip_peer else mooncake_peer.available()
    if reason:
        print(f"Mooncake's side left out: {reason}", file=sys.stderr)
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    measured = measure(counts, args.repeats, args.conversations,
                       peer=not args.skip_peer and reason is None)
    print(table(measured, counts).render())
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
