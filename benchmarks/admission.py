"""Admission's refusal path and keeper: what borrowing limit costs a put, next to a put
that fits its shard's limit, and what one keeper run costs at 16 and 256 shards.

Run: `python -m benchmarks.admission` (its own redis-server on a free port). A put that
fits: 1 KB objects into a namespace with room in every shard. A put that borrows: all the
limit is moved to shard 00 first, so every 1 KB put elsewhere is refused once, reads the
shards, takes from shard 00, gives to its own shard and is sent again. A keeper run:
`admission.rebalance` on a namespace of 500 objects (no job holds the lock). Each figure
is the median of `--repeats` runs of `--puts` puts (or 50 keeper runs), wall time, one
client. Not run by `python -m benchmarks`; docs/ARCHITECTURE.md ("Capacity and
admission") has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from collections.abc import Callable, Sequence

from mooncake_redis import Index
from mooncake_redis.capacity.admission import rebalance

from .common import bench_server, namespace_context, open_index
from .registration import pages_of

CAPACITY = 10**12
KB = 1000


def keys(run: str, count: int, index: Index, avoid: str | None = None) -> list[str]:
    pages = (page for page, _ in pages_of(zlib.crc32(run.encode()), 4 * count))
    return [f"{page}_0_k" for page in pages if index.schema.shard(page) != avoid][:count]


def per_call(calls: Sequence[Callable[[], object]]) -> float:
    started = time.perf_counter()
    for call in calls:
        call()
    return (time.perf_counter() - started) / len(calls)


def all_limit_in_first_shard(index: Index) -> str:
    first = index.schema.shards[0]
    for shard in index.schema.shards:
        index.client.hset(index.schema.shard_keys(shard).stats, "limit",
                          CAPACITY if shard == first else 0)
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    fits, borrows, keeper16, keeper256 = [], [], [], []
    with bench_server() as server:
        for run in range(args.repeats):
            index = open_index(server, namespace=f"fits{run}", capacity_bytes=CAPACITY)
            fits.append(per_call([lambda k=k, i=index: i.put_start(k, KB)
                                  for k in keys(f"f{run}", args.puts, index)]))
            index = open_index(server, namespace=f"borrows{run}", capacity_bytes=CAPACITY)
            first = all_limit_in_first_shard(index)
            borrows.append(per_call([lambda k=k, i=index: i.put_start(k, KB)
                                     for k in keys(f"b{run}", args.puts, index, first)]))
            assert index.usage().used_bytes == args.puts * KB
            for count, figures in ((16, keeper16), (256, keeper256)):
                index = open_index(server, namespace=f"keeper{count}-{run}",
                                   capacity_bytes=CAPACITY, shard_count=count)
                index.batch_put_start([(k, KB) for k in keys(f"k{run}", 500, index)])
                ctx = namespace_context(index)
                figures.append(per_call([lambda c=ctx: rebalance(c)] * 50))
    median = statistics.median
    print(f"put_start that fits its shard's limit: {median(fits) * 1e6:,.0f} us a put")
    print(f"put_start that borrows (refused, 3 round trips, sent again): "
          f"{median(borrows) * 1e6:,.0f} us a put ({median(borrows) / median(fits):.1f}x)")
    print(f"keeper run: {median(keeper16) * 1e3:.2f} ms at 16 shards, "
          f"{median(keeper256) * 1e3:.2f} ms at 256")


if __name__ == "__main__":
    main()
