"""`sim --backend redis`: the page-chain replay on the in-process service, with and without
the radix tree, and the command end to end."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import pytest
from redis_server import RedisServer

from mooncake_redis import Index
from mooncake_redis.cli.main import main as mooncake_redis_main
from mooncake_redis.operations.fsck import check
from mooncake_redis.sim.indexes.workload import (
    WorkloadConfig,
    generate_workload,
    page_chains,
)
from mooncake_redis.sim.redis_backend import (
    CSV_NAME,
    JSON_NAME,
    replay_on_service,
    requests_in_arrival_order,
)
from mooncake_redis.sim.report import TERMINAL_COLUMNS
from mooncake_redis.sim.service.replay import PageLayout, take_census
from mooncake_redis.sim.service.runner import ServiceRunMetrics
from mooncake_redis.sim.trace.pages import hash_chain_pages

_store_names = itertools.count()

# Small enough to replay both modes in about 2 s on real Redis (10 s in process, where an
# eviction job's 256-shard reads are Python), and tight enough (4 sessions on 0.4 of the
# pages) that lease-ordered eviction orphans pages; measured stable across runs.
PRESSURED = WorkloadConfig(
    sessions=4, turns=3, system_prompt_tokens=16, question_tokens=8, answer_tokens=8, seed=0
)
PRESSURED_PAGE_TOKENS = 4
PRESSURED_CAPACITY = 0.4


def _memory_url() -> str:
    return f"memory://sim-redis-{next(_store_names)}"


@pytest.fixture(scope="module")
def pressured_run(redis_server: RedisServer) -> tuple[str, dict[str, ServiceRunMetrics]]:
    """On the session's real Redis (no test of this module flushes it)."""
    url = redis_server.url
    results = replay_on_service(
        generate_workload(PRESSURED), PRESSURED_PAGE_TOKENS, PRESSURED_CAPACITY, url, "t"
    )
    return url, {result.mode: result for result in results}


def test_both_modes_serve_every_request_and_account_for_every_page(
    pressured_run: tuple[str, dict[str, ServiceRunMetrics]],
) -> None:
    _, results = pressured_run
    workload = generate_workload(PRESSURED)
    requested = sum(map(len, requests_in_arrival_order(
        workload, page_chains(workload, PRESSURED_PAGE_TOKENS))))
    assert set(results) == {"radix", "lease"}
    for result in results.values():
        assert result.requests == PRESSURED.sessions * PRESSURED.turns
        assert result.requested_pages == requested
        assert 0 < result.usable_hits <= result.hits < requested and result.pages_stored > 0
        assert result.eviction_jobs > 0 and result.evicted_objects > 0
        assert result.usable_prefix_hit_rate == result.usable_hits / requested


def test_leaf_first_eviction_never_orphans_a_page_and_leaves_a_sound_tree(
    pressured_run: tuple[str, dict[str, ServiceRunMetrics]],
) -> None:
    url, results = pressured_run
    radix = results["radix"]
    assert radix.orphaned_pages == radix.orphaned_bytes == radix.peak_orphaned_bytes == 0
    assert radix.census_orphaned_pages == 0 and radix.hits == radix.usable_hits
    index = Index.from_url(url, namespace=radix.namespace, read_only=True)
    report, usage = check(index.ctx), index.usage()
    assert report.clean, report.problems
    assert report.objects == usage.objects > 0 and report.nodes == usage.nodes > 0  # the run's


def test_lease_ordered_eviction_orphans_pages_and_reuses_less(
    pressured_run: tuple[str, dict[str, ServiceRunMetrics]],
) -> None:
    _, results = pressured_run
    radix, lease = results["radix"], results["lease"]
    assert lease.orphaned_pages > 0 and lease.orphaned_bytes > 0
    assert lease.peak_orphaned_bytes >= lease.orphaned_bytes
    assert (lease.census_orphaned_pages, lease.census_orphaned_bytes) == (
        lease.orphaned_pages, lease.orphaned_bytes)
    assert radix.usable_prefix_hit_rate >= lease.usable_prefix_hit_rate


def test_the_census_counts_orphans_from_the_store() -> None:
    index = Index.from_url(_memory_url(), namespace="t", enable_radix_tree=False)
    layout = PageLayout(object_bytes=100)
    chain = ["a" * 64, "b" * 64, "c" * 64]
    for position, page in enumerate(chain):
        parent = chain[position - 1] if position else None
        for key in layout.keys(page):
            index.put_start(key, layout.object_bytes, parent)
            index.put_end(key)
    pages = hash_chain_pages([chain], "test", page_tokens=4)
    census = take_census(index, layout, pages)
    assert (census.complete, census.orphaned_pages) == ({0, 1, 2}, 0)
    index.remove(layout.keys(chain[1])[0])  # half of the middle page: unusable, not orphaned
    census = take_census(index, layout, pages)
    assert census.complete == {0, 2}
    assert (census.orphaned_pages, census.orphaned_bytes) == (1, 2 * layout.object_bytes)


def test_requests_arrive_interleaved_each_session_in_turn_order() -> None:
    workload = generate_workload(PRESSURED)
    chains = page_chains(workload, PRESSURED_PAGE_TOKENS)
    arrived = list(requests_in_arrival_order(workload, chains))
    assert sorted(map(tuple, arrived)) == sorted(
        tuple(chain) for session in chains for chain in session)
    assert arrived != [chain for session in chains for chain in session]  # interleaved


def test_the_command_prints_the_table_and_writes_csv_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = mooncake_redis_main([
        "--url", _memory_url(), "--namespace", "cli", "sim", "--backend", "redis",
        "--sessions", "2", "--turns", "2", "--system-prompt-tokens", "8",
        "--question-tokens", "4", "--answer-tokens", "4", "--page-tokens", "4",
        "--capacity-fraction", "0.8", "--no-progress", "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "orphans" in printed and "radix" in printed and "lease" in printed
    assert all(len(line) <= TERMINAL_COLUMNS for line in printed.splitlines()
               if not line.startswith("wrote "))  # which names the test's long --out
    with (tmp_path / CSV_NAME).open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["mode"] for row in rows] == ["radix", "lease"]
    assert [row["namespace"] for row in rows] == ["cli-sim-radix", "cli-sim-lease"]
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["run"]["capacity_fraction"] == 0.8
    assert [r["usable_prefix_hit_rate"] for r in document["results"]] == [
        float(r["usable_prefix_hit_rate"]) for r in rows]


def test_a_list_of_capacity_fractions_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        mooncake_redis_main(["sim", "--backend", "redis", "--capacity-fraction", "0.1,0.2"])
    assert exit_info.value.code == 2
    assert "give one fraction" in capsys.readouterr().err
