"""ACLs, TLS and passwords: a namespace-scoped Redis user can run everything, others are
refused cleanly, rediss:// works with a certificate the test makes, and no error message
ever shows a password."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import trustme
from helpers import page
from redis_server import RedisServer

from mooncake_redis import Index, MooncakeRedisError, PermissionDenied
from mooncake_redis.cli import main
from mooncake_redis.fsck import check

# What a namespace's user needs: its own keys, and the non-admin commands (scripts, TIME).
NAMESPACE_USER = ["on", ">ns-secret", "~acl:*", "resetchannels", "+@all", "-@admin",
                  "-@dangerous"]
OTHER_USER = ["on", ">other-secret", "~other:*", "resetchannels", "+@all", "-@admin",
              "-@dangerous"]


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    server = RedisServer()
    admin = redis.Redis(port=server.port)
    admin.acl_setuser("ns-user", reset=True)
    admin.execute_command("ACL", "SETUSER", "ns-user", *NAMESPACE_USER)
    admin.execute_command("ACL", "SETUSER", "other-user", *OTHER_USER)
    yield server
    server.stop()


def user_url(server: RedisServer, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"


def exercise(index: Index) -> None:
    a, b = page("acl-a"), page("acl-b")
    index.put_start(f"{a}_0_k", 10)
    index.put_end(f"{a}_0_k")
    index.put_start(f"{b}_0_k", 10, parent_block_hash=a)
    index.put_end(f"{b}_0_k")
    index.register_radix_tree_node(b, a, [f"{b}_0_k"])
    assert index.match_prefix([a, b]) == 2
    assert index.get(f"{a}_0_k") is not None
    assert index.evict(target_ratio=0).leaves == 1
    assert check(index, repair=True).clean
    assert index.remove_all(force=True) == 1


def test_a_user_limited_to_the_namespace_pattern_can_run_everything(
        acl_server: RedisServer) -> None:
    exercise(Index.from_url(user_url(acl_server, "ns-user", "ns-secret"), namespace="acl"))


def test_a_user_without_the_namespace_is_refused_cleanly(acl_server: RedisServer) -> None:
    admin = redis.Redis(port=acl_server.port)
    before = admin.dbsize()
    with pytest.raises((PermissionDenied, redis.exceptions.NoPermissionError)) as refused:
        index = Index.from_url(user_url(acl_server, "other-user", "other-secret"), namespace="acl")
        index.put_start(f"{page('x')}_0_k", 1)
    assert "other-secret" not in str(refused.value)
    assert admin.dbsize() == before


def test_a_script_refused_by_acl_is_a_permission_error(acl_server: RedisServer) -> None:
    # ns-user may read the config of "acl" but a batch touching "other" keys is refused
    index = Index.from_url(user_url(acl_server, "ns-user", "ns-secret"), namespace="acl")
    index.schema.namespace = "other"  # forge keys outside the user's pattern
    with pytest.raises(PermissionDenied, match="NOPERM"):
        index.put_end(f"{page('y')}_0_k")


def test_a_wrong_password_never_shows_in_errors(acl_server: RedisServer, capsys) -> None:
    url = user_url(acl_server, "ns-user", "wrong-hunter2")
    with pytest.raises(redis.exceptions.AuthenticationError) as refused:
        Index.from_url(url, namespace="acl")
    assert "wrong-hunter2" not in str(refused.value)
    assert main(["--url", url, "--namespace", "acl", "stats"]) == 2
    captured = capsys.readouterr()
    assert "wrong-hunter2" not in captured.out + captured.err
    assert "ns-user:***@" in captured.err


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


def test_redis_down_is_a_clean_connection_error(capsys) -> None:
    with pytest.raises(redis.exceptions.ConnectionError):
        Index.from_url("redis://127.0.0.1:1/0")
    assert main(["--url", "redis://u:pw-hunter2@127.0.0.1:1/0", "stats"]) == 2
    assert "pw-hunter2" not in capsys.readouterr().err

