"""The test servers' ports (tests/ports.py): never handed to two test processes at once,
held while a server restarts, free again once their process has ended."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from clock import CHILD_GUARD_S, read_line
from ports import LOCK_DIRECTORY, PORTS, free_port, is_free

HOLDER = """
import sys
from ports import free_port
print(" ".join(str(free_port()) for _ in range(50)), flush=True)
sys.stdin.readline()
"""


def locked_by_someone(port: int) -> bool:
    with (LOCK_DIRECTORY / str(port)).open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def test_two_processes_never_get_the_same_port() -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": str(Path(__file__).parent)})
    try:
        assert holder.stdout is not None and holder.stdin is not None
        theirs = {int(port) for port in read_line(holder.stdout, "the holder's ports").split()}
        mine = {free_port() for _ in range(50)}
        assert len(theirs) == len(mine) == 50 and not theirs & mine
        assert all(port in PORTS and is_free(port) for port in mine | theirs)
        assert all(locked_by_someone(port) for port in theirs)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
        holder.wait(timeout=CHILD_GUARD_S)
    assert not any(locked_by_someone(port) for port in theirs)  # released with the process


def test_a_port_stays_reserved_for_its_process() -> None:
    port = free_port()
    assert port not in {free_port() for _ in range(20)}  # a restart on it finds it free
