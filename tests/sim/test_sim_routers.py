"""What one shared index buys N routers, on cases small enough to check by hand, and the
`sim --routers` command end to end."""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from mooncake_redis.errors import TraceFormatError
from mooncake_redis.sim.cli import register
from mooncake_redis.sim.report import TERMINAL_COLUMNS
from mooncake_redis.sim.routers_cli import CSV_NAME, JSON_NAME, PLOT_NAME, write_router_plot
from mooncake_redis.sim.trace.files import TraceRequest
from mooncake_redis.sim.trace.pages import PageTrace, build_page_trace, read_page_trace
from mooncake_redis.sim.trace.routers import (
    RouterSettings,
    derive_sessions,
    follow_ups,
    replay_gateways,
    route,
    run_routers,
)
from mooncake_redis.sim.trace.synthesis import (
    ChainShape,
    synthetic_chains,
    synthetic_requests,
    write_trace,
)

CONVERSATIONS = ChainShape(system_prompts=1, system_prompt_pages=(1, 1), new_pages=(2, 5),
                           follow_up=0.5, branch=0.0, recent_requests=50)


def _trace(chains: Sequence[Sequence[int]], sessions: Sequence[int] | None = None) -> PageTrace:
    requests = (TraceRequest(line, 0, 0, 0, tuple(chain),
                             None if sessions is None else sessions[line - 1])
                for line, chain in enumerate(chains, start=1))
    return build_page_trace(requests, "test")


def test_a_gateway_finds_only_what_it_routed_and_a_shared_index_finds_everything() -> None:
    # pages a-b, a-b-c, a-b-c-d, e; requests 0 and 2 to gateway 0, 1 and 3 to gateway 1
    trace = _trace([[1, 2], [1, 2, 3], [1, 2, 3, 4], [5]])
    is_follow_up = follow_ups(derive_sessions(trace.chains))
    assert is_follow_up == [False, True, True, False]
    shared, [separate] = replay_gateways(trace, trace.distinct_pages, is_follow_up,
                                         [[0, 1, 0, 1]])
    # shared: 0, a-b, a-b-c, 0; gateway 0 knows a-b when request 2 comes, gateway 1 nothing
    assert (shared.hits, shared.follow_up_hits, shared.pool_pages) == (5, 5, 5)
    assert (separate.hits, separate.follow_up_hits, separate.stale) == (2, 2, 0)
    assert separate.indexes == [{0, 1, 2, 3}, {0, 1, 2, 4}]


def test_a_page_the_pool_evicted_is_a_stale_miss_for_the_gateway_that_listed_it() -> None:
    trace = _trace([[1, 2], [3], [1, 2]])  # a pool of 2 pages drops b to store c
    shared, [separate] = replay_gateways(trace, 2, [False] * 3, [[0, 1, 0]])
    assert shared.hits == 1  # a, still pooled
    assert (separate.hits, separate.stale) == (1, 1)  # gateway 0 listed a-b; b was gone


def test_one_router_is_the_shared_index_whatever_the_routing_and_capacity() -> None:
    trace = _trace(synthetic_chains(300, 4, ChainShape(new_pages=(1, 4))))
    for result in run_routers(trace, RouterSettings(router_counts=(1,),
                                                    capacity_fractions=(0.1, 1.0)),
                              show_progress=False):
        # a lone gateway lists every page ever stored, so its run stops where the pool's
        # does (it still lists pages the pool evicted: stale, but no hit is lost)
        assert result.separate_hits == result.shared_hits > 0
        assert result.separate_follow_up_hit_rate == result.shared_follow_up_hit_rate


def test_sticky_routing_of_one_session_is_the_shared_index() -> None:
    chains = synthetic_chains(200, 5, ChainShape(new_pages=(1, 4)))
    trace = _trace(chains, sessions=[7] * len(chains))
    for result in run_routers(trace, RouterSettings(routings=("sticky",),
                                                    capacity_fractions=(0.2, 1.0)),
                              show_progress=False):
        assert result.separate_hits == result.shared_hits > 0, result.routers


def test_separate_indexes_lose_what_other_gateways_stored_and_sticky_routing_keeps_it() -> None:
    made = synthetic_requests(600, 6, CONVERSATIONS)
    trace = _trace([request.chain for request in made], [r.session for r in made])
    results = {(r.routing, r.routers): r
               for r in run_routers(trace, RouterSettings(), show_progress=False)}
    shared = {result.shared_follow_up_hit_rate for result in results.values()}
    assert len(shared) == 1  # the shared index does not care how requests are routed
    random_rates = [results["random", n].separate_follow_up_hit_rate for n in (1, 2, 4, 8)]
    assert random_rates == sorted(random_rates, reverse=True) and random_rates[3] < 0.5 * \
        random_rates[0]
    # sticky keeps a conversation on its gateway: only the shared first page is missed,
    # once per gateway that sees it
    for routers in (2, 4, 8):
        sticky = results["sticky", routers]
        assert 0 < sticky.shared_hits - sticky.separate_hits < routers
        assert sticky.separate_follow_up_hit_rate == pytest.approx(
            sticky.shared_follow_up_hit_rate, abs=0.01)


