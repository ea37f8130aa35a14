"""Loopback ports for the servers the tests start, each reserved for the life of the test
process that took it, against every other test process on the machine (pytest-xdist
workers, another checkout's run): a port is taken with an exclusive lock on a file named
after it, which the kernel drops when the process ends however it ends. A server killed
and restarted on its port (a crash test) finds it still reserved, never taken meanwhile.

The ports lie below the kernel's ephemeral range, so no outgoing connection is ever given
one, and their cluster bus ports (+10000) do too: `bind(("127.0.0.1", 0))`, used before,
hands out ephemeral ports that a second process could be handed as well once the first
closed its probe socket."""

from __future__ import annotations

import fcntl
import random
import socket
import tempfile
from pathlib import Path
from typing import IO

PORTS = range(20_000, 22_768)
"""Test server ports; with CLUSTER_BUS_OFFSET, 30000-32767: below Linux's default ephemeral
range (32768-60999) and macOS's (49152-65535)."""

CLUSTER_BUS_OFFSET = 10_000
"""A cluster node also listens on its port + 10000 for the cluster bus; whoever holds a
port holds its bus port too."""

LOCK_DIRECTORY = Path(tempfile.gettempdir()) / "mooncake-redis-test-ports"

_held: dict[int, IO[str]] = {}
"""Ports this process holds, with their open lock files (closing one would release it)."""


def free_port() -> int:
    """A loopback port (and its bus port) free now and reserved for this process."""
    LOCK_DIRECTORY.mkdir(exist_ok=True)
    start = random.randrange(len(PORTS))
    for offset in range(len(PORTS)):
        port = PORTS[(start + offset) % len(PORTS)]
        if port in _held:
            continue
        lock = (LOCK_DIRECTORY / str(port)).open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()  # another test process holds it
            continue
        if is_free(port) and is_free(port + CLUSTER_BUS_OFFSET):
            _held[port] = lock
            return port
        lock.close()  # something outside the tests listens there
    raise RuntimeError(f"no free test port in {PORTS.start}-{PORTS.stop - 1}")


def is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
