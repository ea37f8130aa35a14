"""The drop-in benchmark's workload, on any MooncakeDistributedStore: the real Mooncake
client (run under the peer's interpreter, which has no mooncake-redis: this file needs the
standard library only) or mooncake_redis.mooncake's.

Pages of `page_bytes` each, every op over its own fresh keys, timed on one client:
  put            put(key, bytes): a copy of the value through the store
  get            get(key) -> bytes
  batch_put_from batch_put_from(keys, addresses, sizes) from one registered buffer
  batch_get_into batch_get_into(keys, addresses, sizes) into one registered buffer
  batch_is_exist batch_is_exist(keys)
  batch_remove   batch_remove(keys, force=True)
Each get checks the bytes it got (a wrong page fails the run).

    python benchmarks/dropin_workload.py --side mooncake --pages 256 --batch 32 \
        --segment-bytes 4294967296
prints one JSON line: {"results": {op: pages per second}, "version": ...}.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPS = ("put", "get", "batch_put_from", "batch_get_into", "batch_is_exist", "batch_remove")


def page_of(number: int, size: int) -> bytes:
    """Page contents that differ per page (so a page read from the wrong place shows)."""
    head = number.to_bytes(8, "little")
    return (head * (size // 8 + 1))[:size]


def run(store: Any, pages: int, batch: int, page_bytes: int) -> dict[str, float]:
    """Pages per second of each op of OPS on a set-up store."""
    tag = uuid.uuid4().hex[:8]
    single = [f"bench-{tag}-single-{n}" for n in range(pages)]
    batched = [f"bench-{tag}-batch-{n}" for n in range(pages)]
    values = [page_of(n, page_bytes) for n in range(pages)]
    source = (ctypes.c_char * (batch * page_bytes))()
    target = (ctypes.c_char * (batch * page_bytes))()
    source_at, target_at = ctypes.addressof(source), ctypes.addressof(target)
    for buffer_at in (source_at, target_at):
        _ok(store.register_buffer(buffer_at, batch * page_bytes), "register_buffer")
    rates = {}

    def timed(name: str, body: Callable[[], None]) -> None:
        started = time.perf_counter()
        body()
        rates[name] = pages / (time.perf_counter() - started)

    def put_all() -> None:
        for key, value in zip(single, values):
            _ok(store.put(key, value), "put")

    def get_all() -> None:
        for key, value in zip(single, values):
            if store.get(key) != value:
                raise RuntimeError(f"get({key}) did not return its page")

    def put_batches() -> None:
        for start in range(0, pages, batch):
            keys = batched[start:start + batch]
            for slot, number in enumerate(range(start, start + len(keys))):
                ctypes.memmove(source_at + slot * page_bytes, values[number], page_bytes)
            codes = store.batch_put_from(keys, [source_at + slot * page_bytes
                                                for slot in range(len(keys))],
                                         [page_bytes] * len(keys))
            for code in codes:
                _ok(code, "batch_put_from")

    def get_batches() -> None:
        for start in range(0, pages, batch):
            keys = batched[start:start + batch]
            read = store.batch_get_into(keys, [target_at + slot * page_bytes
                                               for slot in range(len(keys))],
                                        [page_bytes] * len(keys))
            for slot, (number, got) in enumerate(zip(range(start, start + len(keys)), read)):
                if got != page_bytes or ctypes.string_at(target_at + slot * page_bytes,
                                                         page_bytes) != values[number]:
                    raise RuntimeError(f"batch_get_into({keys[slot]}) returned {got}")

    def exist_batches() -> None:
        for start in range(0, pages, batch):
            if store.batch_is_exist(batched[start:start + batch]) != [1] * len(
                    batched[start:start + batch]):
                raise RuntimeError("batch_is_exist missed a stored page")

    def remove_batches() -> None:
        for keys in (single, batched):
            for start in range(0, pages, batch):
                for code in store.batch_remove(keys[start:start + batch], force=True):
                    _ok(code, "batch_remove")

    timed("put", put_all)
    timed("get", get_all)
    timed("batch_put_from", put_batches)
    timed("batch_get_into", get_batches)
    timed("batch_is_exist", exist_batches)
    timed("batch_remove", remove_batches)
    rates["batch_remove"] *= 2  # it removed both key sets
    for buffer_at in (source_at, target_at):
        store.unregister_buffer(buffer_at)
    return rates


def _ok(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} returned {code}")


def mooncake_side(pages: int, batch: int, page_bytes: int, segment: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.mooncake_peer import running_peer, version

    with running_peer(global_segment_size=segment, local_buffer_size=max(
            64 << 20, 2 * page_bytes), lease_ttl_ms=10_000) as peer:
        return {"results": run(peer.store, pages, batch, page_bytes), "version": version()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=["mooncake"], required=True)
    parser.add_argument("--pages", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--page-bytes", type=int, default=1 << 20)
    parser.add_argument("--segment-bytes", type=int, default=1 << 30)
    args = parser.parse_args(argv)
    print(json.dumps(mooncake_side(args.pages, args.batch, args.page_bytes,
                                   args.segment_bytes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
