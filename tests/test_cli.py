"""The mooncake-redis command, run as a user would: in-process (memory://) and on the real
redis-server the tests start. Assertions are on what Redis holds and what is printed."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import rq
from helpers import A, B, C, page
from helpers import build_small_tree as build

from mooncake_redis import Index
from mooncake_redis.capacity.eviction import LOCK_HELD, TARGET_REACHED
from mooncake_redis.cli.main import build_parser, main
from mooncake_redis.operations.fsck import check
from mooncake_redis.settings import ENV_URL
from mooncake_redis.sim import cli as sim_cli
from mooncake_redis.urls import RedisCli, safe_url
from mooncake_redis.workers.jobs import ENV_QUEUE_URL, QUEUE_NAME

needs_redis_cli = pytest.mark.skipif(shutil.which("redis-cli") is None,
                                     reason="redis-cli is not installed")


@pytest.fixture(autouse=True)
def no_index_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands see only what each test gives them (MOONCAKE_REDIS_* of the caller's shell
    would change defaults)."""
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    return subprocess.run([sys.executable, "-m", "mooncake_redis", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**environment, **(env or {})})


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of the database with its serialized value."""
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}



# -- demo --------------------------------------------------------------------------------


def test_demo_runs_on_the_in_process_default_and_says_so() -> None:
    result = run_cli("demo", "--conversations", "2", "--turns", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "on the in-process memory:// store" in out and "namespace 'demo'" in out
    assert "request   1  chat 1 turn 1:  13 pages,   0 reused,  13 stored" in out
    assert "request   2  chat 2 turn 1:  12 pages,   8 reused,   4 stored" in out
    assert "512.0 KiB" in out and "capacity 64.0 GiB" in out
    # no redis-cli can reach memory://: the raw data is read in-process instead
    assert "redis-cli -" not in out and "redis-cli HGETALL" not in out
    assert "redis-cli cannot reach it" in out and "HGETALL demo:{" in out
    assert "0 interior nodes" in out and "fsck: clean" in out


def test_demo_on_real_redis_prints_working_redis_cli_commands_and_refuses_reuse(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--url", redis_url, "demo", "--conversations", "2", "--turns", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"redis-cli -h 127.0.0.1 -p {port_of(redis_url)} -n 0 HGETALL 'demo:{{" in out
    assert "ZSCORE 'demo:{" in out
    index = Index.from_url(redis_url, namespace="demo", read_only=True)
    usage = index.usage()
    assert usage.objects == 4 * usage.nodes > 0  # K and V on two ranks per page
    assert usage.ratio <= index.settings.eviction_target_ratio  # the demo's eviction ran
    assert check(index.ctx).clean

    before = snapshot(redis.Redis.from_url(redis_url))
    assert main(args) == 1
    assert "namespace 'demo'" in capsys.readouterr().err
    assert snapshot(redis.Redis.from_url(redis_url)) == before  # refused: nothing written

    assert main([*args, "--reset"]) == 0
    assert "fsck: clean" in capsys.readouterr().out


# -- stats, inspect, tree, config --------------------------------------------------------


def test_inspect_tree_and_stats_on_real_redis(redis_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="cli")
    build(index)
    common = ["--url", redis_url, "--namespace", "cli"]
    cli = f"redis-cli -h 127.0.0.1 -p {port_of(redis_url)} -n 0"

    assert main([*common, "inspect", A]) == 0
    out = capsys.readouterr().out
    assert f"node {A} (interior, shard {index.ctx.shard(A)})" in out
    assert "children    2 children" in out and "keys        1 key\n" in out
    assert f"{cli} HGETALL 'cli:{{{index.ctx.shard(A)}}}:n:{A}'" in out
    assert f"{cli} ZSCORE 'cli:{{{index.ctx.shard(A)}}}:leaves' {A}" in out
    assert "eviction    not a leaf (it has children)" in out

    assert main([*common, "inspect", C]) == 0
    out = capsys.readouterr().out
    assert f"node {C} (leaf, shard {index.ctx.shard(C)})" in out
    assert f"parent      {A} (link epoch" in out
    assert "1 soft pin, 0 hard pins" in out and "processing  1" in out
    assert f"ZSCORE 'cli:{{{index.ctx.shard(C)}}}:soft_leaves' {C}" in out

    assert main([*common, "inspect", f"{B}_0_k"]) == 0
    out = capsys.readouterr().out
    assert "state       complete" in out
    assert f"{cli} HGET 'cli:{{{index.ctx.shard(B)}}}:n:{B}' o:_0_k" in out
    assert "size        1024 (1.0 KiB)" in out and f"token {index.ctx.token}" in out

    assert main([*common, "inspect", f"{C}_0_k"]) == 0
    assert "state       processing since" in capsys.readouterr().out

    assert main([*common, "tree", A]) == 0
    labels = {B: "1 key, 1.0 KiB", C: "1 key, 512 B, 1 processing, soft-pinned"}
    first, second = sorted((B, C))  # children are drawn in hash order
    assert capsys.readouterr().out.splitlines() == [
        f"{A[:12]}…  1 key, 2.0 KiB",
        f"├─ {first[:12]}…  {labels[first]}",
        f"└─ {second[:12]}…  {labels[second]}",
    ]

    assert main([*common, "stats"]) == 0
    out = capsys.readouterr().out
    assert "usage      3 objects in 3 nodes, 3.5 KiB used of unlimited" in out
    assert "admission  no limit (capacity unlimited)" in out
    assert "  capacity_bytes                 0 (unlimited) *" in out


@needs_redis_cli
def test_the_printed_redis_cli_commands_show_the_raw_data(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="raw")
    build(index)
    assert main(["--url", redis_url, "--namespace", "raw", "inspect", B]) == 0
    commands = [line.strip() for line in capsys.readouterr().out.splitlines()
                if line.strip().startswith("redis-cli ")]
    assert len(commands) == 2
    hgetall = subprocess.run(shlex.split(commands[0]), capture_output=True, text=True,
                             check=True, timeout=60)
    fields = hgetall.stdout.split()
    assert dict(zip(fields[::2], fields[1::2])) == index.client.hgetall(index.ctx.schema.node(B))
    zscore = subprocess.run(shlex.split(commands[1]), capture_output=True, text=True,
                            check=True, timeout=60)
    assert float(zscore.stdout) == index.get_node(B).eviction_score  # type: ignore[union-attr]


def test_read_only_commands_write_nothing(redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    admin = redis.Redis.from_url(redis_url)
    build(Index.from_url(redis_url, namespace="ro"))
    # a user that may only read: any write a command tried would fail it with NOPERM
    admin.execute_command("ACL", "SETUSER", "reader", "reset", "on", ">reader-pw", "~*",
                          "+@read", "+time", "+ping", "+client", "+config|get", "+info")
    url = redis_url.replace("redis://", "redis://reader:reader-pw@")
    monkeypatch.setenv("MOONCAKE_REDIS_CAPACITY_BYTES", "1GiB")  # must not be stored
    before = snapshot(admin)
    for namespace in ("ro", "fresh"):
        common = ["--url", url, "--namespace", namespace]
        found = 0 if namespace == "ro" else 1  # a namespace that does not exist: said so
        assert main([*common, "stats"]) == found
        assert main([*common, "inspect", A]) == found
        assert main([*common, "tree", A]) == found
        assert main([*common, "fsck", "--quiet"]) == found
        assert main([*common, "config", "get"]) == 0
        assert main([*common, "doctor"]) == 1  # the tests' server persists nothing
    assert "NOPERM" not in capsys.readouterr().err
    assert snapshot(admin) == before
    assert not admin.exists("fresh:settings")


def test_config_set_stores_settings_and_refuses_what_would_strand_data(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="conf")
    build(index)
    common = ["--url", redis_url, "--namespace", "conf"]
    assert main([*common, "config", "set", "capacity_bytes=1MiB", "high_watermark=0.8"]) == 0
    assert "capacity_bytes                 1048576 (1.0 MiB)" in capsys.readouterr().out
    assert index.client.hgetall("conf:settings") == {"capacity_bytes": "1048576",
                                                     "high_watermark": "0.8",
                                                     "shard_count": "16"}
    shard = index.ctx.schema.shard_keys(index.ctx.shard(A)).stats
    assert int(index.client.hget(shard, "limit")) > 0  # a new capacity rebalances shards
    assert main([*common, "config", "set", "prefix_extractor=tagged"]) == 1  # refused
    assert "refusing to change prefix_extractor" in capsys.readouterr().err
    for wrong in ("high_watermark", "no_such_setting=1", "high_watermark=2", "lease_ttl_ms=x"):
        with pytest.raises(SystemExit) as usage_error:  # argparse: a usage error
            main([*common, "config", "set", wrong])
        assert usage_error.value.code == 2
    assert main([*common, "config", "get", "no_such_setting"]) == 2
    assert index.client.hget("conf:settings", "lease_ttl_ms") is None
    assert index.client.hget("conf:settings", "prefix_extractor") is None


# -- evict, worker, monitor --------------------------------------------------------------


def fill(index: Index, pages: int, size: int = 10, chain: bool = True) -> None:
    """A chain of pages (or, chain=False, pages without parents)."""
    parent = None
    for number in range(pages):
        prefix_hash = page(f"fill-{number}")
        index.put_start(f"{prefix_hash}_0_k", size, parent_block_hash=parent)
        index.put_end(f"{prefix_hash}_0_k")
        parent = prefix_hash if chain else None


def test_evict_reports_and_exits_1_when_it_could_not_run(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="ev", capacity_bytes=1 << 20)
    fill(index, 10, size=100)
    common = ["--url", redis_url, "--namespace", "ev", "evict", "--quiet"]
    index.client.set(index.ctx.schema.eviction_lock, "another-job", px=10_000)
    assert main([*common, "--target", "0.5"]) == 1
    assert f"stopped:          {LOCK_HELD}" in capsys.readouterr().out
    index.client.delete(index.ctx.schema.eviction_lock)

    assert main([*common, "--target", "0.0"]) == 0
    out = capsys.readouterr().out
    assert f"stopped:          {TARGET_REACHED}" in out
    assert "leaves evicted:   10" in out and "objects evicted:  10" in out
    assert "interior nodes:   0" in out and "resolver:         0 unlinks finished" in out
    assert index.usage().objects == 0 and check(index.ctx).clean


def test_evict_in_the_foreground_goes_on_past_max_rounds_per_job_and_says_why_it_stopped(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """20 pages without parents take 20 rounds (one leaf each time; a chain would drain in
    one); the namespace's job limit is 2 rounds. Without --rounds evict goes on to the
    target; with it, it says what to do."""
    index = Index.from_url(redis_url, namespace="fg", capacity_bytes=1 << 20,
                           max_rounds_per_job=2, leaves_per_round=1)
    fill(index, 20, size=100, chain=False)
    common = ["--url", redis_url, "--namespace", "fg", "evict", "--quiet", "--target", "0"]
    assert main([*common, "--rounds", "3"]) == 1
    captured = capsys.readouterr()
    assert "stopped:          round limit" in captured.out
    assert "error: stopped at --rounds 3 above the target" in captured.err
    assert main(common) == 0
    assert f"stopped:          {TARGET_REACHED}" in capsys.readouterr().out
    assert index.usage().objects == 0


def test_evict_with_a_ratio_of_an_unlimited_capacity_says_how_to_set_one(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    fill(Index.from_url(redis_url), 1)
    assert main(["--url", redis_url, "evict", "--quiet", "--target", "0.5"]) == 1
    assert "config set capacity_bytes=" in capsys.readouterr().err


def test_worker_runs_a_queued_job_on_the_url_it_was_given(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    queue_url = redis_url.rsplit("/", 1)[0] + "/1"
    index = Index.from_url(redis_url, namespace="wk", capacity_bytes=1 << 20,
                           queue_url=queue_url)
    fill(index, 10)
    index.set_config(capacity_bytes=100)  # 100 bytes used: above the high watermark
    from mooncake_redis.workers.jobs import request_eviction

    assert request_eviction(index.ctx)
    monkeypatch.setenv(ENV_QUEUE_URL, queue_url)
    monkeypatch.setenv(ENV_URL, "memory://not-this-one")  # --url wins, for jobs too
    assert main(["--url", redis_url, "--namespace", "wk", "worker", "--burst"]) == 0
    assert index.usage().used_bytes <= 85
    assert len(rq.Queue(QUEUE_NAME, connection=redis.Redis.from_url(queue_url))) == 0
    assert "persists nothing" in capsys.readouterr().err  # doctor's warnings at start


def test_monitor_enqueues_above_the_watermark_on_its_queue(
        redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="mon", capacity_bytes=1 << 20)
    fill(index, 10)
    index.set_config(capacity_bytes=100)
    common = ["--url", redis_url, "--namespace", "mon", "monitor", "--interval", "0",
              "--iterations", "2"]
    queue_url = redis_url.rsplit("/", 1)[0] + "/1"
    monkeypatch.setenv(ENV_QUEUE_URL, queue_url)
    assert main(common) == 0
    assert "1 eviction job enqueued" in capsys.readouterr().out  # one queued at a time
    assert len(rq.Queue(QUEUE_NAME, connection=redis.Redis.from_url(queue_url))) == 1


# -- fsck ----------------------------------------------------------------------------------


def test_fsck_finds_a_dangling_child_and_repair_fixes_it(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="fs")
    build(index)
    common = ["--url", redis_url, "--namespace", "fs", "fsck", "--quiet"]
    assert main(common) == 0 and "clean" in capsys.readouterr().out
    # what a crashed writer leaves: the parent lists a child that was never written
    node = index.ctx.schema.node(A)
    index.client.hset(node, mapping={page("never"): 1, "nc": 3})
    before = snapshot(index.client)
    assert main(common) == 1
    out = capsys.readouterr().out
    assert "dangling_child: 1" in out and page("never") in out
    assert snapshot(index.client) == before  # fsck without --repair reads only
    assert main([*common, "--repair"]) == 0
    out = capsys.readouterr().out
    assert "repaired dangling_link: 1" in out and "clean after repair" in out
    assert check(index.ctx).clean


def json_of(capsys: pytest.CaptureFixture[str], code: int, *args: str) -> Any:
    """Run the command; check its exit code; its stdout parsed as one JSON document."""
    assert main(list(args)) == code
    return json.loads(capsys.readouterr().out)


def test_every_read_command_prints_one_json_document_with_the_librarys_values(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="js")
    build(index)
    index.set_config(capacity_bytes=1 << 20)
    index.put_start(f"{B}_1_k", 10, hard_pin=True)  # a hard-pinned leaf: score infinite
    index.put_end(f"{B}_1_k")
    common = ["--url", redis_url, "--namespace", "js"]

    stats = json_of(capsys, 0, *common, "stats", "--json")
    usage = index.usage()
    assert stats["usage"] == {**dataclasses.asdict(usage), "ratio": usage.ratio}
    assert stats["eviction_running"] is False and stats["namespace"] == "js"
    assert stats["settings"]["capacity_bytes"] == {"value": 1 << 20, "stored": True}

    inspected = json_of(capsys, 0, *common, "inspect", B, "--json")
    node = index.get_node(B)
    assert node is not None and node.eviction_score == math.inf
    assert inspected == {"node": {**dataclasses.asdict(node), "eviction_score": "inf"},
                         "object": None}
    inspected = json_of(capsys, 0, *common, "inspect", f"{C}_0_k", "--json")
    expected = dataclasses.asdict(index.object_info(f"{C}_0_k"))
    assert inspected["object"] == {**expected, "replicas": list(expected["replicas"])}
    assert main([*common, "inspect", page("none"), "--json"]) == 1
    assert capsys.readouterr().out == ""

    tree = json_of(capsys, 0, *common, "tree", A, "--json", "--depth", "0")
    assert tree["stopped_at_max_nodes"] is False
    assert [(n["prefix_hash"], n["depth"], n["hidden_children"]) for n in tree["nodes"]] \
        == [(A, 0, 2)]
    tree = json_of(capsys, 0, *common, "tree", A, "--json")
    assert [(n["prefix_hash"], n["tree_parent"], n["depth"]) for n in tree["nodes"]] \
        == [(A, None, 0), *((child, A, 1) for child in sorted((B, C)))]
    assert tree["nodes"][0]["node"] == dataclasses.asdict(index.get_node(A))
    assert json_of(capsys, 0, *common, "tree", A, "--json", "--max-nodes", "1")[
        "stopped_at_max_nodes"] is True

    config = json_of(capsys, 0, *common, "config", "get", "high_watermark", "--json")
    assert config["settings"] == {
        "high_watermark": {"value": index.settings.high_watermark, "stored": False}}

    fsck = json_of(capsys, 0, *common, "fsck", "--quiet", "--json")
    report = check(index.ctx)
    assert fsck["clean"] is True and fsck["problems"] == []
    assert (fsck["nodes"], fsck["objects"], fsck["shards"]) == \
        (report.nodes, report.objects, report.shards)
    index.client.hset(index.ctx.schema.node(A), mapping={page("never"): 1, "nc": 3})
    fsck = json_of(capsys, 1, *common, "fsck", "--quiet", "--json")
    assert fsck["clean"] is False and fsck["counts"] == {"dangling_child": 1}
    assert main([*common, "fsck", "--json", "--repair"]) == 2  # --json only reads

    doctor = json_of(capsys, 1, *common, "doctor", "--json")  # the tests' server persists nothing
    assert doctor["ok"] is False and any("persists nothing" in w for w in doctor["warnings"])


def test_a_unique_hash_prefix_names_its_node_in_inspect_and_tree(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="pre")
    build(index)
    twins = ["deadbeef" + "0" * 56, "deadbeef" + "1" * 56]
    for twin in twins:
        index.put_start(f"{twin}_0_k", 8)
    common = ["--url", redis_url, "--namespace", "pre"]

    assert json_of(capsys, 0, *common, "inspect", A[:8], "--json")["node"]["prefix_hash"] == A
    assert json_of(capsys, 0, *common, "tree", f"{A[:12]}…", "--json")["root"] == A
    assert main([*common, "tree", C[:20]]) == 0
    assert capsys.readouterr().out.startswith(f"{C[:12]}…  1 key")
    assert json_of(capsys, 0, *common, "inspect", "deadbeef1", "--json")["node"][
        "prefix_hash"] == twins[1]

    assert main([*common, "inspect", "deadbeef"]) == 1  # two nodes begin with it
    err = capsys.readouterr().err
    assert "hash prefix 'deadbeef' begins more than one node's hash" in err
    assert twins[0] in err and twins[1] in err
    assert main([*common, "tree", "deadbeef"]) == 1
    assert "begins more than one node's hash" in capsys.readouterr().err
    for missing in ("deadbeff", "deadbeef2"):
        for command in ("inspect", "tree"):
            assert main([*common, command, missing]) == 1
            assert capsys.readouterr().err == (f"error: no node in namespace 'pre' has a hash "
                                               f"beginning with {missing!r}\n")
    assert main([*common, "inspect", "deadbee"]) == 1  # 7 digits: not taken as a prefix
    assert "no node or object 'deadbee'" in capsys.readouterr().err


def test_roots_lists_the_nodes_without_a_parent_up_to_the_limit(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="rt")
    build(index)
    D = page("d")
    index.put_start(f"{D}_0_k", 8)
    common = ["--url", redis_url, "--namespace", "rt", "roots"]
    nodes = [index.get_node(h) for h in (A, B, D)]
    assert [node and node.parent for node in nodes] == [None, A, None]

    assert main(common) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted((A, D))
    listed = json_of(capsys, 0, *common, "--json")
    assert sorted(listed["roots"]) == sorted((A, D)) and listed["more"] is False
    listed = json_of(capsys, 0, *common, "--json", "--limit", "1")
    assert listed["roots"][0] in (A, D) and len(listed["roots"]) == 1 and listed["more"]
    assert main([*common, "--limit", "1"]) == 0
    assert "stopped at 1 root; use --limit" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_namespaces_lists_each_namespace_with_its_usage(
        backend: str, request: pytest.FixtureRequest,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = request.getfixturevalue("redis_url" if backend == "redis" else "cluster_url")
    alpha = Index.from_url(url, namespace="alpha", capacity_bytes=1 << 20)
    build(alpha)
    beta = Index.from_url(url, namespace="beta.2")  # no setting given: only the layout
    beta.put_start(f"{page('x')}_0_k", 100)
    Index.from_url(url, namespace="gamma", lease_ttl_ms=5)  # settings, no data yet
    for key in ("x:y:settings", "x:{zz}:stats", f"x:{{ab}}:n:{A}:settings"):
        alpha.client.hset(key, "a", "1")  # keys that only look like a namespace's: not listed
    alpha.client.set("plain:settings", "1")  # not a hash: not a namespace's either
    assert beta.client.hgetall("beta.2:settings") == {"shard_count": "16"}

    listed = json_of(capsys, 0, "--url", url, "namespaces", "--json")["namespaces"]
    assert [item["namespace"] for item in listed] == ["alpha", "beta.2", "gamma"]
    by_name = {item["namespace"]: item for item in listed}
    for index in (alpha, beta):
        usage = index.usage()
        assert by_name[index.namespace] == {"namespace": index.namespace,
                                            **dataclasses.asdict(usage), "ratio": usage.ratio}
    assert by_name["alpha"]["objects"] == 3 and by_name["alpha"]["capacity_bytes"] == 1 << 20
    assert by_name["gamma"]["objects"] == by_name["gamma"]["nodes"] == 0

    assert main(["namespaces", "--url", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "OBJECTS", "NODES", "USED", "CAPACITY", "USED%"]
    assert lines[1].split() == ["alpha", "3", "3", "3.5", "KiB", "1.0", "MiB", "0.3%"]
    assert lines[2].split() == ["beta.2", "1", "1", "100", "B", "unlimited", "-"]
    assert alpha.client.hgetall("beta.2:settings") == {"shard_count": "16"}  # read only:
    assert not alpha.client.exists("plain:{0}:stats")  # nothing more written


def test_namespaces_on_an_empty_redis_says_so(redis_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", redis_url, "namespaces"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"no namespace at {redis_url}\n"
    assert json_of(capsys, 0, "--url", redis_url, "namespaces", "--json") == {
        "namespaces": [], "not_readable": []}


# -- errors and URLs ---------------------------------------------------------------------


def test_errors_are_one_line_with_passwords_masked(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "redis://u:pw-hunter2@127.0.0.1:1/0", "stats"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Redis at redis://u:***@127.0.0.1:1/0: ")
    assert err.count("\n") == 1 and "pw-hunter2" not in err
    assert main(["--url", "redis://127.0.0.1:1/0?password=pw-hunter3", "stats"]) == 1
    err = capsys.readouterr().err
    assert "pw-hunter3" not in err and "password=***" in err
    with pytest.raises(SystemExit) as usage_error:
        main(["--url", "nonsense", "stats"])
    assert usage_error.value.code == 2
    assert "error: argument --url: Redis URL 'nonsense'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stats", "--url", "bogus://u:pw-hunter4@h:1/0"])
    err = capsys.readouterr().err
    assert "unknown URL scheme" in err and "pw-hunter4" not in err
    assert main(["inspect", "nothing"]) == 1
    assert "error: namespace 'mc' does not exist at memory://" in capsys.readouterr().err


def test_redis_cli_flags_come_from_the_url_without_its_password() -> None:
    def flags(url: str) -> list[str] | None:
        cli = RedisCli.for_url(url)
        return None if cli is None else list(cli.flags)

    assert flags("memory://demo") is None
    assert flags("redis://h:7000/2") == ["-h", "h", "-p", "7000", "-n", "2"]
    assert flags("redis://h") == ["-h", "h", "-p", "6379", "-n", "0"]
    assert flags("redis://u:secret@[::1]:7001?db=3") == ["-h", "::1", "-p", "7001", "-n", "3",
                                                         "--user", "u"]
    assert flags("rediss://h:6380/0?ssl_ca_certs=/ca.pem") == [
        "-h", "h", "-p", "6380", "-n", "0", "--tls", "--cacert", "/ca.pem"]
    assert flags("unix:///run/redis.sock?db=1") == ["-s", "/run/redis.sock", "-n", "1"]
    assert flags("redis+cluster://:pw@n1:7000,n2:7001") == ["-c", "-h", "n1", "-p", "7000"]
    cli = RedisCli.for_url("redis://:secret@h:1/0")
    assert cli is not None and cli.needs_password and "secret" not in cli.command("GET", "k")
    assert safe_url("redis+cluster://u:pw@n1:1,n2:2") == "redis+cluster://u:***@n1:1,n2:2"


COMMANDS = ("demo", "stats", "inspect", "tree", "roots", "namespaces", "config", "evict",
            "worker", "monitor", "events", "ingest", "pods", "fsck", "doctor", "metrics",
            "segments", "sim")
"""Every command, as the README's "Command line" lists them."""


