"""The read hot paths next to their floor: each call, and a lean hiredis pipeline of the
same commands on the same server in the same run, timed interleaved (ours, floor, ours,
floor ...). The floor's commands are the ones the call itself sent (recorded once, at
Pipeline.start), packed with hiredis.pack_command, written in one sendall on a raw socket
and read with a hiredis.Reader: what any client must at least pay for those reads. For a
batch call the floor sends all of them as ONE pipeline (the call may take two round
trips: match_prefix reads 32 pages first); for a single call, one round trip each."""

from __future__ import annotations

import random
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import hiredis

from mooncake_redis import Index, executor

from .common import BenchmarkResult, Context, Table, bench_server, open_index, store_pages
from .trees import chain_pages, page_keys

NAME = "reads"
SINGLE_CALLS = 200
"""get_keys_by_prefix: pages asked one by one per sample."""


def tree_sizes(scale: Any) -> list[int]:
    return []


class Floor:
    """A raw connection: commands packed by hiredis, one write, replies read by hiredis."""

    def __init__(self, port: int):
        self.socket = socket.create_connection(("127.0.0.1", port))
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader(encoding="utf-8")
        self.buffer = bytearray(1 << 16)

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.socket.sendall(b"".join([hiredis.pack_command(command) for command in commands]))
        reader, replies = self.reader, []
        for _ in commands:
            reply = reader.gets()
            while reply is False:
                read = self.socket.recv_into(self.buffer)
                if not read:
                    raise ConnectionError("the server closed the floor's connection")
                reader.feed(self.buffer, 0, read)
                reply = reader.gets()
            replies.append(reply)
        return replies

    def close(self) -> None:
        self.socket.close()


@contextmanager
def recording() -> Iterator[list[list[tuple[Any, ...]]]]:
    """The commands of every pipeline the executor starts meanwhile."""
    pipelines: list[list[tuple[Any, ...]]] = []
    original = executor.Pipeline.start.__func__  # type: ignore[attr-defined]

    def start(cls: Any, client: Any, commands: list[tuple[Any, ...]], *args: Any) -> Any:
        pipelines.append(list(commands))
        return original(cls, client, commands, *args)

    executor.Pipeline.start = classmethod(start)  # type: ignore[method-assign,assignment]
    try:
        yield pipelines
    finally:
        executor.Pipeline.start = classmethod(original)  # type: ignore[method-assign]


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[[], Any]
    check: Callable[[Any], bool]
    """Whether our call's answer is the expected one (checked on every sample)."""
    merged: bool
    """The floor sends every recorded command as one pipeline (a batch call) rather than
    one round trip per recorded pipeline (single calls)."""


def sample(work: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = work()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def compare(case: Case, floor: Floor, repeats: int) -> dict[str, Any]:
    with recording() as pipelines:
        case.call()
    commands = [command for pipeline in pipelines for command in pipeline]
    rounds = [commands] if case.merged else pipelines
    run_floor = lambda: [floor.pipeline(r) for r in rounds]  # noqa: E731
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for _ in range(repeats):
        wall, cpu, result = sample(case.call)
        if not case.check(result):
            raise AssertionError(f"{case.name}: unexpected answer {str(result)[:200]}")
        ours.append((wall, cpu))
        wall, cpu, _ = sample(run_floor)
        theirs.append((wall, cpu))
    row: dict[str, Any] = {"call": case.name, "commands": len(commands),
                           "round_trips": len(pipelines), "floor_round_trips": len(rounds),
                           "samples": repeats}
    for side, samples in (("ours", ours), ("floor", theirs)):
        row[f"{side}_wall_ms"] = statistics.median(w for w, _ in samples) * 1e3
        row[f"{side}_cpu_ms"] = statistics.median(c for _, c in samples) * 1e3
    row["wall_ratio"] = row["ours_wall_ms"] / row["floor_wall_ms"]
    row["cpu_ratio"] = row["ours_cpu_ms"] / row["floor_cpu_ms"]
    return row


def cases(index: Index, chain: list[str]) -> list[Case]:
    keys = [key for page in chain[:len(chain) // 2] for key in page_keys(page)]
    single = chain[:SINGLE_CALLS]
    return [
        Case(f"match_prefix, {len(chain):,} cached pages", lambda: index.match_prefix(chain),
             lambda matched: matched == len(chain), merged=True),
        Case(f"batch_is_exist, {len(keys):,} keys", lambda: index.batch_is_exist(keys),
             lambda found: found == [True] * len(keys), merged=True),
        Case(f"batch_get, {len(keys):,} keys (a lease each: the grant_lease script)",
             lambda: index.batch_get(keys),
             lambda results: all(r.ok and r.value is not None for r in results), merged=True),
        Case(f"get_keys_by_prefix, {len(single)} calls one after another",
             lambda: [index.get_keys_by_prefix(page) for page in single],
             lambda found: all(len(keys) == 2 for keys in found), merged=False),
    ]


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    rng = random.Random(context.seed)
    tree = chain_pages(rng, scale.chain_pages)
    chain = [page for page, _ in tree]
    repeats = max(3, scale.match_repeats)
    with bench_server() as server:
        index = open_index(server)
        store_pages(index, tree, len(tree), "chain")
        floor = Floor(server.port)
        try:
            rows = [compare(case, floor, repeats) for case in cases(index, chain)]
        finally:
            floor.close()
    table = Table("Reads vs a lean hiredis pipeline of the same commands (same server, same "
                  "run, interleaved; p50 of each)",
                  ["call", "commands", "round trips", "ours wall ms", "floor wall ms",
                   "wall ours/floor", "ours client CPU ms", "floor client CPU ms",
                   "CPU ours/floor"],
                  [[r["call"], r["commands"], r["round_trips"], r["ours_wall_ms"],
                    r["floor_wall_ms"], r["wall_ratio"], r["ours_cpu_ms"], r["floor_cpu_ms"],
                    r["cpu_ratio"]] for r in rows],
                  note="Floor: the commands the call sent, recorded once, packed with "
                       "hiredis.pack_command, one sendall on a raw socket, replies read "
                       "with hiredis.Reader; batch calls as one pipeline, single calls one "
                       "round trip each. Client CPU from time.process_time.")
    return BenchmarkResult([table], {"calls": rows})
