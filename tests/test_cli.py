"""The mooncake-redis command, run as a user would (in-process and on real Redis)."""

from __future__ import annotations

import subprocess
import sys

from helpers import page

from mooncake_redis import Index
from mooncake_redis.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mooncake_redis.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_demo_runs_on_the_in_process_default() -> None:
    result = run_cli("demo", "--conversations", "2", "--turns", "2")
    assert result.returncode == 0, result.stderr
    assert "reused through match_prefix" in result.stdout
    assert "redis-cli HGETALL 'mc:{" in result.stdout


def test_inspect_tree_and_stats_on_real_redis(redis_url: str, capsys) -> None:
    index = Index.from_url(redis_url, namespace="cli")
    a, b = page("a"), page("b")
    index.put_start(f"{a}_0_k", 2048)
    index.put_start(f"{b}_0_k", 1024, parent_block_hash=a)
    index.put_end(f"{b}_0_k")
    common = ["--url", redis_url, "--namespace", "cli"]

    assert main([*common, "inspect", a]) == 0
    out = capsys.readouterr().out
    assert f"node {a} (interior)" in out and b in out
    assert f"redis-cli SMEMBERS 'cli:{{{a[:2]}}}:children:{a}'" in out

    assert main([*common, "inspect", f"{b}_0_k"]) == 0
    out = capsys.readouterr().out
    assert "state       complete" in out and f"HGETALL 'cli:{{{b[:2]}}}:obj:{b}_0_k'" in out

    assert main([*common, "tree", a]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(a[:12]) and "└─ " + b[:12] in out

    assert main([*common, "stats"]) == 0
    assert "objects 2, nodes 2, used 3.0 KiB of unlimited" in capsys.readouterr().out


def test_unknown_targets_and_bad_urls_fail_cleanly(capsys) -> None:
    assert main(["inspect", "nothing"]) == 1
    assert "no node or object" in capsys.readouterr().err
    assert main(["--url", "redis://127.0.0.1:1/0", "stats"]) == 2
    assert "error: Redis at redis://127.0.0.1:1/0" in capsys.readouterr().err


def test_help_lists_every_command() -> None:
    result = run_cli("--help")
    for command in ("demo", "stats", "inspect", "tree", "sim"):
        assert command in result.stdout
