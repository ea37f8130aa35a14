"""One client process of the engine-request benchmark (benchmarks/engine.py): it runs a stream
of engine requests against mooncake-redis or against the real Mooncake master and prints
one JSON line with its CPU and wall time.

An engine request, as an SGLang or vLLM worker with a Mooncake-style store makes one: check
a chain of pages with batch_is_exist (two keys a page, `<hash>_0_k` and `<hash>_0_v`), then
store the pages it lacked (16, with their parents) in one batch. Each client serves its own
conversations, each a shared 8-page system prompt and then turns of 16 new pages: the turns
check chains of 24, 40, 56 and 72 pages. The same keys on both sides.

- ours: `Index.batch_is_exist(keys)`, then `Index.batch_put(items)`, the one-phase put with
  parents (metadata: the bytes are the data plane's), one Redis round trip each;
- the floor: what Redis itself needs for the same work, from the leanest client there is (a
  socket and hiredis): a pipeline of one HMGET per page for the probe, then one EVALSHA
  of the floor's register.lua (benchmarks/floor_lua: the same writes ours leaves, done
  blind, events included) for the 16 pages;
- Mooncake: `batch_is_exist(keys)`, then `batch_put_session_start(keys, sizes)` and
  `batch_put_session_end(keys)`: its metadata-only write (the master allocates a replica
  in this client's segment; no bytes move), the closest match.

Standard library only at import: it runs under the peer's interpreter for Mooncake's side.
The process waits for a line on stdin before its first request (so every client starts
at once), and prints {"requests", "cpu_s", "wall_s", "pages_checked"}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

SYSTEM_PAGES = 8
NEW_PAGES = 16
TURNS = 4
KEYS = ("_0_k", "_0_v")
OBJECT_BYTES = 32 << 10
"""What each object counts (a page of KV for one layer group, small enough that no store
fills up: eviction is not what this measures)."""


def page(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def requests(client: int, conversations: int, seed: int
             ) -> Iterator[tuple[list[str], list[tuple[str, str]]]]:
    """(the keys a request checks, the new pages it stores with their parents), in order:
    conversation after conversation, turn after turn."""
    system = [page(seed, "system", n) for n in range(SYSTEM_PAGES)]
    for number in range(conversations):
        chain = list(system)
        for turn in range(TURNS):
            new = [page(seed, client, number, turn, n) for n in range(NEW_PAGES)]
            chain += new
            keys = [h + suffix for h in chain for suffix in KEYS]
            parents = [(h, chain[len(chain) - NEW_PAGES + i - 1])
                       for i, h in enumerate(new)]
            yield keys, parents


def run_ours(url: str, namespace: str, stream: list[Any]) -> None:
    from mooncake_redis import Index

    index = Index.from_url(url, namespace=namespace)
    go()
    checked = 0
    for keys, parents in stream:
        found = index.batch_is_exist(keys)
        checked += len(found)
        items = [(h + suffix, OBJECT_BYTES, parent) for h, parent in parents
                 for suffix in KEYS]
        results = index.batch_put(items)
        if not all(result.ok for result in results):
            bad = next(result for result in results if not result.ok)
            raise SystemExit(f"batch_put refused {bad.key}: {bad.error}")
    done(len(stream), checked)


class RawRedis:
    """A socket and hiredis's reader and packer: the least a Python client can do."""

    def __init__(self, url: str):
        import socket
        import urllib.parse

        import hiredis

        where = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((where.hostname or "127.0.0.1",
                                              where.port or 6379))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pack = hiredis.pack_command
        self.reader = hiredis.Reader()

    def run(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.sock.sendall(b"".join(map(self.pack, commands)))
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = self.reader.gets()
            if reply is False:
                self.reader.feed(self.sock.recv(1 << 16))
            elif isinstance(reply, Exception):
                raise SystemExit(f"the floor's Redis answered {reply}")
            else:
                replies.append(reply)
        return replies


def run_floor(url: str, namespace: str, stream: list[Any]) -> None:
    from mooncake_redis.keys import KeySchema
    from mooncake_redis.settings import Settings

    from .floor import FLOOR_TOKEN, LUA

    redis = RawRedis(url)
    node = KeySchema(namespace).node
    fields = [f"o:{suffix}" for suffix in KEYS]
    (sha,) = redis.run([("SCRIPT", "LOAD", (LUA / "register.lua").read_text())])
    head = [FLOOR_TOKEN, OBJECT_BYTES, Settings().events_max_len, len(KEYS), *KEYS]
    go()
    checked = 0
    for keys, parents in stream:
        probes = [("HMGET", node(key[:64]), *fields) for key in keys[::len(KEYS)]]
        checked += sum(map(len, redis.run(probes)))
        pages = [key for h, parent in parents for key in (node(h), node(parent) if parent else "")]
        redis.run([("EVALSHA", sha, 0, *head, *pages)])
    done(len(stream), checked)


def run_mooncake(master: str, metadata: str, stream: list[Any]) -> None:
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    code = store.setup("127.0.0.1", metadata, 1 << 30, 16 << 20, "tcp", "", master)
    if code != 0:
        raise SystemExit(f"MooncakeDistributedStore.setup returned {code}")
    go()
    checked = 0
    refused: dict[int, int] = {}
    try:
        for keys, parents in stream:
            found = store.batch_is_exist(keys)
            checked += len(found)
            new = [h + suffix for h, _ in parents for suffix in KEYS]
            codes = list(store.batch_put_session_start(new, [OBJECT_BYTES] * len(new)))
            codes += store.batch_put_session_end(new)
            for code in codes:  # kept count of, not fatal: the run says how many
                if code != 0:
                    refused[code] = refused.get(code, 0) + 1
        done(len(stream), checked, refused)
    finally:  # close() unmounts the segment: seconds, not part of the requests
        store.close()


STARTED = [0.0, 0.0]
"""process_time() and perf_counter() when the parent said go."""


def go() -> None:
    """Wait for the parent's signal, so every client starts at once; the clocks start."""
    print("ready", flush=True)
    sys.stdin.readline()
    STARTED[0], STARTED[1] = time.process_time(), time.perf_counter()


def done(requests: int, checked: int, refused: dict[int, int] | None = None) -> None:
    """The clocks stop and the report goes out: what follows (closing the store) is no
    request's work, and the parent reads the servers' CPU as soon as every report is in.
    `refused`: Mooncake's codes other than 0 and how many puts got each."""
    cpu, wall = time.process_time() - STARTED[0], time.perf_counter() - STARTED[1]
    print(json.dumps({"requests": requests, "pages_checked": checked // len(KEYS),
                      "cpu_s": cpu, "wall_s": wall, "pid": os.getpid(),
                      "refused": sum((refused or {}).values()),
                      "codes": sorted(refused or {})}), flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_client",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=("ours", "floor", "mooncake"), required=True)
    parser.add_argument("--url", help="ours and the floor: the Redis URL")
    parser.add_argument("--namespace", default="engine")
    parser.add_argument("--master", help="Mooncake: the master's host:port")
    parser.add_argument("--metadata", help="Mooncake: the metadata server's URL")
    parser.add_argument("--client", type=int, default=0, help="this client's number")
    parser.add_argument("--conversations", type=int, default=25,
                        help=f"conversations of {TURNS} requests each (default 25)")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stream = list(requests(args.client, args.conversations, args.seed))
    if args.side == "ours":
        run_ours(args.url, args.namespace, stream)
    elif args.side == "floor":
        run_floor(args.url, args.namespace, stream)
    else:
        run_mooncake(args.master, args.metadata, stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
