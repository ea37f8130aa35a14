"""Side by side with the real Mooncake master: the same metadata calls, key count and batch
size on our Index (a persistent single Redis, the same without persistence, and the
in-process store) and on mooncake_master with a tcp client (benchmarks/mooncake_peer.py),
each as keys/s, with the ratio ours / theirs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mooncake_redis import Index

from . import mooncake_peer
from .common import (
    BenchmarkResult,
    Context,
    Scale,
    Table,
    bench_server,
    chunks,
    connect,
    open_index,
)
from .meter import measure
from .trees import page_keys, random_hash

NAME = "mooncake"
VALUE_SIZE = 32
"""Bytes per value on the Mooncake side (its put/get copy them; the metadata calls do not)."""

LEASE_MS = mooncake_peer.LEASE_TTL_MS
"""Both sides lease objects on get for this long; removes wait it out first."""


@dataclass(frozen=True)
class Op:
    name: str
    ours: str
    theirs: str
    """The mooncake_peer op compared (metadata only: no value copied)."""


OPS = (
    Op("put, single", "put_start + put_end", "put_start_end"),
    Op("put, batch", "batch_put_start + batch_put_end", "put_start_end_batch"),
    Op("get, single", "get (grants a lease)", "get_replica_desc"),
    Op("get, batch", "batch_get (grants leases)", "batch_get_replica_desc"),
    Op("is_exist, single", "is_exist", "is_exist"),
    Op("is_exist, batch", "batch_is_exist", "batch_is_exist"),
    Op("remove, single", "remove", "remove"),
    Op("remove, batch", "batch_remove", "batch_remove"),
)
TREE_OP = "put, batch, with parents"
"""Ours only: the batch put of pages that each name the previous page as parent."""

COPYING_OPS = {"put": "put, single", "put_batch": "put, batch", "get": "get, single",
               "get_batch": "get, batch"}
"""Mooncake calls that also copy the value (a local memcpy here), next to our metadata call."""


def tree_sizes(scale: Scale) -> list[int]:
    return []


ONE_SHARD = "00"
"""The shard of every key in the one-shard run (a batch is then one script call a step)."""


def key_set(rng: random.Random, count: int, shard: str | None) -> list[str]:
    """`count` MHA keys, two per page (`<hash>_0_k`, `<hash>_0_v`), as engines write them."""
    return [key for _ in range(count // 2) for key in page_keys(random_hash(rng, shard))]


def chained(rng: random.Random, count: int, shard: str | None, chain: int = 64
            ) -> list[tuple[str, str | None]]:
    """(key, parent) for `count` keys: pages in chains of `chain`, each naming the last."""
    items: list[tuple[str, str | None]] = []
    parent: str | None = None
    for number in range(count // 2):
        page = random_hash(rng, shard)
        items += [(key, parent) for key in page_keys(page)]
        parent = None if (number + 1) % chain == 0 else page
    return items


def run_ours(index: Index, keys: int, batch: int, seed: int,
             meter: Callable[[Callable[[], Any]], tuple[float, dict[str, float]]],
             shard: str | None = None) -> dict[str, dict[str, float]]:
    """keys/s (and what the meter adds) of every op on `index`; each op over its own
    `keys` keys, single ops one key per call, batch ops `batch` keys per call; with
    `shard`, every key falls in that shard."""
    rng = random.Random(seed)
    single, batched = key_set(rng, keys, shard), key_set(rng, keys, shard)
    groups = chunks(batched, batch)
    tree = chunks(chained(rng, keys, shard), batch)

    def ok(results: list[Any]) -> None:
        refused = [r for r in results if not r.ok]
        if refused:
            raise RuntimeError(f"{refused[0].key}: {refused[0].error}")

    def exist(found: list[bool]) -> None:
        if not all(found):
            raise RuntimeError(f"{found.count(False)} keys reported missing")

    def put_single() -> None:
        for key in single:
            index.put_start(key, VALUE_SIZE)
            index.put_end(key)

    def put_batch() -> None:
        for group in groups:
            ok(index.batch_put_start([(key, VALUE_SIZE) for key in group]))
            ok(index.batch_put_end(group))

    def put_tree() -> None:
        for group in tree:
            ok(index.batch_put_start([(key, VALUE_SIZE, parent) for key, parent in group]))
            ok(index.batch_put_end([key for key, _ in group]))

    def get_single() -> None:
        for key in single:
            if index.get(key) is None:
                raise RuntimeError(f"{key} not found")

    def get_batch() -> None:
        for group in groups:
            ok(index.batch_get(group))

    def is_exist_single() -> None:
        exist([index.is_exist(key) for key in single])

    def is_exist_batch() -> None:
        for group in groups:
            exist(index.batch_is_exist(group))

    def remove_single() -> None:
        time.sleep(LEASE_MS / 1000 + 0.1)  # the gets' leases must end first (both sides)
        for key in single:
            index.remove(key)

    def remove_batch() -> None:
        for group in groups:
            ok(index.batch_remove(group))

    work: dict[str, Callable[[], None]] = {
        "put, single": put_single, "put, batch": put_batch, TREE_OP: put_tree,
        "get, single": get_single, "get, batch": get_batch,
        "is_exist, single": is_exist_single, "is_exist, batch": is_exist_batch,
        "remove, single": remove_single, "remove, batch": remove_batch}
    rates: dict[str, dict[str, float]] = {}
    for name, call in work.items():
        seconds, extra = meter(call)
        if name == "remove, single":
            seconds -= LEASE_MS / 1000 + 0.1
        rates[name] = {"keys_per_second": keys / seconds, **extra}
    if any(index.batch_is_exist(single[:batch] + batched[:batch])):
        raise RuntimeError("removed keys are still there")
    index.close()
    return rates


def redis_backend(context: Context, persistent: bool, shard: str | None = None
                  ) -> dict[str, dict[str, float]]:
    scale = context.scale
    with bench_server(persistent=persistent) as server:
        client = connect(server)
        index = open_index(server, lease_ttl_ms=LEASE_MS)

        def meter(call: Callable[[], Any]) -> tuple[float, dict[str, float]]:
            m = measure(client, call)
            per = m.per(scale.peer_keys)
            return m.seconds, {key: per[key] for key in
                               ("redis_cpu_us", "client_cpu_us", "cpu_bound_per_second",
                                "round_trips", "evalsha")}

        return run_ours(index, scale.peer_keys, scale.peer_batch, context.seed, meter, shard)


def in_process_backend(context: Context) -> dict[str, dict[str, float]]:
    index = Index.from_url(f"memory://bench-{random.randrange(1 << 30):x}",
                           lease_ttl_ms=LEASE_MS)

    def meter(call: Callable[[], Any]) -> tuple[float, dict[str, float]]:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started, {}

    return run_ours(index, context.scale.in_process_keys, context.scale.peer_batch,
                    context.seed, meter)


PEER_ATTEMPTS = 3
"""On a busy machine a Mooncake get can outlive its 500 ms lease (LEASE_EXPIRED, -32) and
fail the peer's run; it is run again, up to this many times in all."""


