"""README.md and every docs/*.md work when pasted: every ```python block runs as written
(on the in-process store it defaults to, and on a real redis-server) and each print shows
what its comment says it shows; every ```bash block runs in bash. A ```text block is not
code (a diagram, a key schema, a command's synopsis). Every fence says which it is.

What the tests change before running a block (SUBSTITUTIONS): the Redis a block names at
localhost:6379 becomes the tests' own redis-server, the cluster seeds of docs/CLUSTER.md
two masters of the tests' cluster (with the ACL user the URL names), `.venv` this
interpreter's venv. No block may reach an address outside this machine (checked).

The blocks that cannot run in a test are listed in NOT_RUN, each with why and what tests
the same thing instead; an entry that no longer names a block fails."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import os
import re
import signal
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from clock import CHILD_GUARD_S, wait_until
from redis_cluster import LocalCluster

from mooncake_redis import Index

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash", "text")

NOT_RUN = {
    ("README.md", "./scripts/demo.sh"):
        "installs .venv, then runs the demo and the whole suite (this test is in it): "
        "tests/test_cli.py runs the demo, CI runs scripts/test.sh",
    ("BENCHMARKS.md", "./scripts/bench.sh                     # full run"):
        "benchmark runs of a minute to 35 minutes: tests/test_benchmarks.py runs each at "
        "--scale small",
    ("BENCHMARKS.md", ".venv/bin/python -m benchmarks --only floor --only mooncake"):
        "the same",
    ("BENCHMARKS.md", "./scripts/bench.sh --only floor"): "the same",
    ("BENCHMARKS.md", "MOONCAKE_PEER_VENV=.venv-peer .venv/bin/python -m benchmarks.engine"):
        "the engine benchmark and the callgrind counts take minutes to an hour: "
        "tests/test_benchmarks.py runs the engine benchmark at its smallest",
    ("BENCHMARKS.md", ".venv/bin/python -m benchmarks --only floor      # before"): "the same",
    ("INTEGRATIONS.md", "export PYTHONHASHSEED=0"):
        "starts a vLLM engine, which the tests do not install: tests/test_vllm_ingest.py "
        "speaks vLLM's event wire format, scripts/check_vllm_ingest.py runs vLLM's own "
        "publisher",
    ("INTEGRATIONS.md", "pip install 'mooncake-redis[vllm]'"):
        "follows a running vLLM engine's ZMQ endpoints: tests/test_vllm_ingest.py runs "
        "`ingest` against a publisher of the same wire format",
    ("INTEGRATIONS.md", "pip install /path/to/mooncake-redis"):
        "starts SGLang with a model: scripts/check_sglang_hicache.py checks these flags "
        "against SGLang's own code, tests/test_hicache.py runs the backend",
    ("SIMULATION.md", "python -m mooncake_redis.sim --plot"):
        "simulations of 30 s to hours, some on traces to download first: tests/sim/ runs "
        "each mode on small workloads",
    ("SIMULATION.md", "python -m mooncake_redis.sim --trace mooncake_synthetic_trace.jsonl --plot"):
        "the same",
    ("SIMULATION.md", "python -m mooncake_redis.sim --trace mooncake_synthetic_trace.jsonl --rou"):
        "the same",
    ("SIMULATION.md", "python -m mooncake_redis.sim.trace.synthesis conversation_shaped.jsonl"):
        "the same",
    ("SIMULATION.md", "python -m mooncake_redis.sim --backend redis"): "the same",
}
"""(document, the block's first line) -> why the block is not run here."""

CLUSTER_SEEDS = ("10.0.0.1:7000", "10.0.0.2:7000")
CLUSTER_USER = ("user", "secret")
"""docs/CLUSTER.md's seeds and its URL's user."""
FOREIGN_ADDRESS = re.compile(r"\b(?!127\.)\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")

STARTED = {"worker": "*** Listening on", "monitor": "monitor started"}
"""What a long-running command logs once it is up: a block's background command must
have logged it, and still run, when the block is done."""


@dataclasses.dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str
    source: str

    def __str__(self) -> str:
        return f"{self.doc.name}:{self.line}"

    @property
    def first_line(self) -> str:
        return self.source.splitlines()[0] if self.source else ""

    @property
    def not_run(self) -> str | None:
        return next((reason for (doc, start), reason in NOT_RUN.items()
                     if doc == self.doc.name and self.first_line.startswith(start)), None)


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            found.append(Block(doc, text.count("\n", 0, match.start()) + 1, match.group(1),
                               match.group(2)))
    return found


def runnable(language: str) -> list[Block]:
    return [block for block in blocks() if block.language == language and not block.not_run]


def test_every_block_says_what_it_is_and_each_one_not_run_is_listed_once() -> None:
    unlabeled = [str(block) for block in blocks() if block.language not in LANGUAGES]
    assert unlabeled == [], f"label these fences {'/'.join(LANGUAGES)}: {unlabeled}"
    for doc, start in NOT_RUN:
        named = [block for block in blocks() if block.doc.name == doc
                 and block.language != "text" and block.first_line.startswith(start)]
        assert len(named) == 1, f"NOT_RUN's {doc} {start!r} names {len(named)} blocks"
    assert any("index.remove(" in block.source for block in runnable("python"))


# -- python ----------------------------------------------------------------------------


def expected_prints(block: Block) -> list[str]:
    """For each top-level print(...), in order, the comment on its line up to the first
    ': ' (what the line prints; '…' stands for anything)."""
    comments = {token.start[0]: token.string.lstrip("# ").strip()
                for token in tokenize.generate_tokens(io.StringIO(block.source).readline)
                if token.type == tokenize.COMMENT}
    expected = []
    for statement in ast.parse(block.source).body:
        if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)
                and statement.value.func.id == "print"):
            comment = comments.get(statement.lineno)
            assert comment, f"{block} line {ast.unparse(statement)!r}: say what it prints"
            expected.append(comment.split(": ", 1)[0])
    return expected


