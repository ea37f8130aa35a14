"""README.md works when pasted: every ```python block runs as written (on the in-process
store it defaults to) and on a real redis-server, and each print shows what its comment
says it shows."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import redis

from mooncake_redis import Index

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


def expected_prints(source: str) -> list[str]:
    """For each top-level print(...), in order, the comment on its line up to the first
    ': ' (what the line prints; '…' stands for anything)."""
    comments = {token.start[0]: token.string.lstrip("# ").strip()
                for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    expected = []
    for statement in ast.parse(source).body:
        if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)
                and statement.value.func.id == "print"):
            comment = comments.get(statement.lineno)
            assert comment, f"README line {ast.unparse(statement)!r}: say what it prints"
            expected.append(comment.split(": ", 1)[0])
    return expected


def paste(source: str, tmp_path: Path, url: str | None = None) -> list[str]:
    """Runs the block as a user pasting it into `python` would, in an empty directory and
    without the caller's MOONCAKE_REDIS_* variables (plus the URL, if given)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    if url:
        environment["MOONCAKE_REDIS_URL"] = url
    result = subprocess.run([sys.executable, "-"], input=source, capture_output=True, text=True,
                            cwd=tmp_path, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def assert_prints_match(source: str, printed: list[str]) -> None:
    expected = expected_prints(source)
    assert len(printed) == len(expected), printed
    for line, comment in zip(printed, expected):
        pattern = ".*".join(re.escape(part) for part in comment.split("…"))
        assert re.fullmatch(pattern, line), f"printed {line!r}, README says {comment!r}"


def test_the_readme_has_the_use_it_sample() -> None:
    blocks = python_blocks()
    assert blocks and any("index.remove(" in block for block in blocks)


@pytest.mark.parametrize("number", range(len(python_blocks())))
def test_python_block_runs_as_pasted_in_process(number: int, tmp_path: Path) -> None:
    source = python_blocks()[number]
    assert_prints_match(source, paste(source, tmp_path))


@pytest.mark.parametrize("number", range(len(python_blocks())))
def test_python_block_runs_on_real_redis(number: int, tmp_path: Path, redis_url: str) -> None:
    source = python_blocks()[number]
    assert_prints_match(source, paste(source, tmp_path, redis_url))
    if 'namespace="readme"' in source:
        # The sample removes all it wrote: the nodes cascaded away, the counters are back
        # to zero, and the settings it opened with are stored for every client.
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        assert list(client.scan_iter("readme:*:n:*")) == []
        index = Index.from_url(redis_url, "readme", read_only=True)
        usage = index.usage()
        assert (usage.objects, usage.nodes, usage.used_bytes) == (0, 0, 0)
        assert client.hget(index.ctx.schema.settings, "capacity_bytes") == str(64 << 30)


def shell_blocks() -> list[str]:
    """The ```bash blocks, but the quick start's (it installs and runs the whole suite)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.S | re.M)
    return [block for block in blocks if "./scripts/" not in block]


@pytest.mark.parametrize("number", range(len(shell_blocks())))
def test_shell_block_runs_as_pasted(number: int, tmp_path: Path, redis_url: str) -> None:
    """Pasted into bash, with two substitutions: the test's redis-server for
    localhost:6379 (the tests never touch a Redis of yours) and this interpreter's venv for
    .venv. Background processes must still be running when the block is done."""
    server = redis_url.rsplit("/", 1)[0]
    source = (shell_blocks()[number].replace("redis://localhost:6379", server)
              .replace("source .venv/bin/activate", f"source {sys.prefix}/bin/activate"))
    index = Index.from_url(redis_url, read_only=True)  # a fresh Redis, as a reader has one
    # A second for a background command that fails at its start to have exited: they must
    # still run. A slower machine can only let a failing one pass, never fail a good one.
    script = (source + "\nstatus=$?\nsleep 1\n"
              'for job in $(jobs -p); do kill -0 "$job" || status=99; kill "$job"; done\n'
              "wait\nexit $status\n")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    result = subprocess.run(["bash"], input=script, capture_output=True, text=True,
                            cwd=tmp_path, env=environment, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    if "evict --target 0.5" in source:
        assert "stopped:          target reached" in result.stdout
        assert index.ctx.reload_settings().capacity_bytes == 64 << 30