def test_help_lists_every_command() -> None:
    """--help lists each command with its help text, in its own entry: the commands the
    parser has, all of them, and no other."""
    result = run_cli("--help")
    assert result.returncode == 0
    listed = re.findall(r"^    (\S+) +\S", result.stdout, re.M)  # "    stats   usage, ..."
    assert sorted(listed) == sorted(COMMANDS), listed
    parser = next(action for action in build_parser()._actions
                  if isinstance(action, argparse._SubParsersAction))
    assert sorted(parser.choices) == sorted(COMMANDS)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    synopsis = readme.split("## Command line", 1)[1].split("```", 2)[1]
    assert sorted(set(re.findall(r"^  ([a-z]+) ", synopsis, re.M))) == sorted(COMMANDS)



# -- conventions: options anywhere, --version, python -m, exit codes, warnings ------------


def test_global_options_work_after_the_command_too(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    index = Index.from_url(redis_url, namespace="after")
    build(index)
    assert main(["stats", "--url", redis_url, "--namespace", "after"]) == 0
    captured = capsys.readouterr()
    assert "3 objects in 3 nodes" in captured.out and "warning" not in captured.err
    # after the command wins over before it, as the closer option does in rq and celery
    assert main(["--namespace", "other", "tree", A, "--namespace", "after", "--url",
                 redis_url]) == 0
    assert A[:8] in capsys.readouterr().out
    # a sub-command's own sub-command (config get) takes them as well
    assert main(["config", "get", "capacity_bytes", "--url", redis_url, "--namespace",
                 "after"]) == 0
    assert "settings of namespace 'after'" in capsys.readouterr().out
    assert main(["fsck", "--quiet", "--url", redis_url, "--namespace", "after"]) == 0
    assert "clean" in capsys.readouterr().out


def test_python_m_and_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"mooncake-redis {importlib.metadata.version('mooncake-redis')}"
    result = run_cli("config", "get", "--url", "memory://")
    assert result.returncode == 0 and "settings of namespace 'mc'" in result.stdout


def test_exit_codes_2_only_for_usage_errors(redis_url: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for wrong in (["no-such-command"], ["monitor", "--interval", "-1"],
                  ["monitor", "--interval", "nan"], ["evict", "--rounds", "0"],
                  ["fsck", "--show", "-3"], ["stats", "--no-such-option"],
                  ["roots", "--limit", "0"], []):
        with pytest.raises(SystemExit) as usage_error:
            main(["--url", redis_url, *wrong])
        assert usage_error.value.code == 2, wrong
        err = capsys.readouterr().err
        assert "usage: mooncake-redis" in err and "Traceback" not in err
    # a runtime failure is 1, whatever the command: here Redis refuses the connection
    for command in (["stats"], ["stats", "--json"], ["roots"], ["fsck", "--quiet"], ["doctor"],
                    ["evict", "--quiet"]):
        assert main(["--url", "redis://127.0.0.1:1/0", *command]) == 1, command
        assert capsys.readouterr().err.startswith("error: Redis at redis://127.0.0.1:1/0")


def test_monitor_with_a_negative_interval_is_a_usage_error_not_a_traceback() -> None:
    result = run_cli("monitor", "--url", "memory://", "--interval", "-1")
    assert result.returncode == 2
    assert "argument --interval: -1 is below 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_in_process_store_is_used_only_with_a_warning_unless_asked_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "get"]) == 0
    err = capsys.readouterr().err
    assert "warning: no --url and no $MOONCAKE_REDIS_URL: `config` runs on the in-process " \
           "store memory://" in err
    assert main(["--url", "memory://explicit", "config", "get"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["demo", "--conversations", "1", "--turns", "1"]) == 0
    assert "warning: no --url" not in capsys.readouterr().err


def test_sim_plot_without_matplotlib_fails_before_simulating(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    simulated: list[object] = []
    monkeypatch.setattr(sim_cli, "run", simulated.append)  # the command's body
    assert main(["sim", "--plot", "--out", str(tmp_path / "out")]) == 1
    assert simulated == []  # nothing simulated
    err = capsys.readouterr().err
    assert err.startswith("error: sim --plot needs matplotlib") and "[plot]" in err
    assert not (tmp_path / "out").exists()


def test_a_mistyped_namespace_is_said_to_not_exist(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Reads that need a namespace exit 1 naming it, instead of printing a healthy empty
    store; config get still shows the defaults a new namespace would get."""
    index = Index.from_url(redis_url, namespace="real")
    index.put_start(f"{page('real')}_0_k", 1)
    common = ["--url", redis_url, "--namespace", "reel"]
    for command in (["stats"], ["stats", "--json"], ["fsck"], ["roots"], ["tree", A],
                    ["inspect", A], ["segments"], ["evict", "--target", "0"]):
        assert main([*common, *command]) == 1, command
        err = capsys.readouterr().err
        assert "error: namespace 'reel' does not exist" in err and "namespaces" in err, err
    assert main([*common, "config", "get"]) == 0
    assert main(["--url", redis_url, "--namespace", "real", "stats"]) == 0


def test_not_found_is_one_error_line_and_bad_names_or_ports_are_usage_errors(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    build(Index.from_url(redis_url, namespace="nf"))
    common = ["--url", redis_url, "--namespace", "nf"]
    for command in (["inspect", page("nowhere")], ["tree", page("nowhere")]):
        assert main([*common, *command]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: no node") and err.count("\n") == 1, err
    for wrong in (["--namespace", "a:{b}", "stats"], ["--url", "redis://localhost:abc/0", "stats"],
                  ["--url", "redis://localhost:99999/0", "stats"],
                  ["--url", "redis+cluster://h:1,h:x", "stats"], ["metrics", "--once", "a b"]):
        with pytest.raises(SystemExit) as usage_error:
            main(wrong)
        assert usage_error.value.code == 2, wrong
        assert "error: argument" in capsys.readouterr().err


def test_pods_reads_redis_without_the_vllm_extra(redis_url: str) -> None:
    """`pods` only reads the tree: it must run where pyzmq and msgpack are not installed."""
    script = ("import sys\nsys.modules['zmq'] = sys.modules['msgpack'] = None\n"
              "from mooncake_redis.cli.main import main\n"
              f"sys.exit(main(['--url', {redis_url!r}, '--namespace', 'pods-noextra', "
              f"'pods', {page('block')!r}]))\n")
    Index.from_url(redis_url, namespace="pods-noextra", lease_ttl_ms=5)  # it exists
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stderr  # asked and answered: no pod holds it
    assert result.stderr.startswith("error: no pod holds the first block"), result.stderr
