"""Smoke run of the benchmarks at --scale small: they run and write results.json (not speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

RESULT_KEYS = {
    "prefix_query": "sizes",
    "registration": "paths",
    "eviction": "trees",
    "match_prefix": "calls",
    "memory": "totals",
    "cluster": "backends",
}
"""Each benchmark's main entry in results.json."""


def run_benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_help_names_every_option() -> None:
    completed = run_benchmarks("--help")
    assert completed.returncode == 0, completed.stderr
    for option in ("--scale", "--only", "--out", "--snapshots"):
        assert option in completed.stdout


def test_small_run_writes_results(tmp_path: Path) -> None:
    completed = run_benchmarks("--scale", "small", "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    report: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    assert report["scale"] == "small"
    assert {"cpus", "cpu_model", "redis_server", "python"} <= set(report["machine"])
    assert set(RESULT_KEYS) <= set(report["benchmarks"])
    for name, key in RESULT_KEYS.items():
        benchmark = report["benchmarks"][name]
        assert benchmark["results"][key], name
        assert all(table["rows"] for table in benchmark["tables"]), name
    results = {name: report["benchmarks"][name]["results"] for name in RESULT_KEYS}
    # Correctness, not speed: the work each benchmark claims to time was really done.
    assert all(size["scan"]["samples"] > 0 for size in results["prefix_query"]["sizes"])
    assert {tree["leaves"] for tree in results["eviction"]["trees"]} == {200}
    assert [call["matched"] for call in results["match_prefix"]["calls"]] == [1000, 500, 0, 1000]
    # the leading 32 pages first, the rest in a second round trip only if they all matched
    assert [c["round_trips_per_call"] for c in results["match_prefix"]["calls"][:3]] == [2, 2, 1]
    assert {"obj", "node", "keys"} <= set(results["memory"]["kinds"])
    assert len(results["memory"]["settings"]) == 3
    assert {row["evicted_objects"] for row in results["cluster"]["backends"].values()} == {100}
    assert sum(row["shards"] for row in results["cluster"]["spread"]) == 256
    assert "| objects |" in (tmp_path / "tables.md").read_text()


def test_only_runs_the_named_benchmark(tmp_path: Path) -> None:
    completed = run_benchmarks("--scale", "small", "--only", "match_prefix", "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert list(report["benchmarks"]) == ["match_prefix"]
