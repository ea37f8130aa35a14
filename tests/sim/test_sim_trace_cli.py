"""`sim --trace FILE` end to end: the table and files on success, exit 2 and nothing
written for a trace or option the replay cannot use."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from mooncake_redis.sim.cli import register
from mooncake_redis.sim.trace.synthesis import ChainShape, synthetic_chains, write_trace
from mooncake_redis.sim.trace_cli import CSV_NAME, JSON_NAME, PLOT_NAME


def _run_sim(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mooncake-redis")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sim", *arguments])
    return int(args.func(args))


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    write_trace(path, synthetic_chains(400, seed=9, shape=ChainShape(new_pages=(1, 4))))
    return path


def test_a_trace_run_prints_the_table_and_writes_csv_json_and_png(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = _run_sim(["--trace", str(trace_file), "--capacities", "0.1,0.3", "--out", str(out),
                     "--plot", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "usable" in printed and "block-heat" in printed and "of optimum" in printed
    assert "Best possible on this trace" in printed and "66% (synthetic)" in printed
    with (out / CSV_NAME).open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 4 * 2  # capacities x policies (the optimum too) x indexes
    assert {row["index"] for row in rows} == {"hash", "radix"}
    for row in rows:
        assert int(row["requests"]) == 400
        assert 0 < float(row["usable_prefix_hit_rate"]) <= float(row["hit_rate"]) < 1
        if row["index"] == "radix":
            assert row["peak_orphaned_pages"] == "0" and row["hits"] == row["usable_hits"]
    document = json.loads((out / JSON_NAME).read_text())
    assert document["run"]["requests"] == 400 and document["run"]["page_tokens"] == 512
    distinct = document["run"]["distinct_pages"]
    assert [r["capacity_pages"] for r in document["results"][:8]] == [round(0.1 * distinct)] * 8
    assert (out / PLOT_NAME).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_limit_replays_only_the_first_requests(trace_file: Path, tmp_path: Path) -> None:
    code = _run_sim(["--trace", str(trace_file), "--limit", "50", "--indexes", "radix",
                     "--policies", "lru", "--capacities", "0.5", "--touch-order", "tip-first",
                     "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["run"]["requests"] == 50
    assert document["run"]["settings"]["touch_order"] == "tip-first"
    assert [row["requests"] for row in document["results"]] == [50]


def _bad_trace(tmp_path: Path) -> Path:
    path = tmp_path / "bad.jsonl"
    good = {"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "hash_ids": [1, "x"]}) + "\n")
    return path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--indexes", "bitwise-radix"], "unknown index bitwise-radix; choose from hash, radix"),
    ],
)
def test_options_a_trace_replay_cannot_use_exit_2_and_write_nothing(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    arguments: list[str], message: str,
) -> None:
    out = tmp_path / "out"
    assert _run_sim(["--trace", str(trace_file), *arguments, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_malformed_or_missing_trace_exits_2_naming_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    bad = _bad_trace(tmp_path)
    for backend in ("memory", "redis"):
        assert _run_sim(["--trace", str(bad), "--backend", backend, "--out", str(out)]) == 2
        assert f"{bad}:2: hash_ids[1] 'x' is not an integer" in capsys.readouterr().err
    assert _run_sim(["--trace", str(tmp_path / "absent.jsonl"), "--out", str(out)]) == 2
    assert "No such file" in capsys.readouterr().err
    assert not out.exists()


def test_a_limit_below_one_is_refused(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _run_sim(["--trace", str(trace_file), "--limit", "0"])
    assert exit_info.value.code == 2
    assert "below the minimum 1" in capsys.readouterr().err