def assert_prints_match(block: Block, printed: list[str]) -> None:
    expected = expected_prints(block)
    assert len(printed) == len(expected), printed
    for line, comment in zip(printed, expected):
        pattern = ".*".join(re.escape(part) for part in comment.split("…"))
        assert re.fullmatch(pattern, line), f"{block} printed {line!r}, says {comment!r}"


def environment(url: str | None = None) -> dict[str, str]:
    """The caller's environment without its MOONCAKE_REDIS_* variables (plus the URL)."""
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    return {**plain, "MOONCAKE_REDIS_URL": url} if url else plain


def substituted(source: str, server: str, cluster: LocalCluster | None = None) -> str:
    """The block as the tests run it (the module doc says what changes)."""
    source = (source.replace("redis://localhost:6379", server)
              .replace("source .venv/bin/activate", f"source {sys.prefix}/bin/activate"))
    if cluster is not None:
        masters = [f"127.0.0.1:{server.port}" for server in cluster.masters()]
        for seed, master in zip(CLUSTER_SEEDS, masters):
            source = source.replace(seed, master)
    foreign = FOREIGN_ADDRESS.search(source)
    assert foreign is None, f"a block would reach {foreign.group()}: substitute it"
    return source


@pytest.fixture
def cluster_for(request: pytest.FixtureRequest) -> Iterator[LocalCluster | None]:
    """The tests' cluster, with docs/CLUSTER.md's ACL user, for a block that names it."""
    block = request.node.callspec.params["block"]
    if not any(seed in block.source for seed in CLUSTER_SEEDS):
        yield None
        return
    request.getfixturevalue("cluster_url")  # emptied
    cluster: LocalCluster = request.getfixturevalue("redis_cluster")
    user, password = CLUSTER_USER
    for master in cluster.masters():
        cluster.client(master).execute_command("ACL", "SETUSER", user, "on", f">{password}",
                                               "~*", "&*", "+@all")
    yield cluster


def paste(source: str, tmp_path: Path, url: str | None = None) -> list[str]:
    """Runs the block as a user pasting it into `python` would, in an empty directory."""
    result = subprocess.run([sys.executable, "-"], input=source, capture_output=True, text=True,
                            cwd=tmp_path, env=environment(url), timeout=CHILD_GUARD_S)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("block", runnable("python"), ids=str)
