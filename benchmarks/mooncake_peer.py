"""The real Mooncake Store master as a peer: start it on loopback and time its metadata calls.

The peer is PyPI's `mooncake-transfer-engine-non-cuda` (the `mooncake_master` binary and the
`mooncake.store` client), installed by scripts/install_mooncake_peer.sh into its own venv
(.venv-peer at the top of the checkout, or $MOONCAKE_PEER_PYTHON names its interpreter).
This module needs only the standard library: when the running interpreter cannot import
`mooncake.store`, `measure` runs this file under the peer's interpreter and reads its JSON.

How close to "metadata only" each timed call is (one client process, master on 127.0.0.1,
protocol tcp, one client-mounted segment, so every replica lives in this process's memory):

- put / put_batch: PutStart and PutEnd RPCs to the master (it allocates one replica in the
  segment), with the value copied in between. The segment is local, so the copy is a memcpy
  of `value_size` bytes, not a network transfer; with tiny values it costs next to nothing.
- put_start_end / put_start_end_batch: `batch_put_session_start` + `batch_put_session_end`,
  the same PutStart/PutEnd RPCs (allocation included) with NO data copied at all: Mooncake's
  metadata-only write path and the closest match to our put_start.
- get / get_batch: a replica-list RPC, then a local memcpy of the value (a transfer).
- get_replica_desc / batch_get_replica_desc: the replica-list RPC alone (metadata-only read).
- is_exist / batch_is_exist, remove / batch_remove: metadata only.

Every rate is keys per second (for batch calls: keys, not calls). Each op runs once over its
own `n_keys` keys; `master_rpcs` in the JSON gives the master's request counters per op (from
its /metrics page) so the RPC count behind each number can be checked.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = os.environ.get("MOONCAKE_PEER_PACKAGE", "mooncake-transfer-engine-non-cuda")
"""The peer's PyPI package (install_mooncake_peer.sh's MOONCAKE_PEER_PACKAGE: 0.3.14 exists
only as mooncake-transfer-engine-cuda13)."""
PEER_PYTHON_ENV = "MOONCAKE_PEER_PYTHON"
PEER_VENV_ENV = "MOONCAKE_PEER_VENV"
DEFAULT_VENV = ROOT / ".venv-peer"
INSTALL_HINT = "run scripts/install_mooncake_peer.sh"
LEASE_TTL_MS = 500

CLIENT_ENV = {
    # Advertise the transfer engine's RPC on loopback; by default it picks eth0's address.
    "MC_TCP_BIND_ADDRESS": "127.0.0.1",
    # Mooncake's own log level (GLOG_* is not honoured): no INFO lines per setup.
    "MC_LOG_LEVEL": "WARNING",
}

OPS: dict[str, str] = {
    "put": "put(key, value)",
    "put_batch": "put_batch(keys, values)",
    "put_start_end": "batch_put_session_start([key]) + batch_put_session_end([key])",
    "put_start_end_batch": "batch_put_session_start(keys) + batch_put_session_end(keys)",
    "get": "get(key)",
    "get_batch": "get_batch(keys)",
    "get_replica_desc": "get_replica_desc(key)",
    "batch_get_replica_desc": "batch_get_replica_desc(keys)",
    "is_exist": "is_exist(key)",
    "batch_is_exist": "batch_is_exist(keys)",
    "remove": "remove(key)",
    "batch_remove": "batch_remove(keys)",
}


def _package_dir() -> Path | None:
    """The installed `mooncake` package of this interpreter that has store.so, if any."""
    spec = importlib.util.find_spec("mooncake")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location)
        if any(path.glob("*store*.so")):  # store.so; 0.3.14: _store.cpython-*.so
            return path
    return None


def peer_python() -> str | None:
    """The interpreter that can import mooncake.store: $MOONCAKE_PEER_PYTHON, this one, or
    the python of $MOONCAKE_PEER_VENV (the install script's variable) or of .venv-peer."""
    named = os.environ.get(PEER_PYTHON_ENV)
    if named:
        return named
    if _package_dir() is not None:
        return sys.executable
    venv_python = Path(os.environ.get(PEER_VENV_ENV) or DEFAULT_VENV) / "bin" / "python"
    return str(venv_python) if venv_python.exists() else None


_PROBE = """
import importlib.metadata, json, pathlib, sys, mooncake, mooncake.store
print(json.dumps({"dir": str(pathlib.Path(mooncake.__file__).parent),
                  "version": importlib.metadata.version(sys.argv[1])}))
"""


@cache
def _probe(python: str) -> dict[str, str]:
    """Imports mooncake.store under `python`: {"dir", "version"} or {"error"}."""
    try:
        done = subprocess.run([python, "-c", _PROBE, PACKAGE], capture_output=True, text=True,
                              timeout=120, env={**CLIENT_ENV, **os.environ})
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": f"cannot run {python}: {error}"}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        return {"error": f"{python} cannot import mooncake.store: {lines[-1]}"}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def available() -> str | None:
    """None when the peer can run here, else a one-line reason to print as a skip message."""
    python = peer_python()
    if python is None:
        return f"{PACKAGE} is not installed ({INSTALL_HINT})"
    for lib, package in (("ibverbs", "libibverbs1"), ("rdmacm", "librdmacm1")):
        if ctypes.util.find_library(lib) is None:
            return f"lib{lib} is missing (apt-get install {package}, or {INSTALL_HINT})"
    probe = _probe(python)
    if "error" in probe:
        return f"{probe['error']} ({INSTALL_HINT})"
    master = Path(probe["dir"]) / "mooncake_master"
    if not os.access(master, os.X_OK):
        return f"mooncake_master binary missing or not executable at {master}"
    return None


def version() -> str | None:
    """The installed peer package's version, if it can run."""
    python = peer_python()
    return None if python is None else _probe(python).get("version")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _stop(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Peer:
    """A running master and a tcp store client (`mooncake.store.MooncakeDistributedStore`)."""

    store: Any
    master_address: str
    metadata_server: str
    metrics_url: str
    workdir: Path

    def master_counters(self) -> dict[str, float]:
        """The master's request and item counters (`master_*_total`) from its /metrics."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        counters = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("master_") and name.endswith(("requests_total", "items_total")):
                counters[name.removeprefix("master_").removesuffix("_total")] = float(value)
        return counters


@dataclass
class Master:
    """A mooncake_master process on loopback ports, with its HTTP metadata server."""

    process: subprocess.Popen[bytes]
    rpc_port: int
    http_port: int
    metrics_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.rpc_port}"

    @property
    def metadata_server(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metadata"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


def start_master(binary: Path, workdir: Path, lease_ttl_ms: int = LEASE_TTL_MS,
                 startup_timeout: float = 30.0) -> Master:
    """Starts `binary` (mooncake_master) on free loopback ports, logging into `workdir`, and
    waits until its RPC, metadata and metrics ports answer. The caller stops it (_stop)."""
    log = workdir / "master.log"
    for attempt in range(3):  # a freed port can be taken again before the master binds it
        rpc, http, metrics = _free_ports(3)
        command = [str(binary), f"--rpc_port={rpc}",
                   "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
                   "--http_metadata_server_host=127.0.0.1",
                   f"--http_metadata_server_port={http}", "--metrics_host=127.0.0.1",
                   f"--metrics_port={metrics}", f"--default_kv_lease_ttl={lease_ttl_ms}",
                   f"--log_dir={workdir}", "--logtostderr"]
        with log.open("ab") as out:
            master = subprocess.Popen(command, cwd=workdir, stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + startup_timeout
        while master.poll() is None and time.monotonic() < deadline and not (
                _listening(rpc) and _listening(http) and _listening(metrics)):
            time.sleep(0.05)
        if master.poll() is None and time.monotonic() < deadline:
            return Master(master, rpc, http, metrics)
        _stop(master)
        if attempt == 2:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"mooncake_master did not start: {command}\n{tail}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_peer(global_segment_size: int = 256 << 20, local_buffer_size: int = 64 << 20,
                 lease_ttl_ms: int = LEASE_TTL_MS, startup_timeout: float = 30.0
                 ) -> Iterator[Peer]:
    """Starts mooncake_master (with its built-in HTTP metadata server) on free loopback ports
    in a temp dir, and a tcp client in this process that mounts `global_segment_size` bytes;
    closes the client and stops the master on exit. Needs mooncake.store importable here.

    `lease_ttl_ms` is the master's default_kv_lease_ttl (10 s unless set): every get leases
    the object for that long, remove refuses leased objects (-706), and a get whose lease ran
    out before its copy finished fails (LEASE_EXPIRED), so it must be neither too short nor
    long to wait out before the removes."""
    for name, value in CLIENT_ENV.items():
        os.environ.setdefault(name, value)
    package = _package_dir()
    if package is None:
        raise RuntimeError(f"mooncake.store is not importable by {sys.executable} "
                           f"(use measure(), or {INSTALL_HINT})")
    from mooncake.store import MooncakeDistributedStore

    with tempfile.TemporaryDirectory(prefix="mooncake-peer-") as tmp:
        workdir = Path(tmp)
        master = start_master(package / "mooncake_master", workdir, lease_ttl_ms,
                              startup_timeout)
        store = None
        try:
            store = MooncakeDistributedStore()
            code = store.setup("127.0.0.1", master.metadata_server, global_segment_size,
                               local_buffer_size, "tcp", "", master.address)
            if code != 0:
                raise RuntimeError(f"MooncakeDistributedStore.setup returned {code}")
            yield Peer(store, master.address, master.metadata_server, master.metrics_url,
                       workdir)
        finally:
            if store is not None:
                store.close()
            _stop(master.process)


def _chunks(keys: list[str], size: int) -> list[list[str]]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def _check(op: str, codes: Sequence[int], ok: Callable[[int], bool] = lambda c: c == 0) -> None:
    bad = [code for code in codes if not ok(code)]
    if bad:
        raise RuntimeError(f"{op}: {len(bad)} of {len(codes)} keys failed, e.g. code {bad[0]}")


def _measure_here(n_keys: int, batch_size: int, value_size: int,
                  rpcs: dict[str, dict[str, float]] | None) -> dict[str, float]:
    value = b"v" * value_size
    # Four key sets, all alive at once until the removes, of value_size bytes each (the master
    # counts exact bytes): twice that, at least 256 MiB, keeps eviction (at 90 %) far off.
    segment = max(256 << 20, 2 * 4 * n_keys * value_size)
    keys = {name: [f"peer/{name}/{i:09d}" for i in range(n_keys)]
            for name in ("single", "batch", "meta_single", "meta_batch")}
    single, batch = keys["single"], _chunks(keys["batch"], batch_size)
    meta_single, meta_batch = keys["meta_single"], _chunks(keys["meta_batch"], batch_size)

    with running_peer(global_segment_size=segment) as peer:
        s = peer.store

        def put() -> list[int]:
            return [s.put(key, value) for key in single]

        def put_batch() -> list[int]:
            return [s.put_batch(chunk, [value] * len(chunk)) for chunk in batch]

        def put_start_end() -> list[int]:
            codes = []
            for key in meta_single:
                codes += s.batch_put_session_start([key], [value_size])
                codes += s.batch_put_session_end([key])
            return codes

        def put_start_end_batch() -> list[int]:
            codes = []
            for chunk in meta_batch:
                codes += s.batch_put_session_start(chunk, [value_size] * len(chunk))
                codes += s.batch_put_session_end(chunk)
            return codes

        def get() -> list[int]:
            return [len(s.get(key)) - value_size for key in single]

        def get_batch() -> list[int]:
            return [len(got) - value_size for chunk in batch for got in s.get_batch(chunk)]

        def get_replica_desc() -> list[int]:
            return [len(s.get_replica_desc(key)) - 1 for key in single]

        def batch_get_replica_desc() -> list[int]:
            return [len(replicas) - 1 for chunk in batch
                    for replicas in s.batch_get_replica_desc(chunk).values()]

        def is_exist() -> list[int]:
            return [s.is_exist(key) - 1 for key in single]

        def batch_is_exist() -> list[int]:
            return [code - 1 for chunk in batch for code in s.batch_is_exist(chunk)]

        def remove() -> list[int]:
            return [s.remove(key) for key in single]

        def batch_remove() -> list[int]:
            return [code for chunk in batch for code in s.batch_remove(chunk)]

        timed: dict[str, Callable[[], list[int]]] = {
            "put": put, "put_batch": put_batch, "put_start_end": put_start_end,
            "put_start_end_batch": put_start_end_batch, "get": get, "get_batch": get_batch,
            "get_replica_desc": get_replica_desc,
            "batch_get_replica_desc": batch_get_replica_desc, "is_exist": is_exist,
            "batch_is_exist": batch_is_exist, "remove": remove, "batch_remove": batch_remove}
        results: dict[str, float] = {}
        for op, run in timed.items():
            if op == "remove":
                time.sleep(LEASE_TTL_MS / 1000 + 0.1)  # remove(force=False) needs no lease
            before = peer.master_counters()
            started = time.perf_counter()
            codes = run()
            took = time.perf_counter() - started
            after = peer.master_counters()
            _check(op, codes)
            results[op] = n_keys / took
            if rpcs is not None:
                rpcs[op] = {name: after[name] - before.get(name, 0.0) for name in after
                            if after[name] != before.get(name, 0.0)}
        left = s.batch_is_exist(keys["single"][:batch_size] + keys["batch"][:batch_size])
        _check("removed keys are gone", left, lambda code: code == 0)
        s.remove_all(True)
    return results


def measure(n_keys: int = 20000, batch_size: int = 200, value_size: int = 32,
            rpcs: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Keys per second of each op in OPS, timed on one client process (see the module
    docstring for which ops move bytes). Runs in this interpreter if it can import
    mooncake.store, else in the peer's (see peer_python). Fills `rpcs`, when given, with the
    master's request/item counter deltas per op. Raises RuntimeError if the peer cannot run
    or a call fails."""
    if _package_dir() is not None:
        return _measure_here(n_keys, batch_size, value_size, rpcs)
    reason = available()
    python = peer_python()
    if reason is not None or python is None:
        raise RuntimeError(f"mooncake peer unavailable: {reason}")
    command = [python, str(Path(__file__).resolve()), "--keys", str(n_keys), "--batch",
               str(batch_size), "--value-size", str(value_size), "--json-only"]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**CLIENT_ENV, **os.environ})
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"mooncake peer run failed ({done.returncode}):\n{tail}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if rpcs is not None:
        rpcs.update(report["master_rpcs"])
    return {op: float(rate) for op, rate in report["results"].items()}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mooncake_peer",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=20000, help="keys per op (default 20000)")
    parser.add_argument("--batch", type=int, default=200, help="keys per batch call (200)")
    parser.add_argument("--value-size", type=int, default=32, help="bytes per value (32)")
    parser.add_argument("--json-only", action="store_true",
                        help="print only the JSON line (used by measure() in a subprocess)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = available()
    if reason is not None:
        print(f"skipped: mooncake peer unavailable: {reason}", file=sys.stderr)
        return 2
    load = os.getloadavg()
    rpcs: dict[str, dict[str, float]] = {}
    results = measure(args.keys, args.batch, args.value_size, rpcs)
    report = {"package": PACKAGE, "version": version(), "keys": args.keys,
              "batch": args.batch, "value_size": args.value_size, "cpus": os.cpu_count(),
              "loadavg_before": [round(x, 2) for x in load], "unit": "keys/s",
              "results": {op: round(rate, 1) for op, rate in results.items()},
              "master_rpcs": rpcs}
    if not args.json_only:
        print(f"{PACKAGE} {report['version']}: {args.keys} keys per op, batches of "
              f"{args.batch}, {args.value_size}-byte values, load {load[0]:.2f}")
        print(f"{'op':<24}{'keys/s':>12}{'us/key':>10}  call")
        for op, rate in results.items():
            print(f"{op:<24}{rate:>12,.0f}{1e6 / rate:>10.1f}  {OPS[op]}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
