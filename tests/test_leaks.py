"""Killed Mooncake drop-in stores leave nothing behind (issue 34 item 3b), with no monitor:
the live stores' keepers unmount the dead stores' segments once their heartbeats are
older than segment_heartbeat_timeout_ms (Redis TIME), and delete what the dead left (their
segments' files, the files they wrote into live segments and never put, the .tmp of a cut
write) once older than the grace. The stores are child processes
(scripts/measure_leaks.py child); victims are SIGKILLed with the writers still writing.
Time is controlled, not waited out: a short heartbeat timeout (a setting), and the
writers' keepers' clock moved an hour on once they stopped writing; every wait is on the
state, with a hang guard."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clock import CHILD_GUARD_S, read_line, wait_until

from mooncake_redis import Index
from mooncake_redis.files.data_plane import Page, write_pages
from mooncake_redis.mooncake.keeper import GRACE_S, mount
from mooncake_redis.mooncake.segment_files import SegmentFiles

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "measure_leaks.py"
_spec = importlib.util.spec_from_file_location("measure_leaks", SCRIPT)
assert _spec and _spec.loader
leaks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(leaks)


@pytest.fixture(name="children")
def children_fixture() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(CHILD_GUARD_S)


def tell(child: subprocess.Popen[str], command: str, what: str) -> list[str]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(command + "\n")
    child.stdin.flush()
    return read_line(child.stdout, what).split()


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_killed_stores_leave_no_segment_no_file_and_no_tmp(
        backend: str, request: pytest.FixtureRequest, tmp_path: Path,
        children: list[subprocess.Popen[str]]) -> None:
    redis_url = str(request.getfixturevalue("redis_url" if backend == "redis"
                                            else "cluster_url"))
    index = Index.from_url(redis_url, leaks.NAMESPACE,
                           segment_heartbeat_timeout_ms=leaks.HEARTBEAT_TIMEOUT_MS)
    data_dir = tmp_path / "data"

    def spawn(mode: str, preferred: str = "") -> tuple[subprocess.Popen[str], str]:
        child = leaks.spawn(redis_url, data_dir, mode, preferred)
        children.append(child)
        assert child.stdout is not None
        word, host = read_line(child.stdout, f"a {mode} store's setup").split()
        assert word == "ready"
        return child, host

    writers, hosts = zip(*(spawn("writer") for _ in range(2)))
    modes = ["cut", "orphan", "victim", "victim"]
    victims = [spawn(mode, hosts[n % 2]) for n, mode in enumerate(modes)]
    dead = {host for _, host in victims}
    for (victim, _), mode in zip(victims, modes):
        assert victim.stdout is not None
        if mode == "victim":
            assert read_line(victim.stdout, "a victim's puts").split() == ["going"]
            victim.kill()  # the writers go on writing
        assert victim.wait(CHILD_GUARD_S) == -9
    wait_until(lambda: not dead & set(index.usage().segments),
               "the live keepers to unmount the dead stores' segments",
               leaks.HEARTBEAT_TIMEOUT_MS / 1000 + 60)
    for writer in writers:
        assert tell(writer, "stop", "a writer's last put") == ["stopped"]
    before: dict[str, Any] = leaks.leaks(index, data_dir, dead)
    assert before["tmp_files"] >= 1 and before["orphan_files"] >= 1  # what the dead left
    for writer in writers:
        assert tell(writer, "collect", "a writer's clock") == ["collecting", "True"]
    wait_until(lambda: not any(leaks.leaks(index, data_dir, dead).values()),
               "the live keepers to collect every orphan and .tmp", 60)
    after = leaks.leaks(index, data_dir, dead)
    files, temporary, directories = leaks.disk(data_dir)
    stored = leaks.stored_files(index)
    assert files == stored  # every registered replica has its file, and no other file
    assert temporary == 0 and directories == set(hosts) == set(index.usage().segments)
    assert {replica[0] for replica in stored} <= set(hosts)
    print(f"\nkilled drop-in stores: before {before}, after {after}", file=sys.stderr)
    for writer in writers:
        assert tell(writer, "close", "a writer's close") == ["closed", "0"]


def test_a_collection_from_a_stale_registry_keeps_a_new_puts_file(redis_url: str,
                                                                  tmp_path: Path) -> None:
    """The race the grace guards, step by step: a keeper reads the registry while segment
    S is unmounted; S's owner (only slow, not dead) mounts it again and puts an object on
    a new file; the keeper then collects S's directory from its stale read. The put's
    file is younger than the grace: it stays, and the object keeps its bytes; the file
    S's owner left from before its unmount goes (grace 0 would delete both)."""
    index = Index.from_url(redis_url, "race")
    files = SegmentFiles(tmp_path)
    store = files.own("s:1")
    old = store.write("before", b"x" * 10)
    an_hour_ago = time.time() - 3600
    os.utime(store.directory / old.location, (an_hour_ago, an_hour_ago))
    registered = index.usage().segments  # the keeper's read: S is not registered
    mount(index, "s:1", 1 << 20)  # its owner is back
    (result,) = write_pages(index, [Page("after", b"new bytes")], {"after": [store]})
    assert result.ok
    released = files.collect_dead(registered, GRACE_S, time.time())
    assert (released.deleted, released.spared) == (1, 1)
    (replica,) = index.get_replica_desc("after")
    assert store.read(replica) == b"new bytes"
    assert sorted(os.listdir(store.directory)) == [replica.location]
