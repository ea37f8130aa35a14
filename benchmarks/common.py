"""What every benchmark shares: scales, throwaway servers, chat-shaped trees, timing, tables."""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from mooncake_redis import Index

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from redis_server import RedisServer  # noqa: E402  (tests/ is no package: path first)

NAMESPACE = "mc"
OBJECT_BYTES = 1 << 20
"""A 16-token page of a mid-size model at fp16, one K or V half on one rank."""

KEYS_PER_PAGE = 2
"""MHA keys: `<hash>_0_k` and `<hash>_0_v` (one rank), so a tree of N objects has N/2 nodes."""

BUILD_PAGES = 500
"""Pages per batch_put_start call while building trees (1,000 objects per call)."""

SYSTEM_PROMPTS = 16
SYSTEM_PAGES = 8
BRANCH_PROBABILITY = 0.25
"""Share of conversations that branch off an earlier chat (a regenerated or edited turn)."""


@dataclass(frozen=True)
class Scale:
    """Sizes of one run; `full` is what docs/BENCHMARKS.md reports, `small` the smoke test."""

    name: str
    prefix_objects: tuple[int, ...]
    prefix_queries: int
    scan_budget_seconds: float
    eviction_objects: tuple[int, ...]
    eviction_leaves: int
    memory_objects: int
    memory_samples: int
    registration_nodes: int
    registration_batch: int
    single_nodes: int
    chain_pages: int
    chains: int
    match_repeats: int


SCALES = {
    "full": Scale("full", prefix_objects=(10_000, 100_000, 1_000_000), prefix_queries=2000,
                  scan_budget_seconds=15.0, eviction_objects=(100_000, 1_000_000),
                  eviction_leaves=10_000, memory_objects=1_000_000, memory_samples=300,
                  registration_nodes=50_000, registration_batch=500, single_nodes=5_000,
                  chain_pages=1000, chains=20, match_repeats=200),
    "small": Scale("small", prefix_objects=(1_000, 4_000), prefix_queries=100,
                   scan_budget_seconds=0.5, eviction_objects=(2_000, 4_000),
                   eviction_leaves=200, memory_objects=4_000, memory_samples=20,
                   registration_nodes=1_000, registration_batch=500, single_nodes=100,
                   chain_pages=1000, chains=1, match_repeats=5),
}


# -- results ---------------------------------------------------------------------------


@dataclass
class Table:
    """One printed table; also stored as is in results.json."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def render(self) -> str:
        cells = [self.columns] + [[format_cell(value) for value in row] for row in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [f"### {self.title}", ""]
        for number, row in enumerate(cells):
            lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
            if number == 0:
                lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
        return "\n".join(lines)


@dataclass
class BenchmarkResult:
    tables: list[Table]
    results: dict[str, Any]
    """Machine-readable numbers (results.json), keyed for the smoke test."""


def format_cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def to_json(value: Any) -> Any:
    return asdict(value) if isinstance(value, Table) else value


# -- timing ----------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (with few samples, p99 is simply the slowest)."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def latency(samples: Sequence[float]) -> dict[str, float]:
    """p50/p99 in milliseconds and the sample count."""
    return {"p50_ms": percentile(samples, 0.50) * 1e3, "p99_ms": percentile(samples, 0.99) * 1e3,
            "samples": len(samples)}


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def command_stats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Server-side (calls, usec) per command, from INFO commandstats."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["calls"]), int(s["usec"]))
            for name, s in stats.items()}


def command_delta(before: dict[str, tuple[int, int]],
                  after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Calls and usec per command between two command_stats (the INFO calls left out)."""
    delta = {}
    for name, (calls, usec) in after.items():
        old_calls, old_usec = before.get(name, (0, 0))
        if name != "info" and calls > old_calls:
            delta[name] = (calls - old_calls, usec - old_usec)
    return delta


def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU time the redis-server process has used (user + system), from INFO cpu."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class RoundTrips:
    """Counts client round trips: every command and every pipeline goes out through one
    send_packed_command call of a redis-py connection (patched while counting)."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def counting(self) -> Iterator[RoundTrips]:
        connection_class = redis.connection.AbstractConnection
        original = connection_class.send_packed_command

        def counted(connection: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(connection, *args, **kwargs)

        connection_class.send_packed_command = counted  # type: ignore[method-assign]
        try:
            yield self
        finally:
            connection_class.send_packed_command = original  # type: ignore[method-assign]


# -- servers ---------------------------------------------------------------------------


@contextmanager
def bench_server(*extra_args: str) -> Iterator[RedisServer]:
    """A redis-server of our own on a free port, in a temp dir, persisting nothing; DEBUG
    is enabled so benchmarks can load tree snapshots (DEBUG RELOAD NOSAVE)."""
    server = RedisServer("--enable-debug-command", "yes", *extra_args)
    try:
        yield server
    finally:
        server.stop()


def connect(server: RedisServer) -> redis.Redis:
    """An admin client with no socket timeout: SAVE, DEBUG RELOAD and full SCANs of a
    1M-object tree take longer than redis-py's default of 5 s."""
    return redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=None)


def open_index(server: RedisServer, namespace: str = NAMESPACE, **config: Any) -> Index:
    return Index.from_url(server.url, namespace=namespace, **config)


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


# -- trees -----------------------------------------------------------------------------

Page = tuple[str, "str | None"]
"""(prefix hash, parent hash or None for a root), parents always before children."""


