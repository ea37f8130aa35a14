"""What every benchmark shares: scales, throwaway servers, meters, chat-shaped trees, tables."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import redis
from tqdm import tqdm

from mooncake_redis import Index
from mooncake_redis.context import Context as NamespaceContext
from mooncake_redis.context import shared_scripts
from mooncake_redis.executor import load_scripts

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from redis_server import RedisServer  # noqa: E402  (tests/ is no package: path first)

from .meter import timed  # noqa: E402
from .trees import (  # noqa: E402
    BUILD_PAGES,
    KEYS_PER_PAGE,
    OBJECT_BYTES,
    Page,
    chat_pages,
    put_items,
)

NAMESPACE = "mc"
DEPLOY_CONF = ROOT / "deploy" / "redis.conf"
"""The shipped Redis config (AOF everysec + RDB snapshots, noeviction)."""


@dataclass(frozen=True)
class Scale:
    """Sizes of one run; `full` is what docs/BENCHMARKS.md reports, `small` the smoke test."""

    name: str
    prefix_objects: tuple[int, ...]
    prefix_queries: int
    scan_budget_seconds: float
    eviction_objects: tuple[int, ...]
    eviction_leaves: int
    eviction_repeats: int
    """Each (tree, setting) is timed this many times, interleaved; the median is reported."""
    memory_objects: int
    memory_samples: int
    registration_nodes: int
    registration_batch: int
    batch_sweep: tuple[int, ...]
    """Pages per batch_put_start call tried by the batch-size sweep."""
    sweep_nodes: int
    single_nodes: int
    chain_pages: int
    chains: int
    match_repeats: int
    peer_keys: int
    """Keys per operation in the side-by-side with the Mooncake master."""
    peer_batch: int
    in_process_keys: int
    """Keys per operation on the in-process store (fakeredis runs Lua slowly)."""


SCALES = {
    "full": Scale("full", prefix_objects=(10_000, 100_000, 1_000_000), prefix_queries=2000,
                  scan_budget_seconds=15.0, eviction_objects=(100_000, 1_000_000),
                  eviction_leaves=20_000, eviction_repeats=3, memory_objects=1_000_000,
                  memory_samples=300,
                  registration_nodes=50_000, registration_batch=500,
                  batch_sweep=(50, 200, 500, 2000, 8000), sweep_nodes=16_000,
                  single_nodes=5_000, chain_pages=1000, chains=20, match_repeats=200,
                  peer_keys=20_000, peer_batch=200, in_process_keys=2_000),
    "small": Scale("small", prefix_objects=(1_000, 4_000), prefix_queries=100,
                   scan_budget_seconds=0.5, eviction_objects=(2_000, 4_000),
                   eviction_leaves=200, eviction_repeats=1, memory_objects=4_000, memory_samples=20,
                   registration_nodes=1_000, registration_batch=500,
                   batch_sweep=(50, 500), sweep_nodes=500, single_nodes=100,
                   chain_pages=1000, chains=1, match_repeats=5,
                   peer_keys=400, peer_batch=50, in_process_keys=100),
}


# -- results ---------------------------------------------------------------------------


@dataclass
class Table:
    """One printed table; also stored as is in results.json."""

    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""
    """Printed under the table (how to read it)."""

    def render(self) -> str:
        cells = [self.columns] + [[format_cell(value) for value in row] for row in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [f"### {self.title}", ""]
        for number, row in enumerate(cells):
            lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
            if number == 0:
                lines.append("|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


@dataclass
class BenchmarkResult:
    tables: list[Table]
    results: dict[str, Any]
    """Machine-readable numbers (results.json), keyed for the smoke test and the goals."""


def format_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
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


# -- servers ---------------------------------------------------------------------------


@contextmanager
def bench_server(*extra_args: str, persistent: bool = False) -> Iterator[RedisServer]:
    """A redis-server of our own on a free port, in a temp dir, with DEBUG enabled so
    benchmarks can load tree snapshots (DEBUG RELOAD NOSAVE). It persists nothing, unless
    `persistent`: then it runs deploy/redis.conf (AOF everysec, RDB snapshots) in its
    temp dir (Redis checks the file's `dir /data` before the command line can move it,
    so the copy it reads leaves that line out)."""
    with tempfile.TemporaryDirectory(prefix="mooncake-bench-conf-") as conf_dir:
        config = None
        if persistent:
            config = Path(conf_dir) / "redis.conf"
            config.write_text("".join(line for line in DEPLOY_CONF.read_text().splitlines(True)
                                      if not line.startswith("dir ")))
        server = RedisServer("--enable-debug-command", "yes", *extra_args, config_file=config)
        try:
            yield server
        finally:
            server.stop()


def connect(server: RedisServer) -> redis.Redis:
    """An admin client with no socket timeout: SAVE, DEBUG RELOAD and full SCANs of a
    1M-object tree take longer than redis-py's default of 5 s."""
    return redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=None)


def open_index(server: RedisServer, namespace: str = NAMESPACE, **settings: Any) -> Index:
    """An Index on the server, its scripts loaded, so no NOSCRIPT round trip is timed."""
    index = Index.from_url(server.url, namespace=namespace, **settings)
    load_scripts(index.client, shared_scripts().all)
    return index


def namespace_context(index: Index) -> NamespaceContext:
    """The index's namespace opened once more beside it, for benchmarks of the parts below
    the Index (the evictor with a per-round hook, the keeper): same client, same stored
    settings, nothing written at open."""
    return NamespaceContext.open(index.client, index.namespace, read_only=True)


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


# -- trees -----------------------------------------------------------------------------

def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def store_pages(index: Index, pages: Iterable[Page], total: int, label: str) -> None:
    """put_start (with parents) and put_end every page's objects, BUILD_PAGES pages per
    batch call: the fast way to build a big tree through the public API."""
    iterator = iter(pages)
    with tqdm(total=total * KEYS_PER_PAGE, unit="obj", desc=label, leave=False) as bar:
        while chunk := list(islice(iterator, BUILD_PAGES)):
            items = put_items(chunk)
            refused = [r for r in index.batch_put_start(items) if not r.ok]
            refused += [r for r in index.batch_put_end([key for key, _, _ in items]) if not r.ok]
            if refused:
                raise RuntimeError(f"building a tree: {len(refused)} refused, e.g. "
                                   f"{refused[0].key}: {refused[0].error}")
            bar.update(len(items))
    index.close()  # the last batch's deferred cleanups (confirmed pending links)


@dataclass(frozen=True)
class Snapshot:
    """An RDB of the chat tree at one size, and what building it cost."""

    path: Path
    objects: int
    nodes: int
    build_seconds: float
    """Wall time of building this size from empty (batch_put_start + batch_put_end)."""
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
        """The library's code and the source of everything that shapes the trees."""
        digest = hashlib.sha256(f"{self.seed}:{KEYS_PER_PAGE}:{OBJECT_BYTES}".encode())
        for path in sorted([*ROOT.glob("lua/*.lua"),
                            *ROOT.glob("mooncake_redis/*.py"),
                            Path(__file__).with_name("trees.py")]):
            digest.update(path.read_bytes())
        digest.update(inspect.getsource(store_pages).encode())
        return digest.hexdigest()[:16]

    def built(self) -> list[Snapshot]:
        return [self._snapshots[size] for size in sorted(self._snapshots)]

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
    skip_peer: bool = False
    """Leave out the Mooncake master even where it can run."""
