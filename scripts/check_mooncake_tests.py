"""Run Mooncake's own Python store tests on the real client and on the drop-in, and print
both tables: per file, and per test where the two differ.

    ./scripts/install_mooncake_peer.sh       # the real client, mooncake_master, pytest
    .venv/bin/python scripts/check_mooncake_tests.py --repo PATH_OR_URL [--ref REF]

The test files come from a Mooncake git repository at check time (never from this one):
--repo is a checkout or bare clone (read with `git show REF:path`), or a URL that is
cloned shallowly at REF into a temp dir. The files run are the pytest files of
mooncake-wheel/tests/ and scripts/ that import `mooncake.store`.

Mooncake's side: each file under the peer's interpreter, against a mooncake_master of its
own (tcp, HTTP metadata server) started on free loopback ports. The drop-in's side: each
file under this interpreter, with `mooncake.store` (and nothing else) resolved to
mooncake_redis.mooncake: a `mooncake` package placed first on the path holds only
store.py and takes its other modules from the real package; setup()'s host:port master
address names the Redis through MOONCAKE_REDIS_URL (a redis-server this script starts,
or --url), a fresh namespace per file. Both sides get DEFAULT_KV_LEASE_TTL, the lease the
tests assume, as the master's and the namespace's lease_ttl_ms.

Exit 0 when every test that passes on Mooncake passes on the drop-in or is one that
docs/INTEGRATIONS.md lists (KNOWN below), 1 otherwise, 2 when a side cannot run here.
--save FILE / --mooncake-results FILE keep and reuse one side's results (the real side
takes minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import mooncake_peer  # noqa: E402  (after the path insert)
from benchmarks.mooncake_peer import (  # noqa: E402
    _free_ports,
    _listening,
    _stop,
)

PATTERNS = ("mooncake-wheel/tests/test_*.py", "scripts/test_*.py")
LEASE_TTL_MS = 5000  # the tests' DEFAULT_DEFAULT_KV_LEASE_TTL
FILE_TIMEOUT_S = 1800
TEST_TIMEOUT_S = 300
DEFAULT_RPC_PORT, DEFAULT_HTTP_PORT = 50051, 8080
REAL_CLIENT_PORT = 50052  # where the tests' setup_dummy looks for mooncake_client
OUTCOMES = ("passed", "failed", "error", "skipped")

SHIM_INIT = '''"""mooncake, with its store module replaced by mooncake-redis's drop-in: every other
module is the real package's (its directory is on this package's path, and its
__init__.py runs here as it would there)."""
import os
__path__.append(os.environ["MOONCAKE_REAL_PACKAGE"])
_real_init = os.path.join(os.environ["MOONCAKE_REAL_PACKAGE"], "__init__.py")
with open(_real_init) as _source:
    exec(compile(_source.read(), _real_init, "exec"))
'''
SHIM_STORE = "from mooncake_redis.mooncake import *  # noqa: F403\n"

KNOWN: dict[str, str] = {
    "*parallelism*": "the *_with_parallelism tensor methods are not provided (Mooncake's "
                     "C++ store dropped them in 0.3.14)",
    "*writer_partition*": "same (writer partitions are the parallelism methods')",
    "test_dummy_client.py::*::test_tensor_operations": "calls put_tensor_with_parallelism, "
                                                      "not provided (as above)",
    "test_distributed_object_store.py::*::test_soft_pin_config_forwarding":
        "a soft-pin TTL other than the namespace's is refused (-600): the TTL is per "
        "namespace until the object record carries one",
}
"""Tests that pass on Mooncake and not on the drop-in, by a `file::class::test` pattern,
with the reason docs/INTEGRATIONS.md gives."""


def test_files(repo: Path, ref: str) -> dict[str, str]:
    """The selected files' text by path."""
    names = _git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()
    chosen = {}
    for name in names:
        if any(os.path.dirname(name) == os.path.dirname(pattern) and
               fnmatch.fnmatchcase(os.path.basename(name), os.path.basename(pattern))
               for pattern in PATTERNS):
            text = _git(repo, "show", f"{ref}:{name}")
            if "mooncake.store" in text and "def test" in text:
                chosen[name] = text
    conftest = "mooncake-wheel/tests/conftest.py"
    if conftest in names:
        chosen[conftest] = _git(repo, "show", f"{ref}:{conftest}")
    return chosen


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, timeout=300).stdout