def random_hash(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def chat_pages(seed: int) -> Iterator[Page]:
    """An endless chat-shaped tree: 16 system prompts of 8 pages; each conversation starts
    at a system prompt (or, one in four, branches off a page of a recent conversation)
    and runs 1-8 turns of 2-10 pages, each page the child of the one before."""
    rng = random.Random(seed)
    system_tips: dict[int, str] = {}
    recent: deque[str] = deque(maxlen=4096)
    while True:
        if recent and rng.random() < BRANCH_PROBABILITY:
            parent: str | None = recent[rng.randrange(len(recent))]
        else:
            prompt = rng.randrange(SYSTEM_PROMPTS)
            if prompt not in system_tips:
                parent = None
                for _ in range(SYSTEM_PAGES):
                    page = random_hash(rng)
                    yield page, parent
                    parent = page
                system_tips[prompt] = page
            parent = system_tips[prompt]
        for _ in range(rng.randint(1, 8) * rng.randint(2, 10)):
            page = random_hash(rng)
            yield page, parent
            recent.append(page)
            parent = page


def chain_pages(rng: random.Random, length: int) -> list[Page]:
    """One conversation of `length` pages under a fresh root."""
    pages: list[Page] = []
    parent: str | None = None
    for _ in range(length):
        page = random_hash(rng)
        pages.append((page, parent))
        parent = page
    return pages


def page_keys(prefix_hash: str) -> list[str]:
    return [f"{prefix_hash}_0_{half}" for half in "kv"[:KEYS_PER_PAGE]]


def store_pages(index: Index, pages: Iterable[Page], total: int, label: str) -> None:
    """put_start (with parents) and put_end every page's objects, BUILD_PAGES pages per
    batch call: the fast way to build a big tree through the public API."""
    iterator = iter(pages)
    with tqdm(total=total * KEYS_PER_PAGE, unit="obj", desc=label, leave=False) as bar:
        while chunk := list(islice(iterator, BUILD_PAGES)):
            items = [(key, OBJECT_BYTES, parent) for page, parent in chunk
                     for key in page_keys(page)]
            index.batch_put_start(items)
            index.batch_put_end([key for key, _, _ in items])
            bar.update(len(items))


@dataclass(frozen=True)
class Snapshot:
    """An RDB of the chat tree at one size, and what building it cost."""

    path: Path
    objects: int
    nodes: int
    build_seconds: float
    used_memory_delta: int
    """used_memory growth while this size was built incrementally from an empty server."""


class TreeSnapshots:
    """The chat tree at every size a run needs, built once through the public API in one
    server (each size grows from the one below, saved as an RDB), then loaded into each
    benchmark's own server with DEBUG RELOAD NOSAVE: a 1M-object tree costs one build
    per run instead of one per benchmark. With a kept directory, snapshots are reused
    across runs while the library's code and the tree's shape are unchanged."""

    def __init__(self, directory: Path, seed: int):
        self.directory = directory
        self.seed = seed
        self._snapshots: dict[int, Snapshot] = {}

    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.seed}:{KEYS_PER_PAGE}:{OBJECT_BYTES}".encode())
        for path in sorted([*ROOT.glob("lua/*.lua"), *ROOT.glob("mooncake_redis/*.py"),
                            Path(__file__)]):
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def prepare(self, sizes: Iterable[int]) -> None:
        """Build every size not built yet (or reuse a kept one with the same fingerprint)."""
        wanted = sorted(set(sizes) - set(self._snapshots))
        if not wanted:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fingerprint = self.fingerprint()
        for objects in list(wanted):
            meta = self.directory / f"tree-{objects}.json"
            if meta.exists() and json.loads(meta.read_text()).get("fingerprint") == fingerprint:
                stored = json.loads(meta.read_text())
                self._snapshots[objects] = Snapshot(
                    path=Path(stored["path"]), objects=objects, nodes=stored["nodes"],
                    build_seconds=stored["build_seconds"],
                    used_memory_delta=stored["used_memory_delta"])
                wanted.remove(objects)
        if wanted:
            self._build(wanted, fingerprint)

    def _build(self, sizes: Sequence[int], fingerprint: str) -> None:
        pages = chat_pages(self.seed)
        with bench_server() as server:
            client = connect(server)
            index = open_index(server)
            empty = used_memory(client)
            built, seconds = 0, 0.0
            for objects in sizes:
                grow = objects // KEYS_PER_PAGE - built
                took, _ = timed(partial(store_pages, index, islice(pages, grow), grow,
                                        f"tree {objects:,}"))
                seconds += took
                built += grow
                client.save()
                path = self.directory / f"tree-{objects}.rdb"
                shutil.copyfile(server.directory / "dump.rdb", path)
                snapshot = Snapshot(path=path, objects=objects, nodes=index.usage().nodes,
                                    build_seconds=seconds,
                                    used_memory_delta=used_memory(client) - empty)
                self._snapshots[objects] = snapshot
                meta = {**asdict(snapshot), "path": str(path), "fingerprint": fingerprint}
                (self.directory / f"tree-{objects}.json").write_text(json.dumps(meta))

    def load(self, server: RedisServer, objects: int) -> Snapshot:
        """Replace the server's data with the tree of `objects` objects."""
        self.prepare([objects])
        snapshot = self._snapshots[objects]
        shutil.copyfile(snapshot.path, server.directory / "dump.rdb")
        connect(server).execute_command("DEBUG", "RELOAD", "NOSAVE")
        return snapshot

    def pages(self, objects: int) -> list[Page]:
        """The pages of the tree of `objects` objects, regenerated from the seed."""
        return list(islice(chat_pages(self.seed), objects // KEYS_PER_PAGE))


@dataclass
class Context:
    """What a benchmark gets from the runner."""

    scale: Scale
    snapshots: TreeSnapshots
    seed: int
