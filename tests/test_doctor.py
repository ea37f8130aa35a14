"""doctor, on real servers: Redis settings that lose index state, what it reads (maxmemory
and its policy), and data model v1 keys in a namespace, which v2 does not read."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import redis
from helpers import page
from redis_server import RedisServer

from mooncake_redis import Index
from mooncake_redis.cli.main import main
from mooncake_redis.operations.doctor import diagnose


@pytest.fixture(autouse=True)
def no_index_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def persistent_server() -> Iterator[RedisServer]:
    server = RedisServer("--appendonly", "yes", "--maxmemory", "64mb")
    yield server
    server.stop()


@pytest.fixture
def persistent_url(persistent_server: RedisServer) -> str:
    redis.Redis(port=persistent_server.port).flushall()
    return persistent_server.url


V1_KEYS = {  # what data model v1 left in a namespace, one key of each kind
    "old:config": "hash", "old:usage": "string", "old:{13}:objects": "zset",
    "old:{13}:nodes": "set", f"old:{{13}}:obj:{'13' * 32}_0_k": "hash",
    f"old:{{13}}:node:{'13' * 32}": "hash", f"old:{{13}}:children:{'13' * 32}": "set",
    f"old:{{13}}:keys:{'13' * 32}": "zset", "old:{13}:leaves": "zset",
}


def write_v1_keys(client: redis.Redis) -> None:
    for key, kind in V1_KEYS.items():
        if kind == "hash":
            client.hset(key, "created_ms", 1)
        elif kind == "string":
            client.set(key, 1)
        elif kind == "set":
            client.sadd(key, "13" * 32)
        else:
            client.zadd(key, {"13" * 32: 1})


def test_a_redis_that_persists_nothing_or_evicts_gets_warnings(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)  # the tests' server: no AOF
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        warnings = diagnose(client)
        assert any("persists nothing" in w for w in warnings)
        assert any("allkeys-lru" in w for w in warnings)
        assert main(["--url", redis_url, "doctor"]) == 1
        captured = capsys.readouterr()
        assert "appendonly no, save points none, maxmemory 0 (no limit), maxmemory-policy " \
               "allkeys-lru" in captured.out
        assert captured.err.count("warning: ") == 2
    finally:
        client.config_set("maxmemory-policy", "noeviction")


def test_a_persistent_noeviction_redis_is_fine(persistent_url: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    Index.from_url(persistent_url, namespace="mc").put_start(f"{page(1)}_0_k", 1)
    assert main(["--url", persistent_url, "doctor"]) == 0
    out = capsys.readouterr().out
    assert "maxmemory 64.0 MiB, maxmemory-policy noeviction" in out
    assert "namespace 'mc': no data model v1 keys" in out
    assert out.splitlines()[-1].startswith("ok: ")


def test_v1_keys_are_reported_with_a_command_that_deletes_them(
        persistent_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = redis.Redis.from_url(persistent_url, decode_responses=True)
    write_v1_keys(client)
    other = Index.from_url(persistent_url, namespace="other")
    other.put_start(f"{page(2)}_0_k", 1)
    before = {key: client.dump(key) for key in client.scan_iter()}
    assert main(["--url", persistent_url, "--namespace", "old", "doctor"]) == 1
    err = capsys.readouterr().err
    assert "namespace 'old' holds data model v1 keys" in err
    assert "v2 does not read them: no migration exists (nothing was deployed)" in err
    assert "or use another namespace" in err
    assert {key: client.dump(key) for key in client.scan_iter()} == before  # doctor reads only
    assert main(["--url", persistent_url, "--namespace", "other", "doctor"]) == 0
    capsys.readouterr()

    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed: the printed command cannot be run")
    command = err.split("delete the whole namespace: ", 1)[1].split(" (on a cluster", 1)[0]
    assert "--scan --pattern 'old:*'" in command
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=60)
    assert not any(key.startswith("old:") for key in client.scan_iter())
    assert client.exists(other.ctx.schema.node(page(2)))  # another namespace stays
    assert main(["--url", persistent_url, "--namespace", "old", "doctor"]) == 0


def test_without_config_it_falls_back_to_info_and_says_what_it_cannot_see(
        redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "no-config", "reset", "on", ">pw", "~*", "+@all",
                          "-@admin")
    url = redis_url.replace("redis://", "redis://no-config:pw@")
    assert main(["--url", url, "doctor"]) == 1
    captured = capsys.readouterr()
    assert "save points ?" in captured.out and "maxmemory-policy noeviction" in captured.out
    assert "CONFIG is refused" in captured.err and "pw@" not in captured.out + captured.err


def test_the_in_process_store_is_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "memory://doctor", "doctor"]) == 1
    assert "persists nothing and no other process" in capsys.readouterr().err


def test_a_client_warns_once_when_redis_may_evict_keys(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer("--maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level("WARNING", logger="mooncake_redis"):
            Index.from_url(server.url, namespace="evicting")
        assert [r.getMessage() for r in caplog.records if "allkeys-lru" in r.getMessage()]
    finally:
        server.stop()


def test_doctor_warns_when_node_hashes_cannot_stay_listpacks() -> None:
    server = RedisServer("--hash-max-listpack-value", "32", "--appendonly", "yes")
    try:
        warnings = diagnose(redis.Redis(port=server.port, decode_responses=True))
        assert any("hash-max-listpack-value is 32" in w for w in warnings), warnings
    finally:
        server.stop()
