"""redis-server's instructions per page of the hot paths, next to the floor's (what Redis
itself needs for the same work: benchmarks/floor_lua/), counted by valgrind's callgrind:
unlike CPU time, the count does not move with the machine's load, so it can be compared
on a busy machine (docs/BENCHMARKS.md).

    python -m benchmarks.instructions [--pages 2000] [--shards 16] [--no-parent]
    python -m benchmarks.instructions --commands   # one redis.call's cost in a script

One redis-server under callgrind, counting only what serves clients; per phase the
counters are zeroed before and dumped after, and the phase's instructions divided by its
pages (objects, requests). A phase's count includes everything the server does for it:
reading the commands, the scripts and the commands they call, the replies. Every
namespace writes its events (events_max_len's default), the floor too. Phases, each in a
namespace of its own:
- the one-phase put (batch_put with parents) and the floor's register.lua of the same
  pages, at 16 pages a call (an engine request's) and at 500;
- batch_put_start with parents + batch_put_end (500 a call); batch_get (a lease each),
  per object; removal per removed object (batch_remove of whole pages, 500 a call, the
  cascade included): a leaf page under each page, then the pages, newest first;
- single calls (one key, no parent), per call: the per-call cost is all there is;
- the engine request (benchmarks/engine_client.py: batch_is_exist of a 24-72-page chain,
  batch_put of its 16 new pages) against the floor (the same HMGETs in a pipeline, then
  register.lua), per request;
- eviction: a job down to half the tree (oldest leaves first, chains cascading) against
  the floor's evict.lua taking as many leaves of the same tree, per evicted object.
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
from mooncake_redis.settings import Settings

from .common import chunks
from .engine_client import requests as engine_requests
from .floor import FloorScripts
from .registration import checked, pages_of
from .trees import KEYS_PER_PAGE, OBJECT_BYTES, page_keys, put_items, random_hash

CALL_PAGES = 500
CALL_SIZES = (16, CALL_PAGES)
"""Pages a call: an engine request's, and a big batch's."""
ENGINE_CONVERSATIONS = 6
TURNS_PER_CONVERSATION = 4
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
    """Instructions per page of each phase (get and remove: per object; engine: per
    request; evict: per evicted object)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="mooncake-callgrind-") as out_dir:
        server = CountedServer(Path(out_dir))
        try:
            counts = _phases(server, pages_count, parents, shards)
        finally:
            server.close()
    for size in CALL_SIZES:
        counts[f"ratio_put_{size}"] = counts[f"put_{size}"] / counts[f"floor_{size}"]
    counts["ratio"] = (counts["put_start"] + counts["put_end"]) / counts[f"floor_{CALL_PAGES}"]
    counts["ratio_engine"] = counts["engine"] / counts["engine_floor"]
    counts["ratio_evict"] = counts["evict"] / counts["evict_floor"]
    return counts


def _phases(server: CountedServer, pages_count: int, parents: bool,
            shards: int) -> dict[str, float]:
    events = Settings().events_max_len  # every namespace writes its events, as by default
    scripts = FloorScripts(server.client)
    rng = random.Random(11)
    counts: dict[str, float] = {}

    def index(name: str, **settings: Any) -> Index:
        # leases of 1 ms: the get phase grants them as usual, and they are over before the
        # removal and eviction phases (which would refuse a leased object)
        return Index.from_url(server.url, namespace=name, shard_count=shards, lease_ttl_ms=1,
                              **settings)

    def items(group: Sequence[Any]) -> list[tuple[str, int, str | None]]:
        return put_items(group if parents else [(page, None) for page, _ in group])

    def fresh(seed: int) -> tuple[list[Any], list[Any]]:
        """Warm-up pages (the parents of none of the counted ones) and counted pages."""
        pages = pages_of(seed, WARM_UP_PAGES + pages_count)
        return pages[:WARM_UP_PAGES], pages[WARM_UP_PAGES:]

    # the one-phase put and the floor, at a request's size and at a big batch's
    for size in CALL_SIZES:
        warm, pages = fresh(size)
        counts.update(_put_and_floor(server, scripts, index(f"floor{size}"),
                                     index(f"put{size}"), items, warm, pages, size, events))

    # put_start + put_end (the two-phase put of writers that reserve first), get, removal
    ours = index("ours")
    warm, pages = fresh(7)
    checked(ours.batch_put(items(warm)))
    groups = [items(group) for group in chunks(pages, CALL_PAGES)]
    leaves = [(random_hash(rng), page) for page, _ in pages]

    def removals(group: Sequence[Any]) -> list[list[str]]:
        return [[key for page, _ in part for key in page_keys(page)]
                for part in chunks(group, CALL_PAGES)]

    leaf_keys, page_keys_newest = removals(leaves), removals(pages[::-1])
    phases: list[tuple[str, Callable[[], Any]]] = [
        ("put_start", lambda: [checked(ours.batch_put_start(group)) for group in groups]),
        ("put_end", lambda: [checked(ours.batch_put_end([key for key, _, _ in group]))
                             for group in groups]),
        ("get", lambda: [checked(ours.batch_get([key for key, _, _ in group]))
                         for group in groups]),
        ("", lambda: [checked(ours.batch_put(put_items(group)))
                      for group in chunks(leaves, CALL_PAGES)]),
        ("remove_leaves", lambda: [checked(ours.batch_remove(keys)) for keys in leaf_keys]),
        ("remove_pages", lambda: [checked(ours.batch_remove(keys))
                                  for keys in page_keys_newest]),
    ]
    singles = [page_keys(random_hash(rng))[0] for _ in range(SINGLE_CALLS)]
    phases += [
        ("single_put", lambda: [ours.put(key, OBJECT_BYTES) for key in singles]),
        ("single_get", lambda: [ours.get(key) for key in singles]),
        ("single_remove", lambda: [ours.remove(key) for key in singles]),
        ("single_put_start", lambda: [ours.put_start(key, OBJECT_BYTES) for key in singles]),
        ("single_put_end", lambda: [ours.put_end(key) for key in singles]),
    ]
    for name, work in phases:  # '': setup, not counted
        if name:
            counts[name] = server.count(work) / len(pages)
        else:
            work()
    for name in [name for name, _ in phases if name.startswith("single_")]:
        counts[name] = counts[name] * len(pages) / len(singles)
    for name in ("get", "remove_leaves", "remove_pages"):
        counts[name] /= KEYS_PER_PAGE
    ours.close()
    counts.update(_engine(server, index, scripts, events))
    counts.update(_eviction(server, index, scripts, fresh(9)[1], events))
    return counts


