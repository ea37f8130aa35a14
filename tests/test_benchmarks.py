"""Smoke run of the benchmarks at --scale small: they run and write results.json (not speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import stream_events

from mooncake_redis import Index
from mooncake_redis.operations import fsck

ROOT = Path(__file__).resolve().parent.parent

RESULT_KEYS = {
    "engine": "medians",
    "registration": "paths",
    "memory": "totals",
    "eviction": "trees",
    "match_prefix": "calls",
    "reads": "calls",
    "mooncake": "ops",
    "prefix_query": "sizes",
    "cluster": "backends",
    "dropin": "dropin",
    "floor": "paths",
}
"""Each benchmark's main entry in results.json."""


def run_benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    """The benchmarks' command, its clients re-reading the settings once an hour instead of
    every 5 s: a re-read adds a round trip to whichever call comes due, so on a slow
    machine the counts checked below would depend on how long the run took."""
    environment = {**os.environ, "MOONCAKE_REDIS_SETTINGS_REFRESH_SECONDS": "3600"}
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=240, check=False)


def test_help_names_every_option() -> None:
    completed = run_benchmarks("--help")
    assert completed.returncode == 0, completed.stderr
    for option in ("--scale", "--only", "--out", "--snapshots", "--skip-peer"):
        assert option in completed.stdout


def test_small_run_writes_results(tmp_path: Path) -> None:
    # The Mooncake master is left out: whether it is installed must not decide the test.
    completed = run_benchmarks("--scale", "small", "--skip-peer", "--out", str(tmp_path))
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
    engine = results["engine"]["medians"]
    for side in ("ours/1", "floor/1"):  # each request checked its chain: 24 pages first
        assert engine[side]["requests"] >= 8 and engine[side]["pages_checked"] >= 24, side
    paths = {row["path"]: row for row in results["registration"]["paths"]}
    assert all(row["per_second"] > 0 for row in paths.values())
    single = next(row for name, row in paths.items() if name.startswith("put_start (single"))
    # one round trip per put_start (its cleanups ride along on the next)
    assert 1.0 <= single["round_trips"] <= 1.0 + 1 / single["count"]
    assert len(results["registration"]["sweep"]) == 2
    assert {tree["leaves"] for tree in results["eviction"]["trees"]} == {200}
    assert [call["matched"] for call in results["match_prefix"]["calls"]] == [1000, 500, 0, 1000]
    # the leading 32 pages first, the rest in a second round trip only if they all matched
    assert [c["round_trips_per_call"] for c in results["match_prefix"]["calls"][:3]] == [2, 2, 1]
    assert [w["round_trips"] for w in results["match_prefix"]["deep_writes"][:2]] == [1, 1]
    kinds = results["memory"]["kinds"]
    assert {"node: leaf", "node: interior", "leaves", "stats"} <= set(kinds)
    assert kinds["node: interior"]["encodings"] == {"listpack": 1.0}
    assert len(results["memory"]["settings"]) == 3
    side = results["mooncake"]
    assert side["peer"] == {"skipped": "--skip-peer given"}
    assert all(row["redis_aof"]["keys_per_second"] > 0 and row["in_process"]["keys_per_second"]
               > 0 for row in side["ops"])
    assert results["prefix_query"]["sizes"][0]["scan"]["samples"] > 0
    assert {row["evicted_objects"] for row in results["cluster"]["backends"].values()} == {100}
    assert sum(row["shards"] for row in results["cluster"]["spread"]) == 16  # new namespace
    assert [len(row["masters"]) for row in results["cluster"]["backends"].values()] == [1, 3]
    assert all(m["register_cpu_s"] > 0 for row in results["cluster"]["backends"].values()
               for m in row["masters"])  # every master served part of the registration
    assert results["dropin"]["mooncake"] == {"skipped": "--skip-peer given"}
    assert set(results["dropin"]["dropin"]) == {"shm", "disk"}
    assert all(rate > 0 for rates in results["dropin"]["dropin"].values()
               for rate in rates.values())
    floor_rows = results["floor"]["paths"]
    assert all(row["per_second"] > 0 and row["redis_cpu_us"] > 0 for row in floor_rows)
    assert {row["leaves"] for row in floor_rows if row["unit"] == "object"} == {200}
    assert {row["count"] for row in floor_rows if row["unit"] == "object"} == {400}
    # every layout the checkout offers, each printed (256 = today's only layout)
    assert results["floor"]["shard_counts"] == sorted(
        setting.get("shard_count", 256) for setting in floor_module().shard_settings())
    assert results["floor"]["shard_counts"] == sorted({row["shards"] for row in floor_rows})
    goals = {goal["item"]: goal for goal in report["goals"]}
    assert goals["memory per node of two objects, 1M objects, Redis defaults"]["measured"] > 0
    assert "### Issue 10 goals" in (tmp_path / "tables.md").read_text()


