"""The `sim` sub-command end to end: files written on success, exit 2 and nothing on bad input."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from mooncake_redis.sim import __main__ as sim_main
from mooncake_redis.sim.cli import register, simulation_settings
from mooncake_redis.sim.indexes.optimum import OPTIMUM_INDEX, OPTIMUM_POLICY
from mooncake_redis.sim.indexes.policies import POLICY_NAMES
from mooncake_redis.sim.indexes.runner import QUICK_CAPACITIES, QUICK_POLICIES

TINY_WORKLOAD = [
    "--sessions", "2", "--turns", "2", "--system-prompt-tokens", "8",
    "--question-tokens", "4", "--answer-tokens", "4", "--layers", "1", "--heads", "2",
    "--no-progress",
]  # fmt: skip


def _parse(arguments: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mooncake-redis")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["sim", *arguments])


def _run_sim(arguments: list[str]) -> int:
    args = _parse(arguments)
    return int(args.func(args))


def test_the_default_run_is_the_quick_matrix_and_full_is_one_option_away() -> None:
    """`sim` with no options compares every index under the two LRU policies at three
    capacities, and the optimum at each (27 runs, under 30 s on 2 cores); --full is the
    whole matrix (52)."""
    quick = simulation_settings(_parse([]))
    assert (quick.policies, quick.capacity_fractions) == (QUICK_POLICIES, QUICK_CAPACITIES)
    assert len(quick.combinations()) == 4 * 2 * 3 + 3
    full = simulation_settings(_parse(["--full"]))
    assert full.policies == (*POLICY_NAMES, OPTIMUM_POLICY)
    assert len(full.combinations()) == 4 * 3 * 4 + 4
    assert len(simulation_settings(_parse(["--full", "--policies", "lru"])).combinations()) \
        == 4 * 1 * 4
    assert simulation_settings(_parse(["--capacities", "0.3"])).capacity_fractions == (0.3,)


def test_a_run_shows_a_progress_bar_on_stderr(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    tiny = [argument for argument in TINY_WORKLOAD if argument != "--no-progress"]
    assert _run_sim([*tiny, "--indexes", "hash", "--capacities", "0.5", "--out",
                     str(tmp_path)]) == 0
    assert "sim: 100%" in capsys.readouterr().err


def test_a_run_prints_the_table_and_writes_csv_json_and_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    code = _run_sim([*TINY_WORKLOAD, "--full", "--capacities", "0.3,0.6", "--out", str(out),
                     "--plot"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "hit rate" in printed and "prefix-protected" in printed and "bitwise-radix" in printed
    assert "of optimum" in printed and "belady" in printed
    with (out / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * (3 * 4 + 1)  # capacities x (policies x indexes + the optimum)
    assert {row["index"] for row in rows} == {
        "hash", "hash-bounded-scan", "radix", "bitwise-radix", OPTIMUM_INDEX}
    assert all(0 <= float(row["hit_rate"]) <= 1 and int(row["reads"]) > 0 for row in rows)
    assert all(0 <= float(row["hit_rate_of_optimum"]) <= 1 for row in rows)
    optimum_rows = [row for row in rows if row["policy"] == OPTIMUM_POLICY]
    assert [row["lookup_p50_ns"] for row in optimum_rows] == ["", ""]  # nobody timed it
    document = json.loads((out / "results.json").read_text())
    assert document["run"]["workload"]["sessions"] == 2
    assert [r["hit_rate"] for r in document["results"]] == [float(r["hit_rate"]) for r in rows]
    assert (out / "sim_hit_rate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_python_dash_m_needs_no_sub_command_name(tmp_path: Path) -> None:
    code = sim_main.main(
        [*TINY_WORKLOAD, "--indexes", "radix", "--policies", "lru", "--capacities", "0.5",
         "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    assert (tmp_path / "results.csv").exists() and not (tmp_path / "sim_hit_rate.png").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--capacities", "-0.1"], "not a fraction"),
        (["--capacities", "0,0.5"], "not a fraction"),
        (["--capacities", "1.5"], "not a fraction"),
        (["--capacities", "half"], "could not convert"),
        (["--policies", "lru,fifo"], "unknown policy fifo"),
        (["--indexes", "btree"], "unknown index btree"),
        (["--sessions", "0"], "below the minimum 1"),
        (["--layers", "-2"], "below the minimum 1"),
        (["--scan-limit", "x"], "not an integer"),
    ],
)
def test_bad_options_exit_2_with_a_message_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _run_sim([*arguments, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--turns", "100000"], "more than the key schema"),
        (["--layers", "1001"], "layers must be at most 1000"),
    ],
)
def test_input_the_simulation_cannot_use_returns_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert _run_sim([*TINY_WORKLOAD, *arguments, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