def test_python_block_runs_as_pasted_in_process(block: Block, tmp_path: Path, redis_url: str,
                                                cluster_for: LocalCluster | None) -> None:
    source = substituted(block.source, redis_url.rsplit("/", 1)[0], cluster_for)
    assert_prints_match(block, paste(source, tmp_path))


@pytest.mark.parametrize("block", runnable("python"), ids=str)
def test_python_block_runs_on_real_redis(block: Block, tmp_path: Path, redis_url: str,
                                         cluster_for: LocalCluster | None) -> None:
    source = substituted(block.source, redis_url.rsplit("/", 1)[0], cluster_for)
    assert_prints_match(block, paste(source, tmp_path, redis_url))
    if 'namespace="readme"' in source:
        # The sample removes all it wrote: the nodes cascaded away, the counters are back
        # to zero, and the settings it opened with are stored for every client.
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        assert list(client.scan_iter("readme:*:n:*")) == []
        index = Index.from_url(redis_url, "readme", read_only=True)
        usage = index.usage()
        assert (usage.objects, usage.nodes, usage.used_bytes) == (0, 0, 0)
        assert client.hget(index.ctx.schema.settings, "capacity_bytes") == str(64 << 30)


# -- bash ------------------------------------------------------------------------------

CHECK_BACKGROUND = """
status=$?
jobs -p > "$1"
read -r _  # the test says when: once every background command has logged its start
for job in $(jobs -p); do kill -0 "$job" || status=99; kill "$job"; done
wait
exit $status
"""
"""After the block: the background commands' pids for the test, then (when told) each
must still run (a command that failed at its start has exited)."""


def running(pid: int) -> bool:
    """Whether a process (the shell's child: not ours to wait for) still runs; one that
    ended stays a zombie until the shell reaps it."""
    stat = Path(f"/proc/{pid}/stat")
    if not Path("/proc").is_dir():  # no procfs (macOS): a zombie still answers signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def background_commands(source: str) -> list[str]:
    """The mooncake-redis commands a block starts with `&`."""
    return re.findall(r"^mooncake-redis (?:--\S+ \S+ )*(\S+).*&\s*(?:#.*)?$", source, re.M)


@pytest.mark.parametrize("block", runnable("bash"), ids=str)
def test_shell_block_runs_as_pasted(block: Block, tmp_path: Path, redis_url: str) -> None:
    """Pasted into bash. Background commands must still be running when the block is done,
    once each has logged that it is up (waited for on that line, not for a time)."""
    commands = background_commands(block.source)
    assert set(commands) <= set(STARTED), f"{block}: say in STARTED what {commands} log"
    script, pids, out, err = (tmp_path / name for name in ("block.sh", "pids", "out", "err"))
    script.write_text(substituted(block.source, redis_url.rsplit("/", 1)[0])
                      + CHECK_BACKGROUND)
    index = Index.from_url(redis_url, read_only=True)  # a fresh Redis, as a reader has one
    with out.open("w") as stdout, err.open("w") as stderr:
        shell = subprocess.Popen(["bash", str(script), str(pids)], stdin=subprocess.PIPE,
                                 stdout=stdout, stderr=stderr, text=True, cwd=tmp_path,
                                 env=environment())
        try:
            wait_until(lambda: pids.exists() or shell.poll() is not None,
                       f"{block}'s foreground commands", CHILD_GUARD_S)
            def started_or_ended() -> bool:
                if shell.poll() is not None:
                    return True
                logged = err.read_text()
                return all(STARTED[command] in logged for command in commands) \
                    or not all(map(running, map(int, pids.read_text().split())))

            wait_until(started_or_ended, f"{block}'s {commands} to start", CHILD_GUARD_S)
            shell.communicate("go\n", timeout=CHILD_GUARD_S)
        finally:
            if shell.poll() is None:  # a failed run: its background commands go with it
                for pid in map(int, pids.read_text().split() if pids.exists() else ()):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                shell.kill()
                shell.wait(timeout=CHILD_GUARD_S)
    output = out.read_text() + err.read_text()
    assert shell.returncode == 0, output
    if "evict --target 0.5" in block.source:
        assert "stopped:          target reached" in output
        assert index.ctx.reload_settings().capacity_bytes == 64 << 30
