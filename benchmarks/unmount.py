"""Unmounting a segment: how fast its sweep invalidates replicas, deletes the objects left
without one and cascades their nodes away.

Run: `python -m benchmarks.unmount --chains 1000 --depth 50` (its own redis-server on a
free port). It builds `chains` chains of `depth` nodes with 2 objects a node: `_0_k` on
the segment only, `_1_k` on the segment and another one at even depths (so those objects
and their nodes outlive the unmount), on the segment only at odd depths; then times
`Index.unmount_segment`. Not run by `python -m benchmarks`; docs/BENCHMARKS.md has the
figures.
"""

from __future__ import annotations

import argparse
import time

from mooncake_redis import Index

from .common import bench_server, chunks, open_index
from .registration import pages_of

SEGMENT, OTHER = "node-a:7000", "node-b:7000"


def build(index: Index, chains: int, depth: int) -> int:
    items = []
    for chain in range(chains):
        parent = None
        for level, (page, _) in enumerate(pages_of(chain, depth)):
            both = [(SEGMENT, f"0x{chain:x}.{level}"), (OTHER, f"/b/{chain}/{level}")]
            items.append((f"{page}_0_k", 4, parent, [(SEGMENT, f"0x{chain:x}:{level}")]))
            items.append((f"{page}_1_k", 4, parent, both if level % 2 == 0 else both[:1]))
            parent = page
    for group in chunks(items, 2000):
        assert all(r.ok for r in index.batch_put_start(group))
        assert all(r.ok for r in index.batch_put_end([key for key, *_ in group]))
    return len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=50)
    args = parser.parse_args()
    with bench_server() as server:
        index = open_index(server, namespace="unmount", events_max_len=1000)
        index.mount_segment(SEGMENT, 1 << 40)
        index.mount_segment(OTHER, 1 << 40)
        started = time.perf_counter()
        objects = build(index, args.chains, args.depth)
        built = time.perf_counter() - started
        started = time.perf_counter()
        report = index.unmount_segment(SEGMENT)
        took = time.perf_counter() - started
        usage = index.usage()
    print(f"built {objects:,} objects in {built:.1f} s ({objects / built:,.0f} objects/s)")
    print(f"unmount: {report.nodes:,} nodes swept, {report.objects:,} objects lost a replica, "
          f"{report.deleted:,} deleted, {report.bytes:,} bytes freed in {took:.2f} s "
          f"({report.objects / took:,.0f} objects/s); left {usage.objects:,} objects in "
          f"{usage.nodes:,} nodes")


if __name__ == "__main__":
    main()