def run_peer(context: Context) -> dict[str, Any]:
    """Mooncake's keys/s per op, or why it did not run."""
    if context.skip_peer:
        return {"skipped": "--skip-peer given"}
    reason = mooncake_peer.available()
    if reason is not None:
        return {"skipped": reason}
    failures = []
    for _ in range(PEER_ATTEMPTS):
        rpcs: dict[str, dict[str, float]] = {}
        try:
            rates = mooncake_peer.measure(context.scale.peer_keys, context.scale.peer_batch,
                                          VALUE_SIZE, rpcs)
        except RuntimeError as error:
            failures.append(str(error).strip().splitlines()[-1])
            continue
        return {"version": mooncake_peer.version(), "rates": rates, "master_rpcs": rpcs,
                "failed_attempts": failures}
    return {"skipped": f"the peer failed {PEER_ATTEMPTS} times, last: {failures[-1]}"}


BACKENDS = ("redis_aof", "redis_volatile", "in_process")
LABELS = {"redis_aof": "Redis, deploy/redis.conf (AOF everysec)",
          "redis_volatile": "Redis, no persistence", "in_process": "in-process (fakeredis)"}


def run(context: Context) -> BenchmarkResult:
    scale = context.scale
    peer = run_peer(context)
    ours = {"redis_aof": redis_backend(context, persistent=True),
            "redis_volatile": redis_backend(context, persistent=False),
            "in_process": in_process_backend(context),
            "redis_aof_one_shard": redis_backend(context, persistent=True, shard=ONE_SHARD)}
    theirs: dict[str, float] = peer.get("rates", {})
    if "skipped" in peer:
        print(f"mooncake side-by-side: Mooncake master skipped: {peer['skipped']}", flush=True)
    columns = ["op", "ours", "Mooncake", "Mooncake keys/s"]
    for backend in BACKENDS:
        columns += [f"{LABELS[backend]} keys/s", "ratio"]
    table = Table(
        f"Side by side with mooncake_master ({scale.peer_keys:,} keys per op, batches of "
        f"{scale.peer_batch}; ratio = ours / Mooncake, > 1 is faster)", columns)
    rows = []
    for op in (*OPS, Op(TREE_OP, "batch_put_start (parents) + batch_put_end", "")):
        their_rate = theirs.get(op.theirs)
        row: dict[str, Any] = {"op": op.name, "ours": op.ours, "theirs": op.theirs or None,
                               "mooncake_keys_per_second": their_rate}
        cells: list[Any] = [op.name, op.ours, op.theirs or "-", their_rate]
        for backend in BACKENDS:
            rate = ours[backend][op.name]["keys_per_second"]
            ratio = rate / their_rate if their_rate else None
            row[backend] = {**ours[backend][op.name], "ratio": ratio}
            cells += [rate, ratio]
        rows.append(row)
        table.rows.append(cells)
    notes = [f"In-process rows time {scale.in_process_keys:,} keys per op (fakeredis runs "
             "Lua in lupa, slowly)."]
    if "skipped" in peer:
        notes.insert(0, f"Mooncake master: skipped ({peer['skipped']}).")
    else:
        notes.insert(0, f"Mooncake: {mooncake_peer.PACKAGE} {peer['version']}, mooncake_master "
                        "on 127.0.0.1 and a tcp client in its own process; its put_start_end "
                        "calls are batch_put_session_start/end (metadata only, allocation "
                        "included), its gets batch_get_replica_desc (metadata only).")
    table.note = " ".join(notes)
    tables = [table]
    if theirs:
        copying = Table("Mooncake's calls that also copy the value (32 B memcpy, local "
                        "segment), next to our metadata call on Redis with AOF",
                        ["Mooncake call", "Mooncake keys/s", "our call", "ours keys/s",
                         "ratio"])
        for call, our_op in COPYING_OPS.items():
            rate = ours["redis_aof"][our_op]["keys_per_second"]
            copying.rows.append([call, theirs[call], our_op, rate, rate / theirs[call]])
        tables.append(copying)
    cost = Table("Our cost per key (Redis with AOF): where the time goes",
                 ["op", "keys/s", "Redis CPU µs/key", "client CPU µs/key",
                  "CPU-bound keys/s", "round trips/key", "EVALSHA/key"],
                 [[name, r["keys_per_second"], r["redis_cpu_us"], r["client_cpu_us"],
                   r["cpu_bound_per_second"], r["round_trips"], r["evalsha"]]
                  for name, r in ours["redis_aof"].items()],
                 note="CPU-bound keys/s = 1 / (Redis + client CPU per key): one process on an "
                      "otherwise idle machine, round trips not counted.")
    tables.append(cost)
    one_shard = Table(f"The same ops with every key in shard {ONE_SHARD} (one script call per "
                      "batch and step instead of one per shard touched): Redis with AOF",
                      ["op", "spread: keys/s", "EVALSHA/key", "CPU µs/key",
                       "one shard: keys/s", "EVALSHA/key", "CPU µs/key", "CPU saved",
                       "one shard / Mooncake"])
    for name, spread in ours["redis_aof"].items():
        single_shard = ours["redis_aof_one_shard"][name]
        their_rate = next((theirs.get(op.theirs) for op in OPS if op.name == name), None)
        cpu_spread = spread["redis_cpu_us"] + spread["client_cpu_us"]
        cpu_one = single_shard["redis_cpu_us"] + single_shard["client_cpu_us"]
        one_shard.rows.append([name, spread["keys_per_second"], spread["evalsha"], cpu_spread,
                               single_shard["keys_per_second"], single_shard["evalsha"],
                               cpu_one, 1 - cpu_one / cpu_spread,
                               single_shard["keys_per_second"] / their_rate if their_rate
                               else None])
    one_shard.note = ("Not a deployment choice (the shard is fixed by the key's hash): an "
                      "upper bound of what carrying all shards of a batch in one script call "
                      "per step would gain on a single Redis.")
    tables.append(one_shard)
    return BenchmarkResult(tables, {"ops": rows, "peer": peer, "ours": ours})
