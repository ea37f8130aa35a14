"""Security on v2: Redis users limited to the namespace's keys and the commands we use; a
writer of namespace keys cannot make any client, worker, fsck or CLI run code (settings
are data and extractors are chosen by name); one client's settings arguments never change
another's behaviour; read-only commands need only a read-only user; no password appears
in any output, log, Redis key or RQ job; TLS with a certificate the test makes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import trustme
from helpers import page
from redis_server import RedisServer

from mooncake_redis import (
    ConfigurationError,
    Index,
    MooncakeRedisError,
    PermissionDenied,
)
from mooncake_redis.cli.main import main
from mooncake_redis.keys import KeySchema
from mooncake_redis.operations.fsck import check
from mooncake_redis.settings import ENV_URL, Settings
from mooncake_redis.workers.jobs import ENV_QUEUE_URL, eviction_job, request_eviction
from mooncake_redis.workers.worker import run_worker

NAMESPACE = "acl"
COMMANDS = [
    # what clients, workers, fsck and the CLI send (the executor loads scripts itself)
    "+evalsha", "+script|load", "+time", "+scan", "+exists", "+type", "+get", "+set", "+del",
    "+hget", "+hmget", "+hgetall", "+hkeys", "+hset", "+hsetnx", "+hdel",
    "+zrange", "+zrangebyscore", "+zscore", "+zcard", "+zrem",
    # what the scripts run inside
    "+hincrby", "+zadd", "+zremrangebyscore", "+xadd", "+pexpire",
    # doctor reads the server's persistence settings from INFO when CONFIG is refused
    "+info",
]
READ_COMMANDS = ["+time", "+scan", "+exists", "+type", "+get", "+hget", "+hmget", "+hgetall",
                 "+hkeys", "+zrange", "+zrangebyscore", "+zscore", "+zcard", "+info"]
USERS = {
    # the namespace's own user: its keys and the commands above, nothing else
    "ns-user": ["on", ">ns-secret", "resetkeys", f"~{NAMESPACE}:*", "resetchannels",
                "-@all", *COMMANDS],
    # another namespace's user
    "other-user": ["on", ">other-secret", "resetkeys", "~other:*", "resetchannels", "-@all",
                   *COMMANDS],
    # reads the namespace's keys, writes nothing (key permission R only, no write command)
    "reader": ["on", ">reader-secret", "resetkeys", f"%R~{NAMESPACE}:*", "resetchannels",
               "-@all", *READ_COMMANDS],
}


@pytest.fixture(autouse=True)
def no_index_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A server with the users above; it persists (AOF) so that doctor has nothing to say."""
    server = RedisServer("--appendonly", "yes")
    admin = redis.Redis(port=server.port)
    for user, rules in USERS.items():
        admin.execute_command("ACL", "SETUSER", user, "reset", *rules)
    yield server
    server.stop()


@pytest.fixture
def admin(acl_server: RedisServer) -> redis.Redis:
    client = redis.Redis(port=acl_server.port, decode_responses=True)
    client.flushall()
    return client


def user_url(server: RedisServer, user: str, password: str, database: int = 0) -> str:
    return f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{server.port}/{database}"


def snapshot(client: redis.Redis) -> dict[Any, Any]:
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}


A, B = page("acl-a"), page("acl-b")


def build(index: Index) -> None:
    index.put_start(f"{A}_0_k", 10)
    index.put_end(f"{A}_0_k")
    index.batch_put_start([(f"{B}_0_k", 10, A)])
    index.put_end(f"{B}_0_k")
    index.close()


