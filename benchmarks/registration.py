"""Registration: nodes/s of batch and single put_start and path B, next to the EVALSHA ceiling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice

import redis
from tqdm import tqdm

from mooncake_redis import Index

from .common import (
    OBJECT_BYTES,
    BenchmarkResult,
    Context,
    Page,
    RoundTrips,
    Scale,
    Table,
    bench_server,
    chat_pages,
    command_delta,
    command_stats,
    connect,
    open_index,
    redis_cpu_seconds,
    timed,
)

NAME = "registration"
CEILING_SCRIPT = "redis.call('INCR', KEYS[1]) return 1"
"""The cheapest useful script: one key touched, one reply; what no script call can beat."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


@dataclass
class Measured:
    path: str
    nodes: int
    seconds: float
    round_trips: int
    commands: dict[str, tuple[int, int]]
    redis_cpu_seconds: float

    @property
    def rate(self) -> float:
        return self.nodes / self.seconds


def chunks(pages: Sequence[Page], size: int) -> list[Sequence[Page]]:
    return [pages[start:start + size] for start in range(0, len(pages), size)]


def measure(client: redis.Redis, path: str, nodes: int, work: Callable[[], None]) -> Measured:
    """Time `work`, counting its round trips and the commands Redis ran for it."""
    before, cpu_before = command_stats(client), redis_cpu_seconds(client)
    with RoundTrips().counting() as trips:
        seconds, _ = timed(work)
    return Measured(path, nodes, seconds, trips.count, command_delta(before, command_stats(client)),
                    redis_cpu_seconds(client) - cpu_before)


def batches(label: str, groups: Sequence[Sequence[Page]], send: Callable[[Sequence[Page]], None]
            ) -> Callable[[], None]:
    def work() -> None:
        for group in tqdm(groups, desc=label, unit="batch", leave=False):
            send(group)
    return work


def ceiling(client: redis.Redis, calls: int, per_pipeline: int) -> Callable[[], None]:
    sha = client.script_load(CEILING_SCRIPT)

    def work() -> None:
        for start in range(0, calls, per_pipeline):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(per_pipeline, calls - start)):
                pipe.evalsha(sha, 1, "bench:ceiling")
            pipe.execute()
    return work


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    size = scale.registration_batch
    with bench_server() as server:
        client = connect(server)
        # One object per node (MLA keys: the key is its own 64-hex prefix), so nodes = objects.
        trees = [list(islice(chat_pages(context.seed + n), count))
                 for n, count in enumerate([scale.registration_nodes] * 2 + [scale.single_nodes])]
        batch_index, path_b_index, single_index = (open_index(server, namespace=f"reg{n}")
                                                   for n in range(3))
        for group in tqdm(chunks(trees[1], 1000), desc="path B objects", leave=False):
            path_b_index.batch_put_start([(page, OBJECT_BYTES, None) for page, _ in group])
            path_b_index.batch_put_end([page for page, _ in group])

        def put_batch(index: Index) -> Callable[[Sequence[Page]], None]:
            return lambda group: index.batch_put_start(
                [(page, OBJECT_BYTES, parent) for page, parent in group])

        measured = [
            measure(client, "ceiling: pipelined EVALSHA", scale.registration_nodes,
                    ceiling(client, scale.registration_nodes, size)),
            measure(client, f"batch_put_start ({size}/call)", scale.registration_nodes,
                    batches("batch_put_start", chunks(trees[0], size), put_batch(batch_index))),
            measure(client, f"batch_register_radix_tree_node ({size}/call)",
                    scale.registration_nodes,
                    batches("register", chunks(trees[1], size), lambda group:
                            path_b_index.batch_register_radix_tree_node(
                                [(page, parent, [page]) for page, parent in group]))),
            measure(client, "ceiling: one EVALSHA per round trip", scale.single_nodes,
                    ceiling(client, scale.single_nodes, 1)),
            measure(client, "put_start (single, with parent)", scale.single_nodes,
                    batches("put_start", chunks(trees[2], 1), lambda group:
                            single_index.put_start(group[0][0], OBJECT_BYTES, group[0][1]))),
        ]
    pipelined_ceiling = measured[0].rate
    table = Table("Registration: nodes/s next to the EVALSHA ceiling of the same run",
                  ["path", "nodes", "seconds", "nodes/s", "ratio to pipelined ceiling",
                   "EVALSHA/node", "round trips/node", "Redis CPU µs/node",
                   "Redis busy"])
    rows = []
    for m in measured:
        evalsha = m.commands.get("evalsha", (0, 0))[0]
        row = {"path": m.path, "nodes": m.nodes, "seconds": m.seconds, "nodes_per_second": m.rate,
               "ratio_to_pipelined_ceiling": m.rate / pipelined_ceiling,
               "evalsha_per_node": evalsha / m.nodes,
               "round_trips_per_node": m.round_trips / m.nodes,
               "redis_cpu_usec_per_node": m.redis_cpu_seconds * 1e6 / m.nodes,
               "redis_busy": m.redis_cpu_seconds / m.seconds}
        rows.append(row)
        table.rows.append([row["path"], m.nodes, m.seconds, m.rate,
                           row["ratio_to_pipelined_ceiling"], row["evalsha_per_node"],
                           row["round_trips_per_node"], row["redis_cpu_usec_per_node"],
                           row["redis_busy"]])
    return BenchmarkResult([table], {"paths": rows})

