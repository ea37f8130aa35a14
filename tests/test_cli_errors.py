"""What a first user's mistakes get from `mooncake-redis`: one `error:` line and exit 1 (a
failure) or 2 (a usage error), never a traceback, and never a silent wrong turn (a typo
that mounts a new segment, a database that is not a number read as database 0). Each case
runs the real command in its own process against the tests' redis-server, as a person
would (issue 33 lists them)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from helpers import A, page
from ports import free_port
from redis_server import RedisServer

from mooncake_redis import Index

AUTH_PASSWORD = "auth-secret"
USER_PASSWORD = "user-secret"


@dataclasses.dataclass(frozen=True)
class World:
    """What the cases run against: the session's Redis holding namespaces `mc` (a node,
    events, segment seg1) and `other`; a Redis that wants a password; an ACL user of `mc`
    only; a port something listens on; a regular file."""

    url: str
    server: str  # the URL without its database
    auth: str  # the password-protected Redis, without the password
    wrong_auth: str  # the same with a wrong password
    user_url: str
    busy: int
    file: Path
    index: Index


@dataclasses.dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    """With {url}, {server}, {auth}, {user_url}, {busy}, {file} filled in from the World."""
    code: int
    error: str | None
    """Text of the one error line, stderr's last; None: nothing on stderr at all."""
    env: tuple[tuple[str, str], ...] = ()
    once: str | None = None
    """Text stderr holds exactly once (instead of an error line)."""
    reader_gone: bool = False
    """Run with stdout a pipe nobody reads any more, as `| head -1` leaves it."""
    stdout: str | None = None
    """Text stdout holds."""
    check: Callable[[World], None] | None = None
    """What Redis holds afterwards."""


def segments_untouched(world: World) -> None:
    segments = world.index.usage().segments
    assert list(segments) == ["seg1"] and segments["seg1"].capacity_bytes == 1 << 30


CLUSTER_QUEUE = (("MOONCAKE_REDIS_QUEUE_URL", "redis+cluster://127.0.0.1:{busy}"),)
CASES = {
    "metrics --port out of range": Case(
        ("metrics", "--port", "99999"), 2, "argument --port: 99999 is not a port (1 to 65535)"),
    "metrics on a port in use": Case(
        ("metrics", "--port", "{busy}"), 1,
        "error: cannot serve metrics on 127.0.0.1:{busy}: Address already in use"),
    "metrics --address not an address": Case(
        ("metrics", "--address", "999.1.1.1"), 2,
        "argument --address: '999.1.1.1' is not an IP address or a host name"),
    "worker --metrics-port out of range": Case(
        ("worker", "--burst", "--metrics-port", "99999"), 2,
        "argument --metrics-port: 99999 is not a port"),
    "worker metrics on a port in use": Case(
        ("worker", "--burst", "--metrics-port", "{busy}"), 1,
        "error: cannot serve metrics on 127.0.0.1:{busy}: Address already in use"),
    "worker --metrics-address not an address": Case(
        ("worker", "--burst", "--metrics-port", "1", "--metrics-address", "999.1.1.1"), 2,
        "argument --metrics-address: '999.1.1.1' is not an IP address"),
    "monitor --metrics-port out of range": Case(
        ("monitor", "--iterations", "1", "--metrics-port", "65536"), 2,
        "argument --metrics-port: 65536 is not a port (1 to 65535)"),
    "monitor metrics on a port in use": Case(
        ("monitor", "--iterations", "1", "--metrics-port", "{busy}"), 1,
        "error: cannot serve metrics on 127.0.0.1:{busy}: Address already in use"),
    "stats | head -1": Case(("stats",), 1, None, reader_gone=True),
    "events | head -1": Case(("events",), 1, None, reader_gone=True),
    "worker with a cluster queue": Case(
        ("worker", "--burst"), 1, "error: the eviction queue needs a plain Redis",
        env=CLUSTER_QUEUE),
    "monitor with a cluster queue": Case(
        ("monitor", "--iterations", "1"), 1, "error: the eviction queue needs a plain Redis",
        env=CLUSTER_QUEUE),
    "sim --out where no directory can be made": Case(  # refused before it simulates
        ("sim", "--out", "{file}/out"), 2, "argument --out: '{file}/out': '{file}' is not a "
                                           "directory"),
    "segments remount of a typo": Case(
        ("segments", "remount", "seg2", "2GiB"), 1,
        "error: no segment 'seg2' in namespace 'mc' (`segments list` shows them; `segments "
        "mount` registers a new one)", check=segments_untouched),
    "--url with a database that is no number": Case(
        ("--url", "{server}/abc", "stats"), 2,
        "argument --url: Redis URL '{server}/abc': database 'abc' is not a number"),
    "a password missing": Case(
        ("--url", "{auth}", "stats"), 1,
        "error: Redis at {auth} needs a password: put it in the URL, "
        "redis://:PASSWORD@host:port/db"),
    "a wrong password": Case(
        ("--url", "{wrong_auth}", "stats"), 1,
        " refused the user and password of the URL (a wrong password, an unknown user or a "
        "disabled one)"),
    "tree of a hash too short": Case(
        ("tree", "67b5"), 1, "a shortened hash needs its first 8 or more hex digits ('67b5' "
                             "has 4)"),
    "a bad setting in the environment": Case(
        ("stats",), 1, "error: environment variable MOONCAKE_REDIS_CAPACITY_BYTES: setting "
                       "capacity_bytes expects int, got 'lots'",
        env=(("MOONCAKE_REDIS_CAPACITY_BYTES", "lots"),)),
    "events of a mistyped namespace": Case(
        ("--namespace", "reel", "events"), 1, "error: namespace 'reel' does not exist"),
    "namespaces as an ACL user of one namespace": Case(
        ("--url", "{user_url}", "namespaces"), 0,
        "note: 1 namespace this user may not read (ACL): other", stdout="\nmc "),
    "doctor on a Redis that evicts keys": Case(
        ("doctor",), 1, None, once="maxmemory-policy is allkeys-lru"),
}


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    server = RedisServer()  # asked for a password once up: RedisServer waits on a PING
    redis.Redis(port=server.port).config_set("requirepass", AUTH_PASSWORD)
    yield server
    server.stop()