def test_only_runs_the_named_benchmark(tmp_path: Path) -> None:
    completed = run_benchmarks("--scale", "small", "--only", "match_prefix", "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert list(report["benchmarks"]) == ["match_prefix"]
    assert {goal["item"] for goal in report["goals"]} == {
        "match_prefix on 1,000 cached pages, p50",
        "match_prefix on 1,000 cached pages, round trips",
        "per-rank batch of 200 pages at depth 1,000, round trips"}


PEER_REQUIRED = "MOONCAKE_PEER_REQUIRED"
"""Set (CI sets it, after scripts/install_mooncake_peer.sh): a peer that cannot run fails
the side-by-side tests instead of skipping them."""


def run_with_the_peer(name: str, tmp_path: Path) -> dict[str, Any]:
    """One benchmark at --scale small with the real Mooncake client (skip if not here,
    unless $MOONCAKE_PEER_REQUIRED is set)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import mooncake_peer

    reason = mooncake_peer.available()
    if reason is not None:
        message = (f"the side-by-side {name} benchmark against Mooncake's own code did not "
                   f"run: {reason}")
        if os.environ.get(PEER_REQUIRED):
            pytest.fail(f"{message} (${PEER_REQUIRED} is set)")
        pytest.skip(message)  # -ra prints it in the run's summary
    completed = run_benchmarks("--scale", "small", "--only", name, "--out", str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    return dict(json.loads((tmp_path / "results.json").read_text())["benchmarks"][name])


def test_side_by_side_runs_the_mooncake_master_where_installed(tmp_path: Path) -> None:
    side = run_with_the_peer("mooncake", tmp_path)
    from benchmarks import mooncake_peer  # importable once run_with_the_peer put ROOT first

    rates = side["results"]["peer"]["rates"]
    assert set(mooncake_peer.OPS) <= set(rates)
    assert all(row["redis_aof"]["ratio"] > 0 for row in side["results"]["ops"]
               if row["theirs"] is not None)


def test_the_drop_in_runs_next_to_the_real_mooncake_client_where_installed(tmp_path: Path
                                                                         ) -> None:
    results = run_with_the_peer("dropin", tmp_path)
    from benchmarks import dropin_workload  # importable once run_with_the_peer put ROOT first

    assert set(results["results"]["mooncake"]["results"]) == set(dropin_workload.OPS)
    assert all(row[1] > 0 and row[3] > 0 for row in results["tables"][0]["rows"])


def floor_module() -> Any:
    sys.path.insert(0, str(ROOT))
    from benchmarks import floor

    return floor


@pytest.mark.parametrize("setting", floor_module().shard_settings(), ids=str)
def test_the_floor_leaves_the_state_the_real_scripts_leave(redis_url: str,
                                                           setting: dict[str, int]) -> None:
    # The floor is a reference only if its state is ours: same fields and counters in every
    # node, same leaves, same stats, same event fields; fsck finds nothing before or after
    # its eviction, which unlinks each leaf from its parent as ours does.
    floor = floor_module()
    from benchmarks.registration import checked, pages_of
    from benchmarks.trees import KEYS_PER_PAGE, OBJECT_BYTES, put_items

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    scripts = floor.FloorScripts(client)
    reference, ours = (Index.from_url(redis_url, namespace=name, **setting)
                       for name in ("floor", "ours"))
    pages = pages_of(7, 300)
    assert sum(scripts.register(reference, group, 10_000)
               for group in (pages[:120], pages[120:])) == len(pages)
    items = put_items(pages)
    checked(ours.batch_put_start(items))
    checked(ours.batch_put_end([key for key, _, _ in items]))
    ours.close()
    for page, _ in pages:
        mine, theirs = (client.hgetall(index.ctx.schema.node(page)) for index in (ours,
                                                                                reference))
        assert set(theirs) == set(mine), page
        assert all(theirs[f] == mine[f] for f in ("p", "nc", "no", "b") if f in mine), page
    assert reference.usage().nodes == ours.usage().nodes == len(pages)
    events: dict[str, list[tuple[Any, ...]]] = {"floor": [], "ours": []}
    for shard in ours.ctx.all_shards():
        mine_keys, theirs_keys = (index.ctx.schema.shard_keys(shard) for index in (ours,
                                                                                 reference))
        assert client.zrange(theirs_keys.leaves, 0, -1) == client.zrange(mine_keys.leaves, 0, -1)
        assert client.hmget(theirs_keys.stats, "used_bytes", "objects", "nodes") == \
            client.hmget(mine_keys.stats, "used_bytes", "objects", "nodes")
        for name, index in (("floor", reference), ("ours", ours)):
            events[name] += [(e.type, e.key, e.size, e.parent, e.replicas_raw, e.extra)
                             for e in stream_events(index, shard)]
    assert len(events["ours"]) == len(pages) * KEYS_PER_PAGE  # none trimmed: the same events
    assert sorted(events["floor"]) == sorted(events["ours"])
    assert fsck.check(reference.ctx).clean

    leaves, objects = scripts.evict(reference, 100)
    assert (leaves, objects) == (100, 100 * KEYS_PER_PAGE)
    usage = reference.usage()
    assert (usage.nodes, usage.objects) == (len(pages) - 100, (len(pages) - 100) * KEYS_PER_PAGE)
    assert usage.used_bytes == usage.objects * OBJECT_BYTES
    assert fsck.check(reference.ctx).clean
