"""The consumer process of the events kill test (tests/test_events.py): reads a namespace's
events through a consumer group and appends each event's shard and stream ID to a file
(flushed, so a SIGKILL loses nothing written) before its loop body ends, so the event is
acked only after it is on record. With "follow" it runs until killed; with "drain" it
stops once every stream is read to its end.

    events_consumer.py URL NAMESPACE GROUP CONSUMER OUT_FILE follow|drain
"""

from __future__ import annotations

import sys

from mooncake_redis import Index
from mooncake_redis.errors import EventsLost


def main(url: str, namespace: str, group: str, consumer: str, out_file: str,
         mode: str) -> None:
    index = Index.from_url(url, namespace=namespace, read_only=True)
    reader = index.events(group, consumer, start="earliest", count=7, block_ms=50,
                          follow=mode == "follow")
    with open(out_file, "a", buffering=1) as out:
        for item in reader:
            if isinstance(item, EventsLost):
                out.write(f"lost {item.shard}\n")
            else:
                out.write(f"{item.shard} {item.id}\n")
    reader.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
