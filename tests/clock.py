"""Waiting in tests: on Redis's own clock or on the state itself, never on a wall-clock
window. A deadline here is a hang guard (it fails a test that would otherwise wait
forever), never a timing assertion: on any machine, however loaded, a correct run ends
long before it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import IO

from mooncake_redis import Index

HANG_GUARD_S = 30.0
"""How long a wait may take before the test fails as hung."""

CHILD_GUARD_S = 120.0
"""The same for a child process's answer: its start (Python and the package's imports)
included, on a loaded machine."""

POLL_S = 0.001


def redis_now_ms(index: Index) -> int:
    """Redis TIME in milliseconds, as the scripts compute it."""
    return index.ctx.redis_time_ms()


def wait_for_redis_time(index: Index, ms: int, deadline_s: float = HANG_GUARD_S) -> None:
    """Return once Redis TIME has reached `ms`. Past that point it stays past (the clock
    only moves on), so whatever a test checks next sees at least that time."""
    deadline = time.monotonic() + deadline_s
    while (now := redis_now_ms(index)) < ms:
        if time.monotonic() > deadline:
            raise AssertionError(f"Redis TIME is {now} ms, still before {ms} ms "
                                 f"after {deadline_s:g} s")
        time.sleep(min(POLL_S, (ms - now) / 1000))


def next_redis_millisecond(index: Index) -> int:
    """Wait until Redis TIME has moved past the current millisecond; returns the new one.
    Whatever a script stamps after this has a later time than what it stamped before."""
    now = redis_now_ms(index)
    wait_for_redis_time(index, now + 1)
    return redis_now_ms(index)


def wait_until(condition: Callable[[], object], what: str,
               deadline_s: float = HANG_GUARD_S) -> None:
    """Poll `condition` until it is true; fail naming `what` if the hang guard runs out."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {deadline_s:g} s waiting for {what}")
        time.sleep(0.01)


def read_line(stream: IO[str], what: str, deadline_s: float = CHILD_GUARD_S) -> str:
    """The next line of a child process's pipe. readline has no timeout of its own, so it
    runs on a daemon thread (which ends with the pipe, once the test kills the child); the
    test fails naming `what` if no line came before the hang guard."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(deadline_s)
    if not lines:
        raise AssertionError(f"gave up after {deadline_s:g} s waiting for {what}")
    return lines[0]


def joined(thread: threading.Thread, what: str, deadline_s: float = HANG_GUARD_S) -> None:
    """Join a thread, failing naming `what` if it has not ended by the hang guard."""
    thread.join(deadline_s)
    if thread.is_alive():
        raise AssertionError(f"gave up after {deadline_s:g} s waiting for {what}")