def exercise(index: Index) -> None:
    """Every operation of the API, the resolver, eviction and fsck --repair."""
    build(index)
    index.register_radix_tree_node(B, A, [f"{B}_0_k"])
    assert index.match_prefix([A, B]) == 2
    assert index.get(f"{A}_0_k") is not None and index.batch_is_exist([f"{B}_0_k"]) == [True]
    assert index.get_keys_by_prefix(A) == [f"{A}_0_k"]
    assert index.get_subtree_keys(A) == [f"{A}_0_k", f"{B}_0_k"]
    node = index.get_node(B)
    assert node is not None and node.parent == A
    index.set_config(capacity_bytes="1MiB")
    assert index.evict(target_ratio=0).leaves == 1  # B; A is leased
    index.resolve(grace_ms=0)
    assert check(index.ctx, repair=True).clean
    index.put_start(f"{B}_1_k", 1, parent_block_hash=A)
    index.put_revoke(f"{B}_1_k")
    assert index.remove_by_regex(A[:8]) == 0  # leased
    assert index.remove_all(force=True) == 1
    assert index.usage().objects == 0


# -- ACL users ---------------------------------------------------------------------------


def test_a_user_limited_to_the_namespace_and_our_commands_can_run_everything(
        acl_server: RedisServer, admin: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    exercise(Index.from_url(url, namespace=NAMESPACE))
    build(Index.from_url(url, namespace=NAMESPACE))
    common = ["--url", url, "--namespace", NAMESPACE]
    for command in (["stats"], ["inspect", A], ["inspect", f"{A}_0_k"], ["tree", A],
                    ["fsck", "--quiet", "--repair"], ["doctor"], ["config", "get"],
                    ["config", "set", "capacity_bytes=2MiB"], ["evict", "--quiet"],
                    ["evict", "--quiet", "--target", "0"]):
        assert main([*common, *command]) == 0, (command, capsys.readouterr())
    assert "NOPERM" not in capsys.readouterr().err
    assert all(key.startswith(f"{NAMESPACE}:") for key in admin.scan_iter())


def test_a_user_of_another_namespace_is_refused_cleanly(acl_server: RedisServer,
                                                        admin: redis.Redis) -> None:
    build(Index.from_url(user_url(acl_server, "ns-user", "ns-secret"), namespace=NAMESPACE))
    before = snapshot(admin)
    with pytest.raises((PermissionDenied, redis.exceptions.NoPermissionError)) as refused:
        index = Index.from_url(user_url(acl_server, "other-user", "other-secret"),
                               namespace=NAMESPACE)
        index.put_start(f"{page('x')}_0_k", 1)
    assert "other-secret" not in str(refused.value)
    assert snapshot(admin) == before


def test_a_script_call_outside_the_users_keys_is_a_permission_error(
        acl_server: RedisServer, admin: redis.Redis) -> None:
    index = Index.from_url(user_url(acl_server, "ns-user", "ns-secret"), namespace=NAMESPACE)
    build(index)
    before = snapshot(admin)
    index.ctx.schema = KeySchema("other")  # forge keys outside the user's pattern
    with pytest.raises(PermissionDenied, match="NOPERM"):
        index.put_end(f"{page('y')}_0_k")
    assert snapshot(admin) == before


def test_read_only_commands_pass_with_a_read_only_user(
        acl_server: RedisServer, admin: redis.Redis, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    build(Index.from_url(user_url(acl_server, "ns-user", "ns-secret"), namespace=NAMESPACE))
    monkeypatch.setenv("MOONCAKE_REDIS_CAPACITY_BYTES", "1GiB")  # nothing may store it
    before = snapshot(admin)
    common = ["--url", user_url(acl_server, "reader", "reader-secret"), "--namespace",
              NAMESPACE]
    for command in (["stats"], ["inspect", A], ["inspect", f"{B}_0_k"], ["tree", A],
                    ["fsck", "--quiet"], ["doctor"], ["config", "get"]):
        assert main([*common, *command]) == 0, (command, capsys.readouterr())
    assert "NOPERM" not in capsys.readouterr().err
    for command in (["fsck", "--quiet", "--repair"], ["config", "set", "lease_ttl_ms=1"],
                    ["evict", "--quiet", "--target", "0"]):
        assert main([*common, *command]) == 1, command  # writers are refused, cleanly
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "permission" in err.lower(), err
    assert snapshot(admin) == before


# -- values written by a namespace user are data, never code -----------------------------

EVIL_MODULE = "mooncake_evil_marker"
EVIL = f"{EVIL_MODULE}:attack"
"""An import path to a module on sys.path that leaves a marker file when imported or
called: v1 imported such a path from the shared config; v2 must never run it."""

Write = Callable[[redis.Redis, KeySchema], object]


def shard_of(schema: KeySchema, prefix_hash: str) -> Any:
    return schema.shard_keys(schema.shard(prefix_hash))


HOSTILE: dict[str, Write] = {
    "extractor as an import path": lambda c, s: c.hset(s.settings, "prefix_extractor", EVIL),
    "extractor os:system": lambda c, s: c.hset(s.settings, "prefix_extractor", "os:system"),
    "extractor as a module": lambda c, s: c.hset(s.settings, "prefix_extractor", EVIL_MODULE),
    "code in every setting": lambda c, s: c.hset(s.settings, mapping=dict.fromkeys(
        ("capacity_bytes", "high_watermark", "enable_radix_tree", "prefix_extractor",
         "lease_ttl_ms", "max_depth"), EVIL)),
    "settings this version does not know": lambda c, s: c.hset(s.settings, mapping={
        "prefix_extractor_path": EVIL, "on_load": f"__import__('{EVIL_MODULE}')"}),
    "node parent and epoch": lambda c, s: c.hset(s.node(B), mapping={
        "p": EVIL, "pe": f"__import__('{EVIL_MODULE}')"}),
    "object values": lambda c, s: c.hset(s.node(A), mapping={
        "o:_0_k": f"1c,10,0,0,{EVIL}", "o:_pickle": "cos\nsystem\n(S'touch x'\ntR.",
        "o:_lua": "1c,1,1,0,') redis.call('FLUSHALL') --"}),
    "node counters": lambda c, s: c.hset(s.node(A), mapping={
        "nc": "os.system", "b": "1e999", "lm": "-inf", "no": EVIL}),
    "child fields": lambda c, s: c.hset(s.node(A), mapping={
        f"c:{EVIL}": "1", page("evil-child"): f"__import__('{EVIL_MODULE}')"}),
    "pending entries": lambda c, s: c.zadd(shard_of(s, A).pending, {
        f"{A}|{EVIL}|1": 0, "a|b|c|d": 0, "||": 0, EVIL: 0}),
    "outbox entries": lambda c, s: c.zadd(shard_of(s, B).outbox, {f"{EVIL}|{A}|x": 0, EVIL: 0}),
    "fences": lambda c, s: c.zadd(shard_of(s, B).fences, {B: 1e300, EVIL: 1}),
    "shard stats": lambda c, s: c.hset(shard_of(s, A).stats, mapping={
        "used_bytes": f"__import__('{EVIL_MODULE}')", "limit": "-1", "writes": EVIL}),
    "leaf index": lambda c, s: c.zadd(shard_of(s, A).leaves, {EVIL: 0, A: float("-inf")}),
    "events": lambda c, s: c.xadd(shard_of(s, A).events, {"type": EVIL, "key": EVIL}),
    "eviction lock and request": lambda c, s: (c.set(s.eviction_lock, EVIL),
                                               c.set(s.eviction_requested, EVIL)),
}



@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module any of our code could import (it is on sys.path and PYTHONPATH); importing
    or calling it writes the returned marker file. os.system is watched too."""
    marker = tmp_path / "code-ran"
    (tmp_path / f"{EVIL_MODULE}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        f"def attack(*args, **kwargs):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('called')\n"
        f"    return str(args[0]) if args else ''\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(os, "system", lambda command: marker.write_text(f"system {command}"))
    return marker


class CliError(MooncakeRedisError):
    """The command line answered with its error exit code (one `error:` line)."""


def outcome(action: Callable[[], object]) -> str:
    """'ok', 'refused' (an error of ours), or 'crashed <error>'."""
    try:
        action()
    except MooncakeRedisError:
        return "refused"
    except Exception as error:  # noqa: BLE001 - any other error is what we look for
        return f"crashed {type(error).__name__}"
    return "ok"


def run_cli(*args: str) -> None:
    if main(list(args)) == 2:
        raise CliError(" ".join(args))


def everything(url: str, running: Index) -> dict[str, str]:
    """Every kind of process that reads the namespace: a client opening it, a running
    client, an eviction job, fsck, the CLI."""
    key = f"{A}_0_k"
    cli = ["--url", url, "--namespace", NAMESPACE]
    actions: dict[str, Callable[[], object]] = {
        "open": lambda: Index.from_url(url, namespace=NAMESPACE),
        "get": lambda: running.get(key),
        "get_node": lambda: (running.get_node(A), running.get_node(B)),
        "match_prefix": lambda: running.match_prefix([A, B]),
        "subtree": lambda: running.get_subtree_keys(A),
        "usage": running.usage,
        "put_start": lambda: running.put_start(f"{page('new')}_0_k", 1, parent_block_hash=B),
        "eviction job": lambda: eviction_job(NAMESPACE, 0),
        "fsck": lambda: check(running.ctx),
        "fsck --repair": lambda: check(running.ctx, repair=True),
        "cli stats": lambda: run_cli(*cli, "stats"),
        "cli inspect": lambda: run_cli(*cli, "inspect", A),
        "cli tree": lambda: run_cli(*cli, "tree", A),
        "cli fsck": lambda: run_cli(*cli, "fsck", "--quiet"),
        "cli doctor": lambda: run_cli(*cli, "doctor"),
    }
    return {name: outcome(action) for name, action in actions.items()}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_no_value_a_namespace_user_writes_makes_anything_run_code(
        case: str, acl_server: RedisServer, admin: redis.Redis, evil_module: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    monkeypatch.setenv(ENV_URL, url)  # for the eviction job
    running = Index.from_url(url, namespace=NAMESPACE, settings_refresh_seconds=0)
    build(running)
    admin.set("other:canary", "alive")
    HOSTILE[case](redis.Redis.from_url(url, decode_responses=True), KeySchema(NAMESPACE))
    outcomes = everything(url, running)
    capsys.readouterr()
    assert not evil_module.exists(), evil_module.read_text()
    assert EVIL_MODULE not in sys.modules
    assert admin.get("other:canary") == "alive"
    crashed = {name for name, result in outcomes.items() if result.startswith("crashed")}
    assert not crashed, outcomes  # a malformed value is a finding, never a Python error


def test_a_fresh_cli_or_worker_process_imports_nothing_named_in_redis(
        acl_server: RedisServer, admin: redis.Redis, evil_module: Path) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    build(Index.from_url(url, namespace=NAMESPACE))
    queue_url = f"redis://127.0.0.1:{acl_server.port}/1"  # the queue's own Redis user
    request_eviction(Index.from_url(url, namespace=NAMESPACE, queue_url=queue_url).ctx, 0)
    HOSTILE["extractor as an import path"](admin, KeySchema(NAMESPACE))
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_")},
                   ENV_URL: url, ENV_QUEUE_URL: queue_url}
    cli = subprocess.run([sys.executable, "-m", "mooncake_redis.cli.main", "--namespace", NAMESPACE,
                          "stats"], capture_output=True, text=True, timeout=120, env=environment)
    # the name is data: reported as unreadable, the default rule used, nothing imported
    assert cli.returncode == 0 and "UNREADABLE stored value" in cli.stdout, cli.stderr
    worker = subprocess.run([sys.executable, "-c",
                             "from mooncake_redis.workers.worker import run_worker; "
                             f"run_worker({queue_url!r}, burst=True)"],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert worker.returncode == 0 and "cannot be read" in worker.stderr, worker.stderr
    assert not evil_module.exists()


def test_a_running_client_keeps_working_when_the_stored_extractor_is_replaced(
        acl_server: RedisServer, admin: redis.Redis, evil_module: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    running = Index.from_url(url, namespace=NAMESPACE, settings_refresh_seconds=0)
    build(running)
    admin.hset(f"{NAMESPACE}:settings", "prefix_extractor", "os:system")
    with caplog.at_level(logging.ERROR, logger="mooncake_redis"):
        running.put_start(f"{page('after')}_0_k", 1, parent_block_hash=B)
    assert running.ctx.extractor.name == "rfc"
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigurationError, match="'os:system'"):
        Index.from_url(url, namespace=NAMESPACE, strict=True)
    assert not evil_module.exists()


# -- one client's arguments never change another's behaviour -----------------------------


def test_a_clients_settings_arguments_do_not_change_another_clients_behaviour(
        acl_server: RedisServer, admin: redis.Redis) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    first = Index.from_url(url, namespace=NAMESPACE, lease_ttl_ms=1000,
                           capacity_bytes=16 * 100, enable_radix_tree=True,
                           prefix_extractor="rfc", probe_extends_lease=False)
    stored = admin.hgetall(f"{NAMESPACE}:settings")
    assert len(stored) == 6  # the five given and the shard count (16)
    second = Index.from_url(url, namespace=NAMESPACE, lease_ttl_ms=3_600_000,
                            capacity_bytes="1TiB", enable_radix_tree=False,
                            prefix_extractor="tagged", probe_extends_lease=True)
    assert admin.hgetall(f"{NAMESPACE}:settings") == stored
    for client in (first, second):
        assert client.settings == first.settings
    build(second)
    node = first.get_node(B)
    assert node is not None and node.parent == A  # the tree stays on for both
    before_ms = first.ctx.redis_time_ms()
    info = second.get(f"{A}_0_k")
    after_ms = first.ctx.redis_time_ms()
    assert info is not None and before_ms + 1000 <= info.lease_ms <= after_ms + 1000  # stored
    before = first.object_info(f"{B}_0_k")
    assert second.is_exist(f"{B}_0_k") and first.object_info(f"{B}_0_k") == before
    tagged = f"llama3:{page('t')}_0_k"
    assert second.ctx.split(tagged) == (tagged, "")  # the stored rule (rfc), not tagged
    with pytest.raises(MooncakeRedisError, match="NO_SPACE|limit"):
        second.put_start(f"{page('big')}_0_k", 16 * 100 + 1)  # over the stored capacity


@pytest.mark.parametrize("argument", [{"prefix_extractor": "tagged"},
                                      {"enable_radix_tree": False}])
def test_opening_cannot_change_the_rule_of_a_namespace_with_nodes(
        acl_server: RedisServer, admin: redis.Redis, argument: dict[str, Any]) -> None:
    url = user_url(acl_server, "ns-user", "ns-secret")
    first = Index.from_url(url, namespace=NAMESPACE)  # the defaults, not stored
    build(first)
    name = next(iter(argument))
    with pytest.raises(ConfigurationError, match=f"refusing to change {name} on namespace"):
        Index.from_url(url, namespace=NAMESPACE, **argument)
    assert first.ctx.reload_settings() == Settings()
    assert name not in admin.hgetall(f"{NAMESPACE}:settings")  # nothing written


# -- passwords stay in the process --------------------------------------------------------

PASSWORD = "p#?/@% ü密 x:y"
"""Every character a URL parser could take for a delimiter, a space, and non-ASCII."""
LEAKS = (PASSWORD, quote(PASSWORD, safe=""), quote(PASSWORD), "ü密", "% ü", "x:y")


@pytest.fixture
def password_user(acl_server: RedisServer, admin: redis.Redis) -> str:
    admin.execute_command("ACL", "SETUSER", "pw-user", "reset", "on", f">{PASSWORD}", "~*",
                          "&*", "+@all")
    return "pw-user"


def everything_redis_holds(admin: redis.Redis) -> str:
    """Every key and value of databases 0 and 1, RQ's job payloads decompressed."""
    readers: dict[str, Callable[[redis.Redis, bytes], Any]] = {
        "string": lambda client, key: client.get(key),
        "hash": lambda client, key: client.hgetall(key),
        "zset": lambda client, key: client.zrange(key, 0, -1, withscores=True),
        "list": lambda client, key: client.lrange(key, 0, -1),
        "set": lambda client, key: client.smembers(key),
        "stream": lambda client, key: client.xrange(key),
    }
    texts = []
    for database in (0, 1):
        client = redis.Redis(port=admin.connection_pool.connection_kwargs["port"], db=database)
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            value = readers[kind.decode() if isinstance(kind, bytes) else kind](client, key)
            texts.append(repr(key) + repr(value))
            if isinstance(value, dict) and b"data" in value:
                texts.append(repr(zlib.decompress(value[b"data"])))
    return "\n".join(texts)


def test_no_password_appears_in_any_output_log_key_or_job(
        acl_server: RedisServer, admin: redis.Redis, password_user: str,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    url = user_url(acl_server, password_user, PASSWORD)
    queue_url = user_url(acl_server, password_user, PASSWORD, database=1)
    wrong = user_url(acl_server, password_user, PASSWORD + "-wrong")
    unencoded = f"redis://{password_user}:{PASSWORD}@127.0.0.1:{acl_server.port}/0"
    down = f"redis://{password_user}:{quote(PASSWORD, safe='')}@127.0.0.1:1/0"
    cluster = f"redis+cluster://{password_user}:{quote(PASSWORD, safe='')}@127.0.0.1:1,h:2"
    texts: list[str] = []
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(ENV_URL, url)  # the worker's environment
    monkeypatch.setenv(ENV_QUEUE_URL, queue_url)

    index = Index.from_url(url, namespace="pw", queue_url=queue_url)
    texts.append(repr(index))
    build(index)
    assert request_eviction(index.ctx, target_ratio=0)
    run_worker(queue_url, burst=True)
    assert index.usage().objects == 0
    build(index)
    common = ["--url", url, "--namespace", "pw"]
    for command in (["stats"], ["inspect", A], ["inspect", f"{A}_0_k"], ["tree", A],
                    ["fsck", "--quiet"], ["doctor"], ["config", "get"], ["evict", "--quiet"]):
        assert main([*common, *command]) in (0, 1), command
    assert main(["--namespace", "pw", "stats"]) == 0  # the URL from the environment
    for bad_url in (wrong, unencoded, down, cluster):
        assert main(["--url", bad_url, "stats"]) == 1, bad_url
        with pytest.raises((MooncakeRedisError, redis.exceptions.RedisError)) as refused:
            Index.from_url(bad_url)
        texts.append(f"{refused.value!r} {refused.value}")
    index.set_config(capacity_bytes=10)  # above the watermark: the monitor enqueues...
    monkeypatch.setenv(ENV_QUEUE_URL, wrong)  # ...on a queue that refuses its password
    assert main([*common, "monitor", "--interval", "0", "--iterations", "1"]) == 0
    assert any("Redis unavailable" in record.getMessage() for record in caplog.records)

    captured = capfd.readouterr()
    assert "pw-user:***@" in captured.err
    texts += [captured.out, captured.err, *(record.getMessage() for record in caplog.records)]
    texts.append(everything_redis_holds(admin))
    everything_said = "\n".join(texts)
    for leak in LEAKS:
        assert leak not in everything_said, leak


# -- TLS and an unreachable Redis ---------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server_cert.private_key_pem.write_to_path(str(directory / "server.key"))
    server_cert.cert_chain_pems[0].write_to_path(str(directory / "server.pem"))
    return {"ca": str(directory / "ca.pem"), "cert": str(directory / "server.pem"),
            "key": str(directory / "server.key")}


def test_tls_with_a_certificate_the_test_makes(tls_files: dict[str, str]) -> None:
    server = RedisServer(tls=tls_files)
    try:
        exercise(Index.from_url(f"{server.url}?ssl_ca_certs={tls_files['ca']}", namespace="tls"))
        with pytest.raises((redis.exceptions.ConnectionError, MooncakeRedisError)):
            Index.from_url(server.url, namespace="tls")  # no CA given: the certificate is refused
    finally:
        server.stop()


def test_redis_down_is_a_clean_connection_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(redis.exceptions.ConnectionError):
        Index.from_url("redis://127.0.0.1:1/0")
    assert main(["--url", "redis://u:pw-hunter2@127.0.0.1:1/0", "stats"]) == 1
    assert "pw-hunter2" not in capsys.readouterr().err
