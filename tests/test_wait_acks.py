"""wait_acks on a real master + replica: a call returns only once wait_acks replicas
acknowledged its writes; fewer raise ReplicationIncomplete, a WAIT reply that never came
raises OutcomeUnknown (the writes are applied on the master, their replication unknown).
Never success for writes no replica acknowledged."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from clock import joined, wait_until
from helpers import page
from redis_server import RedisServer

from mooncake_redis import Index, OutcomeUnknown, ReplicationIncomplete


@pytest.fixture(scope="module")
def master() -> Iterator[RedisServer]:
    server = RedisServer("--repl-diskless-sync-delay", "0")  # a replica syncs at once
    yield server
    server.stop()


@pytest.fixture
def replica(master: RedisServer) -> Iterator[RedisServer]:
    server = master.start_replica()
    yield server
    server.stop()


def waiting_index(master: RedisServer, namespace: str, socket_timeout: float = 5.0,
                  **config: Any) -> Index:
    client = redis.Redis(port=master.port, socket_timeout=socket_timeout,
                         decode_responses=True)
    return Index(client, namespace=namespace, wait_acks=1, **config)


def on_replica(replica: RedisServer, index: Index, key: str) -> bool:
    """Whether the replica holds the object (read straight from it)."""
    copy = Index(redis.Redis(port=replica.port, socket_timeout=5, decode_responses=True),
                 namespace=index.namespace, read_only=True)
    return copy.object_info(key) is not None


def applied_on_the_master(index: Index, key: str) -> bool:
    info = index.object_info(key)
    return info is not None and info.state == "complete"


def test_a_healthy_replica_acknowledges_and_the_put_succeeds(master: RedisServer,
                                                             replica: RedisServer) -> None:
    """WAIT may block longer than the socket timeout and still be read (its read timeout
    grows by wait_timeout_ms)."""
    index = waiting_index(master, "healthy", socket_timeout=0.5, wait_timeout_ms=2000)
    key = f"{page('healthy')}_0_k"
    index.put(key, 10)
    assert on_replica(replica, index, key)  # acknowledged means on the replica


def test_a_paused_replica_and_a_wait_longer_than_the_socket_timeout_is_never_success(
        master: RedisServer, replica: RedisServer) -> None:
    """The WAIT blocks 1.5 s, the socket times out reads after 1 s: the reply used to be
    taken as lost and the put as done. Now the read waits for the WAIT (its reply, 0
    acknowledgements, is ReplicationIncomplete); should the machine stall past the extra
    second, the lost reply is OutcomeUnknown: never success."""
    index = waiting_index(master, "paused", socket_timeout=1.0, wait_timeout_ms=1500)
    key = f"{page('paused')}_0_k"
    replica.pause()
    try:
        with pytest.raises((ReplicationIncomplete, OutcomeUnknown)):
            index.put(key, 10)
    finally:
        replica.resume()
    assert applied_on_the_master(index, key)


def test_a_stopped_replica_raises_replication_incomplete_naming_the_acks_and_calls(
        master: RedisServer, replica: RedisServer) -> None:
    index = waiting_index(master, "stopped", wait_timeout_ms=50)
    keys = [f"{page(('stopped', i))}_0_k" for i in range(2)]
    replica.kill()
    with pytest.raises(ReplicationIncomplete, match=r"0 of wait_acks=1 .* put"):
        index.batch_put([(key, 10) for key in keys])
    assert all(applied_on_the_master(index, key) for key in keys)  # not confirmed


def test_a_connection_killed_during_wait_raises_outcome_unknown(master: RedisServer,
                                                                replica: RedisServer) -> None:
    """The replica is paused so that WAIT blocks; once the master lists the client blocked
    in it, another connection kills it: the put's own reply had come, the WAIT's never."""
    index = waiting_index(master, "killed", wait_timeout_ms=60_000)
    key = f"{page('killed')}_0_k"
    admin = redis.Redis(port=master.port, socket_timeout=5, decode_responses=True)
    outcome: list[Any] = []

    def put() -> None:
        try:
            index.put(key, 10)
            outcome.append("success")
        except Exception as error:  # noqa: BLE001 - the test looks at what came
            outcome.append(error)

    def blocked_in_wait() -> list[int]:
        return [int(c["id"]) for c in admin.client_list() if c.get("cmd") == "wait"]

    # scripts loaded and the namespace made while the replica answers: else the put's first
    # call gets NOSCRIPT, runs nothing, and is rightly sent again after the kill, with a
    # new WAIT (run alone, the test waited that one out)
    index.put(f"{page('warm')}_0_k", 10)
    replica.pause()
    try:
        thread = threading.Thread(target=put, daemon=True)
        thread.start()
        wait_until(blocked_in_wait, "the put's connection blocked in WAIT")
        admin.client_kill_filter(_id=blocked_in_wait()[0])
        joined(thread, "the put")
        assert len(outcome) == 1 and isinstance(outcome[0], OutcomeUnknown), outcome
        assert "WAIT" in str(outcome[0])
    finally:
        replica.resume()
    assert applied_on_the_master(index, key)


def test_a_resend_on_a_new_connection_is_not_told_success_while_the_replica_lags(
        master: RedisServer, replica: RedisServer) -> None:
    """WAIT counts acknowledgements of its connection's last write; a re-send of a put
    already applied writes nothing. On a new connection (one that never wrote) Redis still
    waits for the replica: the re-send is ReplicationIncomplete, not success."""
    key = f"{page('resend')}_0_k"
    index = waiting_index(master, "resend", wait_timeout_ms=100)
    replica.pause()
    try:
        with pytest.raises(ReplicationIncomplete):
            index.put(key, 10)
        index.client.connection_pool.disconnect()  # the re-send goes on a new connection
        with pytest.raises(ReplicationIncomplete):
            index.put(key, 10)
    finally:
        replica.resume()