def test_routing_is_seeded_and_sticky_keeps_a_session_on_one_gateway() -> None:
    sessions = [0, 1, 0, 2, 1, 0]
    assert route(sessions, 4, "random") == route(sessions, 4, "random")
    sticky = route(sessions, 4, "sticky")
    assert sticky[0] == sticky[2] == sticky[5] and sticky[1] == sticky[4]
    assert all(0 <= gateway < 4 for gateway in route(sessions * 50, 4, "random"))
    assert len(set(route(list(range(200)), 4, "random"))) == 4


def test_sessions_are_derived_from_requests_that_repeat_an_earlier_one() -> None:
    chains = [
        [1, 2, 3],  # session 0
        [1, 2, 3, 4],  # repeats request 0 whole: session 0
        [1, 5, 6],  # shares page 1, where no request ends or ends one short: session 1
        [1, 5, 7, 8],  # repeats request 2 but its last page (a partial block): session 1
        [9],  # session 2
        [1, 2, 10],  # repeats request 0 but its last page: taken for its follow-up
    ]
    assert derive_sessions(chains) == [0, 0, 1, 1, 2, 0]
    assert follow_ups([0, 0, 1, 1, 2]) == [False, True, False, True, False]


def test_on_conversations_that_never_branch_the_derived_sessions_are_the_true_ones() -> None:
    made = synthetic_requests(2000, 7, CONVERSATIONS)
    assert derive_sessions([request.chain for request in made]) == [r.session for r in made]
    assert 500 < sum(follow_ups([r.session for r in made])) < 1500


def test_a_generated_trace_names_its_sessions_and_the_reader_keeps_them(tmp_path: Path) -> None:
    made = synthetic_requests(50, 8, CONVERSATIONS)
    path = tmp_path / "trace.jsonl"
    write_trace(path, [r.chain for r in made], [r.session for r in made])
    assert read_page_trace(path).sessions == [r.session for r in made]
    write_trace(path, [r.chain for r in made])  # as Mooncake's traces: no sessions
    assert read_page_trace(path).sessions is None
    line = {"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "session": "s1"}) + "\n")
    with pytest.raises(TraceFormatError, match=r":2: session 's1' is not an integer"):
        read_page_trace(path)


def _run_sim(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mooncake-redis")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sim", *arguments])
    return int(args.func(args))


def test_the_command_prints_the_study_and_writes_csv_json_and_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    made = synthetic_requests(300, 9, CONVERSATIONS)
    write_trace(tmp_path / "t.jsonl", [r.chain for r in made], [r.session for r in made])
    assert _run_sim(["--trace", "t.jsonl", "--routers", "--plot"]) == 0
    captured = capsys.readouterr()
    assert "sim routers: 100%" in captured.err
    assert "f-up separate" in captured.out and "sessions the trace's" in captured.out
    assert "0.95 from 1 to 8 gateways" in captured.out
    assert all(len(line) <= TERMINAL_COLUMNS for line in captured.out.splitlines())
    out = tmp_path / "out" / "sim"
    with (out / CSV_NAME).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["routing"], row["routers"]) for row in rows] == [
        (routing, str(n)) for routing in ("random", "sticky") for n in (1, 2, 4, 8)]
    assert {row["capacity_fraction"] for row in rows} == {"1.0"}
    assert json.loads((out / JSON_NAME).read_text())["run"]["requests"] == 300
    assert (out / PLOT_NAME).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_draws_the_shared_index_once_for_both_routings(tmp_path: Path) -> None:
    made = synthetic_requests(300, 10, CONVERSATIONS)
    trace = _trace([r.chain for r in made], [r.session for r in made])
    legends = write_router_plot(run_routers(trace, RouterSettings(), show_progress=False),
                                tmp_path / "plot.png")
    for legend in legends:
        assert any(label.startswith("shared / random = sticky") for label in legend)
        assert "separate / random" in legend


@pytest.mark.parametrize(("arguments", "message"), [
    (["--routers", "2,0"], "below the minimum 1"),
    (["--routers", "--routing", "round-robin"], "unknown routing round-robin"),
])
def test_bad_router_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   arguments: list[str], message: str) -> None:
    write_trace(tmp_path / "t.jsonl", [[1, 2]])
    with pytest.raises(SystemExit) as exit_info:
        _run_sim(["--trace", str(tmp_path / "t.jsonl"), *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_study_runs_on_a_trace_in_memory_only(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write_trace(tmp_path / "t.jsonl", [[1, 2]])
    assert _run_sim(["--trace", str(tmp_path / "t.jsonl"), "--routers", "--backend", "redis",
                     "--out", str(tmp_path / "out")]) == 2
    assert "--routers runs in memory" in capsys.readouterr().err
    assert _run_sim(["--routers", "--out", str(tmp_path / "out")]) == 2
    assert "--routers needs a trace: add --trace FILE" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
