"""`python -m benchmarks.events [--objects N] [--count C]`: how fast the events consumer
reads a backlog on one redis-server: N stored events spread over the 256 shard streams,
read to the end by a consumer group (acks included) and by a plain reader. Prints events
per second and the server's microseconds per event (INFO commandstats: the read_events
scripts, the XREAD probes, the XACKs). Nothing asserts on speed (docs/BENCHMARKS.md)."""

from __future__ import annotations

import argparse
import hashlib

from .common import bench_server, connect, open_index
from .meter import command_delta, command_stats, timed

PAGES_PER_CALL = 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.events")
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--count", type=int, default=100, help="events per shard per read")
    args = parser.parse_args()
    with bench_server() as server:
        admin = connect(server)
        index = open_index(server, events_max_len=args.objects)
        keys = [hashlib.sha256(str(n).encode()).hexdigest() + "_0_k"
                for n in range(args.objects)]
        for start in range(0, len(keys), PAGES_PER_CALL):
            chunk = keys[start:start + PAGES_PER_CALL]
            index.batch_put_start([(key, 1024) for key in chunk])
            index.batch_put_end(chunk)
        print(f"{args.objects:,} stored events in 256 streams, count={args.count}")
        for label, group in (("group (acked)", "bench"), ("plain", None)):
            consumer = index.events(group, "c1" if group else None, start="earliest",
                                    follow=False, count=args.count, block_ms=1)
            before = command_stats(admin)
            seconds, read = timed(lambda consumer=consumer: sum(1 for _ in consumer))
            spent = command_delta(before, command_stats(admin))
            mine = {name: spent[name] for name in ("evalsha", "xread", "xack") if name in spent}
            server_usec = sum(usec for _, usec in mine.values())
            calls = ", ".join(f"{name} {calls:,}" for name, (calls, _) in mine.items())
            print(f"{label:14} {read:,} events in {seconds:.2f} s: {read / seconds:,.0f} "
                  f"events/s, Redis {server_usec / read:.1f} us/event ({calls}; xread "
                  "counts the scripts' own reads too)")


if __name__ == "__main__":
    main()