@pytest.fixture
def world(redis_url: str, auth_server: RedisServer, tmp_path: Path) -> Iterator[World]:
    index = Index.from_url(redis_url, namespace="mc")
    index.put_start(f"{A}_0_k", 100)
    index.put_end(f"{A}_0_k")
    index.mount_segment("seg1", 1 << 30)
    Index.from_url(redis_url, namespace="other").put_start(f"{page('other')}_0_k", 10)
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "mc-user", "reset", "on", f">{USER_PASSWORD}",
                          "~mc:*", "resetchannels", "+@all", "-@admin", "-@dangerous")
    (tmp_path / "file").write_text("not a directory")
    server = redis_url.rsplit("/", 1)[0]
    with socket.socket() as listener:
        port = free_port()
        listener.bind(("127.0.0.1", port))
        listener.listen()
        yield World(redis_url, server, auth_server.url,
                    auth_server.url.replace("://", "://:wrong-one@"),
                    server.replace("://", f"://mc-user:{USER_PASSWORD}@") + "/0", port,
                    tmp_path / "file", index)


def run(world: World, case: Case) -> subprocess.CompletedProcess[str]:
    fill = {field.name: getattr(world, field.name) for field in dataclasses.fields(World)}
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_REDIS_")}
    environment |= {"MOONCAKE_REDIS_URL": world.url,
                    **{name: value.format(**fill) for name, value in case.env}}
    argv = [sys.executable, "-m", "mooncake_redis", *(a.format(**fill) for a in case.argv)]
    if not case.reader_gone:
        return subprocess.run(argv, capture_output=True, text=True, env=environment,
                              timeout=120)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True,
                              env=environment, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("name", CASES)
def test_a_mistake_gets_one_error_line_and_its_exit_code(world: World, name: str) -> None:
    case = CASES[name]
    fill = {field.name: getattr(world, field.name) for field in dataclasses.fields(World)}
    admin = redis.Redis.from_url(world.url)
    if case.once:
        admin.config_set("maxmemory-policy", "allkeys-lru")
    try:
        result = run(world, case)
    finally:
        admin.config_set("maxmemory-policy", "noeviction")
    err = result.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert result.returncode == case.code, err
    if case.error is None and case.once is None:
        assert err == ""
    if case.error is not None:
        lines = err.splitlines()
        assert lines and case.error.format(**fill) in lines[-1], err
        assert len([line for line in lines if "error:" in line]) == (case.code != 0), err
    if case.once is not None:
        assert err.count(case.once) == 1 and "Redis runs with maxmemory-policy" not in err, err
    if case.stdout is not None:
        assert case.stdout in result.stdout, result.stdout
    for secret in (AUTH_PASSWORD, USER_PASSWORD, "wrong-one"):
        assert secret not in err + (result.stdout or "")
    if case.check is not None:
        case.check(world)