@contextlib.contextmanager
def repository(source: str, ref: str) -> Iterator[Path]:
    """A local repository for source (a path, or a URL cloned at ref)."""
    if "://" not in source and not source.startswith("git@"):
        yield Path(source)
        return
    with tempfile.TemporaryDirectory(prefix="mooncake-repo-") as tmp:
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", ref, source,
                        tmp], check=True, timeout=900)
        yield Path(tmp)


def _wait_listening(process: subprocess.Popen[bytes], ports: list[int], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited at start")
        if all(_listening(port) for port in ports):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen in 30 s")


@contextlib.contextmanager
def master(package: Path, workdir: Path) -> Iterator[dict[str, str]]:
    """A mooncake_master on loopback: the environment the tests read. Its defaults
    (RPC on 50051, metadata on 8080) when free, since some tests name them outright."""
    rpc, http, metrics = _free_ports(3)
    rpc, http = (default if not _listening(default) else chosen
                 for default, chosen in ((DEFAULT_RPC_PORT, rpc), (DEFAULT_HTTP_PORT, http)))
    command = [str(package / "mooncake_master"), f"--rpc_port={rpc}",
               "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
               "--http_metadata_server_host=127.0.0.1", f"--http_metadata_server_port={http}",
               "--metrics_host=127.0.0.1", f"--metrics_port={metrics}",
               f"--default_kv_lease_ttl={LEASE_TTL_MS}", f"--log_dir={workdir}",
               "--logtostderr"]
    with (workdir / "master.log").open("ab") as log:
        process = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    client = None
    try:
        _wait_listening(process, [rpc, http, metrics], "mooncake_master")
        metadata = f"http://127.0.0.1:{http}/metadata"
        # the real client process the dummy-client tests (setup_dummy) connect to
        with (workdir / "client.log").open("ab") as log:
            client = subprocess.Popen(
                [str(package / "mooncake_client"), "--host=127.0.0.1",
                 f"--port={REAL_CLIENT_PORT}", f"--master_server_address=127.0.0.1:{rpc}",
                 f"--metadata_server={metadata}", "--global_segment_size=512MB"],
                cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _wait_listening(client, [REAL_CLIENT_PORT], "mooncake_client")
        except RuntimeError as error:
            print(f"  (no real client for the dummy-client tests: {error})", file=sys.stderr)
        yield {"MASTER_SERVER": f"127.0.0.1:{rpc}", "MOONCAKE_MASTER": f"127.0.0.1:{rpc}",
               "MC_METADATA_SERVER": metadata, "METADATA_ADDR": metadata}
    finally:
        if client is not None:
            _stop(client)
        _stop(process)


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (or pass --url)")
    (port,) = _free_ports(1)
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(process, [port], "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(process)


SHOW_OUTPUT = False
KEYWORD: str | None = None
"""--show: pytest's own output goes to stderr (to see why a test fails)."""


def run_file(python: str, path: Path, env: dict[str, str], workdir: Path) -> dict[str, str]:
    """pytest on one file: each test's outcome by name (a file that does not finish in
    FILE_TIMEOUT_S counts as one error)."""
    report = workdir / "report.xml"
    report.unlink(missing_ok=True)
    # options through the environment: some files read sys.argv as their own arguments
    options = f"-q -p no:cacheprovider --timeout={TEST_TIMEOUT_S} --junitxml={report}"
    if KEYWORD:
        options += f" -k '{KEYWORD}'"
    try:
        subprocess.run([python, "-m", "pytest", path.name], cwd=path.parent,
                       env={**env, "PYTEST_ADDOPTS": options},
                       stdout=sys.stderr if SHOW_OUTPUT else subprocess.DEVNULL,
                       stderr=sys.stderr if SHOW_OUTPUT else subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL,
                       timeout=FILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"(the file)": "error"}
    if not report.exists():
        return {"(the file)": "error"}
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                          else "skipped" if "skipped" in kinds else "passed")
    return outcomes or {"(the file)": "error"}


def base_env() -> dict[str, str]:
    env = {**os.environ, **mooncake_peer.CLIENT_ENV, "MC_LOG_LEVEL": "ERROR",
           "DEFAULT_KV_LEASE_TTL": str(LEASE_TTL_MS),
           "PROTOCOL": "tcp", "DEVICE_NAME": "", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return env


def mooncake_side(files: dict[str, Path], python: str, package: Path
                  ) -> dict[str, dict[str, str]]:
    results = {}
    for name, path in files.items():
        with tempfile.TemporaryDirectory(prefix="mooncake-master-") as tmp, \
                master(package, Path(tmp)) as addresses:
            results[name] = run_file(python, path, {**base_env(), **addresses}, Path(tmp))
        print(f"  mooncake  {name}: {_counts(results[name])}", file=sys.stderr)
    return results


def dropin_side(files: dict[str, Path], package: Path, url: str | None
                ) -> dict[str, dict[str, str]]:
    results = {}
    with tempfile.TemporaryDirectory(prefix="mooncake-dropin-") as tmp:
        workdir = Path(tmp)
        shim = workdir / "shim" / "mooncake"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text(SHIM_INIT)
        (shim / "store.py").write_text(SHIM_STORE)
        with contextlib.ExitStack() as stack:
            redis_url = url or stack.enter_context(redis_server(workdir))
            for name, path in files.items():
                data = workdir / f"data-{uuid.uuid4().hex[:8]}"
                env = {**base_env(), "PYTHONPATH": f"{shim.parent}{os.pathsep}{ROOT}",
                       "MOONCAKE_REAL_PACKAGE": str(package),
                       "MOONCAKE_REDIS_URL": redis_url,
                       "MOONCAKE_REDIS_NAMESPACE": f"mctest-{uuid.uuid4().hex[:8]}",
                       "MOONCAKE_REDIS_DATA_DIR": str(data),
                       "MOONCAKE_REDIS_LEASE_TTL_MS": str(LEASE_TTL_MS),
                       "MASTER_SERVER": "127.0.0.1:50051",
                       "MOONCAKE_MASTER": "127.0.0.1:50051",
                       "MC_METADATA_SERVER": "P2PHANDSHAKE", "METADATA_ADDR": "P2PHANDSHAKE"}
                results[name] = run_file(sys.executable, path, env, workdir)
                shutil.rmtree(data, ignore_errors=True)
                print(f"  drop-in   {name}: {_counts(results[name])}", file=sys.stderr)
    return results


def _counts(outcomes: dict[str, str]) -> str:
    return " ".join(f"{sum(o == kind for o in outcomes.values())} {kind}" for kind in OUTCOMES)


def print_tables(theirs: dict[str, dict[str, str]], ours: dict[str, dict[str, str]]
                 ) -> int:
    """The two tables; how many tests pass on Mooncake and not here, beyond KNOWN."""
    print(f"{'file':58s} {'mooncake (pass/fail/err/skip)':30s} drop-in")
    totals = {side: dict.fromkeys(OUTCOMES, 0) for side in ("mooncake", "dropin")}
    for name in sorted(set(theirs) | set(ours)):
        cells = []
        for side, results in (("mooncake", theirs), ("dropin", ours)):
            outcomes = results.get(name, {})
            counts = [sum(o == kind for o in outcomes.values()) for kind in OUTCOMES]
            for kind, count in zip(OUTCOMES, counts):
                totals[side][kind] += count
            cells.append("/".join(map(str, counts)) if outcomes else "(not run)")
        print(f"{name:58.58s} {cells[0]:30s} {cells[1]}")
    print(f"{'total':58s} {'/'.join(map(str, totals['mooncake'].values())):30s} "
          f"{'/'.join(map(str, totals['dropin'].values()))}")
    print()
    print("tests whose outcome differs (mooncake -> drop-in):")
    unexplained = 0
    for name in sorted(set(theirs) | set(ours)):
        for test in sorted(set(theirs.get(name, {})) | set(ours.get(name, {}))):
            before = theirs.get(name, {}).get(test, "(absent)")
            after = ours.get(name, {}).get(test, "(absent)")
            if before == after:
                continue
            label = f"{name.rsplit('/', 1)[-1]}::{test}"
            if before == "passed":
                reason = next((why for pattern, why in KNOWN.items()
                               if fnmatch.fnmatchcase(label, pattern)), None)
                unexplained += reason is None
                verdict = f"KNOWN: {reason}" if reason else "DIFFERENT"
            else:
                verdict = ""
            print(f"  {label:90.90s} {before:>8s} -> {after:8s} {verdict}")
    print(f"{unexplained} tests pass on Mooncake and not on the drop-in beyond the known "
          "differences")
    return unexplained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=os.environ.get("MOONCAKE_REPO"),
                        help="a Mooncake git repository: a path or a URL (default: "
                             "$MOONCAKE_REPO)")
    parser.add_argument("--ref", default="HEAD", help="the commit or tag to read the tests "
                                                     "at (default: HEAD)")
    parser.add_argument("--url", help="the drop-in's Redis (default: a redis-server started "
                                      "here)")
    parser.add_argument("--side", choices=["both", "mooncake", "dropin"], default="both")
    parser.add_argument("--only", nargs="*", default=[],
                        help="run only the files whose path contains one of these")
    parser.add_argument("--show", action="store_true",
                        help="let pytest print its report (to stderr)")
    parser.add_argument("-k", dest="keyword", help="pytest's -k: only the tests it selects")
    parser.add_argument("--save", type=Path, help="write both sides' results as JSON")
    parser.add_argument("--mooncake-results", type=Path,
                        help="read Mooncake's side from a --save file instead of running it")
    args = parser.parse_args(argv)
    global SHOW_OUTPUT, KEYWORD
    SHOW_OUTPUT, KEYWORD = args.show, args.keyword
    if not args.repo:
        parser.error("name a Mooncake repository: --repo PATH_OR_URL or $MOONCAKE_REPO")
    python, problem = mooncake_peer.peer_python(), mooncake_peer.available()
    if problem or python is None:
        print(f"error: cannot run the real Mooncake client: {problem}", file=sys.stderr)
        return 2
    package = Path(json.loads(subprocess.run(
        [python, "-c", "import json, mooncake, pathlib; "
                       "print(json.dumps(str(pathlib.Path(mooncake.__file__).parent)))"],
        capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, **mooncake_peer.CLIENT_ENV}).stdout))
    saved = json.loads(args.mooncake_results.read_text()) if args.mooncake_results else {}
    with tempfile.TemporaryDirectory(prefix="mooncake-tests-") as tmp, \
            repository(args.repo, args.ref) as repo:
        texts = test_files(repo, args.ref)
        files = {}
        for name, text in texts.items():
            path = Path(tmp) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if not name.endswith("conftest.py") and (
                    not args.only or any(part in name for part in args.only)):
                files[name] = path
        print(f"{len(files)} test files of {args.repo} at {args.ref}; Mooncake "
              f"{mooncake_peer.version()}", file=sys.stderr)
        theirs = saved.get("mooncake", {})
        if args.side in ("both", "mooncake") and (not theirs or args.only):
            theirs = {**theirs, **mooncake_side(files, python, package)}  # --only: rerun
        ours = dropin_side(files, package, args.url) if args.side != "mooncake" else {}
    if args.save:
        args.save.write_text(json.dumps({"mooncake": theirs, "dropin": ours}, indent=1))
    unexplained = print_tables(theirs, ours)
    return 1 if unexplained and ours and theirs else 0


if __name__ == "__main__":
    sys.exit(main())
