"""redis-server's instructions per page of the registration hot path, counted by valgrind's
callgrind: unlike CPU time, the count does not move with the machine's load, so a change
to a script can be measured on a busy machine in seconds (docs/BENCHMARKS.md, section 11).

    python -m benchmarks.instructions [--pages 2000] [--shards 16] [--no-parent]
    python -m benchmarks.instructions --commands   # one redis.call's cost in a script

One redis-server under callgrind; per phase (the floor's register.lua, batch_put_start
with parents, batch_put_end; 500 pages a call, 16 shards unless told) the counters are zeroed before
and dumped after, and the phase's instructions divided by its pages. A phase's count
includes everything the server does for it: reading the commands, the scripts and the
commands they call, the replies. A get phase follows (batch_get of the same keys, a lease
granted each: grant_lease), counted per object; then two removal phases, per removed object
(batch_remove of whole pages, 500 pages a call, the cascade included): as many leaf
pages, one under each page (each node dies and is unlinked from its parent, which
stays: the common case), then the pages themselves, newest first (chains: a page whose
child went in the same call dies in the cascade's unlink). Last, single calls (put_start,
put_end, get, remove of one key without a parent), counted per call: there the per-call
cost (the command, the script's prelude, TIME, the stats) is all there is.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from mooncake_redis import Index

from .common import chunks
from .floor import FloorScripts
from .registration import checked, pages_of
from .trees import KEYS_PER_PAGE, OBJECT_BYTES, page_keys, put_items, random_hash

CALL_PAGES = 500
SHARDS = 16
WARM_UP_PAGES = 100
SINGLE_CALLS = 300
"""Single calls (one key each, no parent) counted per call, after the batch phases."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counted(pid: int, out: Path, work: Callable[[], Any]) -> int:
    """The instructions that process `pid`, running under callgrind with its output in
    `out`.<pid>, ran during `work` (its counters zeroed before, dumped after)."""
    def control(flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    control("-z")
    work()
    control("-d")
    dumps = sorted(out.parent.glob(f"{out.name}.{pid}*"), key=lambda path: path.stat().st_mtime)
    found = re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no total in {dumps[-1]}")
    return int(found.group(1))


class CountedServer:
    """A redis-server under callgrind; `count(work)` is the instructions `work` made it run."""

    def __init__(self, out_dir: Path):
        self.port = free_port()
        self.out = out_dir / "callgrind.out"
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}.%p",
             # only what serves clients (reading and running commands, writing replies):
             # serverCron's ticks (~0.2M instructions each, at 10 a second of valgrind's
             # slow time) would otherwise land in whichever call they met
             "--toggle-collect=readQueryFromClient", "--toggle-collect=writeToClient",
             "redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
             # under valgrind a call of 500 pages outlives the default 5 s: no BUSY
             "--busy-reply-threshold", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0?socket_timeout=600"
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        for _ in range(600):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server under valgrind did not start")

    def count(self, work: Callable[[], Any]) -> int:
        return counted(self.process.pid, self.out, work)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def run(pages_count: int, parents: bool, shards: int = SHARDS) -> dict[str, float]:
    """Instructions per page of each phase (get and remove: per object)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="mooncake-callgrind-") as out_dir:
        server = CountedServer(Path(out_dir))
        try:
            # leases of 1 ms: the get phase grants them as usual, and they are over before
            # the removal phases (which would refuse a leased object)
            ours = Index.from_url(server.url, namespace="ours", shard_count=shards,
                                  lease_ttl_ms=1)
            floor = Index.from_url(server.url, namespace="floor", shard_count=shards)
            scripts = FloorScripts(server.client)
            pages = pages_of(7, WARM_UP_PAGES + pages_count)
            warm, pages = pages[:WARM_UP_PAGES], pages[WARM_UP_PAGES:]

            def items(group: Sequence[Any]) -> list[tuple[str, int, str | None]]:
                return put_items(group if parents else [(page, None) for page, _ in group])

            def store(group: Sequence[Any]) -> None:
                stored = items(group)
                checked(ours.batch_put_start(stored))
                checked(ours.batch_put_end([key for key, _, _ in stored]))

            def removals(group: Sequence[Any]) -> list[list[str]]:
                return [[key for page, _ in part for key in page_keys(page)]
                        for part in chunks(group, CALL_PAGES)]

            store(warm)
            scripts.register(floor, warm)
            groups = [items(group) for group in chunks(pages, CALL_PAGES)]
            rng = random.Random(11)
            leaves = [(random_hash(rng), page) for page, _ in pages]
            leaf_keys, page_keys_newest = removals(leaves), removals(pages[::-1])
            phases: list[tuple[str, Callable[[], Any]]] = [
                ("floor", lambda: [scripts.register(floor, group)
                                   for group in chunks(pages, CALL_PAGES)]),
                ("put_start", lambda: [checked(ours.batch_put_start(group))
                                       for group in groups]),
                ("put_end", lambda: [checked(ours.batch_put_end([key for key, _, _ in group]))
                                     for group in groups]),
                ("get", lambda: [checked(ours.batch_get([key for key, _, _ in group]))
                                 for group in groups]),
                ("", lambda: [store(group) for group in chunks(leaves, CALL_PAGES)]),
                ("remove_leaves", lambda: [checked(ours.batch_remove(keys))
                                           for keys in leaf_keys]),
                ("remove_pages", lambda: [checked(ours.batch_remove(keys))
                                          for keys in page_keys_newest]),
            ]
            singles = [page_keys(random_hash(rng))[0] for _ in range(SINGLE_CALLS)]
            phases += [
                ("single_put_start", lambda: [ours.put_start(key, OBJECT_BYTES)
                                              for key in singles]),
                ("single_put_end", lambda: [ours.put_end(key) for key in singles]),
                ("single_get", lambda: [ours.get(key) for key in singles]),
                ("single_remove", lambda: [ours.remove(key) for key in singles]),
            ]
            counts = {}
            for name, work in phases:  # '': setup, not counted
                if name:
                    counts[name] = server.count(work) / len(pages)
                else:
                    work()
            for name in ("single_put_start", "single_put_end", "single_get", "single_remove"):
                counts[name] = counts[name] * len(pages) / len(singles)
            counts["get"] /= KEYS_PER_PAGE
            counts["remove_leaves"] /= KEYS_PER_PAGE
            counts["remove_pages"] /= KEYS_PER_PAGE
            ours.close()
            floor.close()
        finally:
            server.close()
    counts["ratio"] = (counts["put_start"] + counts["put_end"]) / counts["floor"]
    return counts


COMMANDS = {
    "TIME": "redis.call('TIME')",
    "HMGET of a node (put_end's 11 fields)": "redis.call('HMGET', KEYS[1], 'p', 'nc', 'no', "
    "'np', 'ps', 'psn', 'nh', 'ns', 'lm', 'o:_0_k', 'o:_0_v')",
    "HMGET of the same 11 fields, no such key": "redis.call('HMGET', KEYS[2], 'p', 'nc', 'no', "
    "'np', 'ps', 'psn', 'nh', 'ns', 'lm', 'o:_0_k', 'o:_0_v')",
    "HGETALL of a node": "redis.call('HGETALL', KEYS[1])",
    "HSET of 4 fields": "redis.call('HSET', KEYS[3], 'no', '2', 'np', '2', 'ps', '1', 'b', '2')",
    "ZADD": "redis.call('ZADD', KEYS[4], 1, 'm')",
    "XADD (a stored event)": "redis.call('XADD', KEYS[5], 'MAXLEN', '~', 128, '*', 'type', "
    "'stored', 'hash', KEYS[1], 'suffix', '_0_k', 'size', '1048576')",
}
"""What one redis.call of the hot path costs inside a script (command_costs)."""

CALLS_PER_SCRIPT = 10


def command_costs(shards: int = SHARDS) -> dict[str, float]:
    """redis-server instructions of one redis.call of each COMMANDS entry inside a script
    (10 a script, less a script that only returns), on a node as put_start leaves it, and
    of each call's fixed cost: an EVALSHA of `return 1` without the library and with all
    of it."""
    from mooncake_redis.scripts import library_for

    with tempfile.TemporaryDirectory(prefix="mooncake-callgrind-") as out_dir:
        server = CountedServer(Path(out_dir))
        try:
            index = Index.from_url(server.url, namespace="costs", shard_count=shards)
            rng = random.Random(5)
            parent, child = random_hash(rng), random_hash(rng)
            store = [(key, OBJECT_BYTES, None) for key in page_keys(parent)]
            checked(index.batch_put_start(store))
            checked(index.batch_put_end([key for key, _, _ in store]))
            checked(index.batch_put_start([(key, OBJECT_BYTES, parent)
                                           for key in page_keys(child)]))
            keys = [index.schema.node(child), "costs:absent", "costs:scratch-hash",
                    "costs:scratch-zset", "costs:scratch-stream"]
            client = server.client
            base = client.script_load("return 1")
            with_library = client.script_load(library_for("return 1") + "\nreturn 1")
            scripts = {name: client.script_load(
                f"for _ = 1, {CALLS_PER_SCRIPT} do {call} end return 1")
                for name, call in COMMANDS.items()}

            def per_call(sha: str) -> float:
                return server.count(lambda: [client.evalsha(sha, len(keys), *keys)
                                             for _ in range(SINGLE_CALLS)]) / SINGLE_CALLS

            fixed = per_call(base)
            costs = {"EVALSHA of return 1 (the call's fixed cost)": fixed,
                     "... with the whole library (_lib.lua) defined": per_call(with_library)}
            for name, sha in scripts.items():
                costs[name] = (per_call(sha) - fixed) / CALLS_PER_SCRIPT
            index.close()
        finally:
            server.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=SHARDS, help="the namespaces' shard_count")
    parser.add_argument("--no-parent", action="store_true",
                        help="put_start without parents (no link step)")
    parser.add_argument("--commands", action="store_true",
                        help="instead: what one redis.call of the hot path costs in a script")
    args = parser.parse_args()
    if args.commands:
        for name, cost in command_costs(args.shards).items():
            print(f"{cost:>9,.0f}  {name}")
        return
    counts = run(args.pages, not args.no_parent, args.shards)
    print(f"instructions per page ({args.pages} pages, {args.shards} shards, {CALL_PAGES} a call"
          f"{', no parents' if args.no_parent else ''}): floor {counts['floor']:,.0f}, "
          f"put_start {counts['put_start']:,.0f}, put_end {counts['put_end']:,.0f}; "
          f"(put_start + put_end) / floor {counts['ratio']:.2f}; "
          f"per object got (a lease each): get {counts['get']:,.0f}; "
          f"per removed object: remove_leaves {counts['remove_leaves']:,.0f}, "
          f"remove_pages {counts['remove_pages']:,.0f}; "
          f"per single call (one key, no parent): put_start {counts['single_put_start']:,.0f}, "
          f"put_end {counts['single_put_end']:,.0f}, get {counts['single_get']:,.0f}, "
          f"remove {counts['single_remove']:,.0f}")


if __name__ == "__main__":
    main()