def _put_and_floor(server: CountedServer, scripts: FloorScripts, floor: Index, ours: Index,
                   items: Callable[[Sequence[Any]], list[Any]], warm: Sequence[Any],
                   pages: Sequence[Any], size: int, events: int) -> dict[str, float]:
    scripts.register(floor, warm, events)
    checked(ours.batch_put(items(warm)))
    groups = list(chunks(pages, size))
    puts = [items(group) for group in groups]
    counted = {
        f"floor_{size}": server.count(lambda: [scripts.register(floor, group, events)
                                               for group in groups]) / len(pages),
        f"put_{size}": server.count(lambda: [checked(ours.batch_put(group))
                                             for group in puts]) / len(pages)}
    floor.close()
    ours.close()
    return counted


def _engine(server: CountedServer, index: Callable[..., Index], scripts: FloorScripts,
            events: int) -> dict[str, float]:
    """An engine request (benchmarks/engine_client.py: check a 24-72-page chain, store 16
    new pages with parents), ours and the floor's (the same HMGETs, register.lua)."""
    ours, floor = index("engine"), index("enginefloor")
    node = floor.schema.node
    fields = [f"o:{key[64:]}" for key in page_keys("0" * 64)]
    stream = list(engine_requests(0, ENGINE_CONVERSATIONS, 5))
    for keys, new in stream[:TURNS_PER_CONVERSATION]:  # one conversation to warm up
        ours.batch_is_exist(keys)
        checked(ours.batch_put(put_items(new)))
        scripts.register(floor, new, events)
    stream = stream[TURNS_PER_CONVERSATION:]

    def theirs() -> None:
        for keys, new in stream:
            pipe = server.client.pipeline(transaction=False)
            for key in keys[::KEYS_PER_PAGE]:
                pipe.hmget(node(key[:64]), fields)
            pipe.execute()
            scripts.register(floor, new, events)

    counted = {
        "engine": server.count(lambda: [(ours.batch_is_exist(keys),
                                         checked(ours.batch_put(put_items(new))))
                                        for keys, new in stream]) / len(stream),
        "engine_floor": server.count(theirs) / len(stream)}
    ours.close()
    floor.close()
    return counted


def _eviction(server: CountedServer, index: Callable[..., Index], scripts: FloorScripts,
              pages: Sequence[Any], events: int) -> dict[str, float]:
    """Instructions per evicted object: an eviction job of ours taking half the pages
    (oldest leaves first, chains cascading) and the floor's evict.lua taking as many
    leaves from the same tree."""
    bytes_ = len(pages) * KEYS_PER_PAGE * OBJECT_BYTES
    ours = index("evict", capacity_bytes=bytes_, high_watermark=1.0)
    floor = index("evictfloor")
    for group in chunks(pages, CALL_PAGES):
        checked(ours.batch_put(put_items(group)))
        scripts.register(floor, group, events)
    report: list[Any] = []
    ours_count = server.count(lambda: report.append(ours.evict(target_ratio=0.5)))
    (done,) = report
    floor_result: list[tuple[int, int]] = []
    floor_count = server.count(lambda: floor_result.append(scripts.evict(floor, done.leaves,
                                                                          events)))
    ours.close()
    floor.close()
    return {"evict": ours_count / done.objects,
            "evict_floor": floor_count / floor_result[0][1]}


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
    print(f"redis-server instructions ({args.pages} pages, {args.shards} shards"
          f"{', no parents' if args.no_parent else ''}; events on, as by default)")
    for size in CALL_SIZES:
        print(f"  one-phase put, {size} pages a call: {counts[f'put_{size}']:,.0f} a page; "
              f"the floor {counts[f'floor_{size}']:,.0f}; ratio "
              f"{counts[f'ratio_put_{size}']:.2f}")
    print(f"  put_start + put_end, {CALL_PAGES} a call: {counts['put_start']:,.0f} + "
          f"{counts['put_end']:,.0f} a page; ratio to the floor {counts['ratio']:.2f}")
    print(f"  engine request (check a 24-72-page chain, put 16 pages): "
          f"{counts['engine']:,.0f}; the floor {counts['engine_floor']:,.0f}; ratio "
          f"{counts['ratio_engine']:.2f}")
    print(f"  eviction, a job to half the tree: {counts['evict']:,.0f} an object; the floor "
          f"{counts['evict_floor']:,.0f}; ratio {counts['ratio_evict']:.2f}")
    print(f"  per object got (a lease each): {counts['get']:,.0f}; per removed object: "
          f"leaves {counts['remove_leaves']:,.0f}, pages {counts['remove_pages']:,.0f}")
    print("  single calls (one key, no parent): " + ", ".join(
        f"{name[7:]} {counts[name]:,.0f}" for name in counts if name.startswith("single_")))


if __name__ == "__main__":
    main()
