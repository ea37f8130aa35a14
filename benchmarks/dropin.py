"""The Mooncake drop-in next to the real Mooncake client: 1 MiB pages put and read through
MooncakeDistributedStore, the same workload (benchmarks/dropin_workload.py) on both in one
run.

Mooncake: mooncake-transfer-engine-non-cuda's client (its own process, the peer's
interpreter) and a mooncake_master on 127.0.0.1, protocol tcp, one client segment big
enough for every page (no eviction), so its bytes move between the client's buffers and
its segment in the same process. The drop-in: mooncake_redis.mooncake on a redis-server
with deploy/redis.conf (AOF everysec), its segment's files in /dev/shm (RAM, as Mooncake's
segment is) and, second, on the disk the temp dir is on; same segment size.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from mooncake_redis.mooncake import MooncakeDistributedStore

from . import dropin_workload, mooncake_peer
from .common import BenchmarkResult, Context, Scale, Table, bench_server

NAME = "dropin"
PAGE_BYTES = 1 << 20
SIZES = {"full": (512, 32, 4 << 30), "small": (16, 4, 1 << 30)}
"""Scale name -> (pages per op, pages per batch call, segment bytes). The segment holds
every page with room to spare on both sides: no eviction is timed, and the drop-in's
per-shard admission (each of 256 shards is first given an even share of the capacity,
docs/ARCHITECTURE.md) never refuses a page."""
SHM = Path("/dev/shm")


def tree_sizes(scale: Scale) -> list[int]:
    return []


def run_mooncake(context: Context, pages: int, batch: int, segment: int) -> dict[str, Any]:
    """The real client's pages/s per op, or why it did not run."""
    if context.skip_peer:
        return {"skipped": "--skip-peer given"}
    reason = mooncake_peer.available()
    python = mooncake_peer.peer_python()
    if reason is not None or python is None:
        return {"skipped": reason}
    done = subprocess.run([python, dropin_workload.__file__, "--side", "mooncake", "--pages",
                           str(pages), "--batch", str(batch), "--page-bytes", str(PAGE_BYTES),
                           "--segment-bytes", str(segment)],
                          capture_output=True, text=True, timeout=3600,
                          env={**mooncake_peer.CLIENT_ENV, **os.environ})
    if done.returncode != 0:
        return {"skipped": "the peer's run failed: " + done.stderr.strip()[-300:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_dropin(url: str, pages: int, batch: int, segment: int, data_root: Path
               ) -> dict[str, float]:
    store = MooncakeDistributedStore()
    with tempfile.TemporaryDirectory(dir=data_root, prefix="dropin-bench-") as data_dir:
        code = store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                            "master_server_addr": url, "global_segment_size": segment,
                            "local_buffer_size": 64 << 20, "protocol": "tcp",
                            "namespace": f"bench-{uuid.uuid4().hex[:8]}",
                            "data_dir": data_dir})
        if code != 0:
            raise RuntimeError(f"the drop-in's setup returned {code}")
        try:
            return dropin_workload.run(store, pages, batch, PAGE_BYTES)
        finally:
            store.close()


def run(context: Context) -> BenchmarkResult:
    pages, batch, segment = SIZES[context.scale.name]
    theirs = run_mooncake(context, pages, batch, segment)
    roots = {"shm": SHM if SHM.is_dir() else Path(tempfile.gettempdir()),
             "disk": Path(tempfile.gettempdir())}
    with bench_server(persistent=True) as server:
        ours = {name: run_dropin(server.url, pages, batch, segment, root)
                for name, root in roots.items()}
    rates: dict[str, float] = theirs.get("results", {})
    mib = PAGE_BYTES / (1 << 20)
    table = Table(f"The Mooncake drop-in next to the real Mooncake client: {pages} pages of "
                  f"{mib:g} MiB per op, batches of {batch}, a {segment >> 30} GiB segment "
                  "(pages/s; ratio = drop-in / Mooncake, > 1 is faster)",
                  ["op", "Mooncake pages/s", "drop-in, files in RAM: pages/s", "ratio",
                   "drop-in, files on disk: pages/s", "ratio"])
    for op in dropin_workload.OPS:
        their_rate = rates.get(op)
        row: list[Any] = [op, their_rate]
        for name in roots:
            rate = ours[name][op]
            row += [rate, rate / their_rate if their_rate else None]
        table.rows.append(row)
    table.note = (
        (f"Mooncake skipped ({theirs['skipped']}). " if "skipped" in theirs else
         f"Mooncake: {mooncake_peer.PACKAGE} {theirs.get('version')}, tcp, mooncake_master "
         "on 127.0.0.1, its segment in the client's process. ") +
        f"Drop-in: redis-server with deploy/redis.conf; files in RAM = {roots['shm']}, "
        f"on disk = {roots['disk']}. One client process each; every get checked its bytes. "
        f"put and get move {mib:g} MiB each through Python bytes; the batch calls through "
        "one registered buffer.")
    return BenchmarkResult([table], {"pages": pages, "batch": batch, "page_bytes": PAGE_BYTES,
                                     "segment_bytes": segment,
                                     "mooncake": theirs, "dropin": ours})
