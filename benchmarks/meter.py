"""Meters for one piece of work against one Redis: wall time, this process's CPU, the
server's CPU, round trips, commands sent and the commands Redis ran. Imports nothing of
mooncake_redis, so benchmarks/versions.py can meter any checkout the same way."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def command_stats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Server-side (calls, usec) per command, from INFO commandstats. Commands that scripts
    run (redis.call) are counted too, under their own names."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(s["calls"]), int(s["usec"]))
            for name, s in stats.items()}


def command_delta(before: dict[str, tuple[int, int]],
                  after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Calls and usec per command between two command_stats (the INFO calls left out)."""
    delta = {}
    for name, (calls, usec) in after.items():
        old_calls, old_usec = before.get(name, (0, 0))
        if name != "info" and calls > old_calls:
            delta[name] = (calls - old_calls, usec - old_usec)
    return delta


def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU time the redis-server process has used (user + system, all its threads), from
    INFO cpu: unlike commandstats' usec it counts a script's inner commands once, and the
    protocol work (reading, parsing, replying) too."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class ClientTraffic:
    """Counts what this process sends to any Redis: round trips (every command and every
    pipeline, the executor's included, goes out through one send_packed_command call of a
    redis-py connection) and commands (each gets one reply, read by one read_response,
    however it was packed). The methods are patched only while counting."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.commands = 0

    @contextmanager
    def counting(self) -> Iterator[ClientTraffic]:
        cls = redis.connection.AbstractConnection
        originals = {name: getattr(cls, name)
                     for name in ("send_packed_command", "read_response")}
        # replies the executor reads with hiredis itself (mooncake_redis.executor.LeanReader,
        # where the checkout has it) pass no read_response: counted where it reads them
        lean = getattr(sys.modules.get("mooncake_redis.executor"), "LeanReader", None)
        lean_read = getattr(lean, "_read_plain", None)

        def send_packed_command(connection: Any, *args: Any, **kwargs: Any) -> Any:
            self.round_trips += 1
            return originals["send_packed_command"](connection, *args, **kwargs)

        def read_response(connection: Any, *args: Any, **kwargs: Any) -> Any:
            self.commands += 1
            return originals["read_response"](connection, *args, **kwargs)

        def read_plain(reader: Any, count: int, *args: Any, **kwargs: Any) -> Any:
            self.commands += count
            return lean_read(reader, count, *args, **kwargs)

        patches = {"send_packed_command": send_packed_command, "read_response": read_response}
        for name, patch in patches.items():
            setattr(cls, name, patch)
        if lean_read is not None:
            lean._read_plain = read_plain  # type: ignore[union-attr]
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(cls, name, original)
            if lean_read is not None:
                lean._read_plain = lean_read  # type: ignore[union-attr]


@dataclass
class Measured:
    """What one piece of work cost, on both sides of the connection."""

    seconds: float
    client_cpu_seconds: float
    """CPU of this process (Python, redis-py, hiredis), from time.process_time."""
    redis_cpu_seconds: float
    round_trips: int
    client_commands: int
    """Commands this process sent (EVALSHA and plain commands)."""
    commands: dict[str, tuple[int, int]]
    """INFO commandstats delta: every command Redis ran, inside scripts or not."""
    result: Any = None

    @property
    def evalsha(self) -> int:
        return self.commands.get("evalsha", (0, 0))[0]

    @property
    def script_commands(self) -> int:
        """redis.call()s inside scripts: every command Redis ran minus those sent to it."""
        return max(0, sum(calls for calls, _ in self.commands.values()) - self.client_commands)

    def per(self, count: int) -> dict[str, float]:
        """The usual per-unit figures (unit = node, key, object ...)."""
        cpu = self.redis_cpu_seconds + self.client_cpu_seconds
        return {"seconds": self.seconds, "per_second": count / self.seconds,
                "cpu_bound_per_second": count / cpu if cpu else 0.0,
                "redis_cpu_us": self.redis_cpu_seconds * 1e6 / count,
                "client_cpu_us": self.client_cpu_seconds * 1e6 / count,
                "evalsha": self.evalsha / count, "script_commands": self.script_commands / count,
                "client_commands": self.client_commands / count,
                "round_trips": self.round_trips / count,
                "redis_busy": self.redis_cpu_seconds / self.seconds}


def measure(client: redis.Redis, work: Callable[[], Any]) -> Measured:
    """Run `work`, metering wall time, both sides' CPU, round trips and commands. The
    meter's own INFO calls fall outside the counted window."""
    before, cpu_before = command_stats(client), redis_cpu_seconds(client)
    with ClientTraffic().counting() as traffic:
        client_cpu = time.process_time()
        seconds, result = timed(work)
        client_cpu = time.process_time() - client_cpu
    redis_cpu = redis_cpu_seconds(client) - cpu_before
    return Measured(seconds, client_cpu, redis_cpu, traffic.round_trips, traffic.commands,
                    command_delta(before, command_stats(client)), result)


def total(parts: list[Measured]) -> Measured:
    """Several pieces of work metered as one (the steps of one write path)."""
    commands: dict[str, tuple[int, int]] = {}
    for part in parts:
        for name, (calls, usec) in part.commands.items():
            old_calls, old_usec = commands.get(name, (0, 0))
            commands[name] = (old_calls + calls, old_usec + usec)
    return Measured(sum(p.seconds for p in parts), sum(p.client_cpu_seconds for p in parts),
                    sum(p.redis_cpu_seconds for p in parts), sum(p.round_trips for p in parts),
                    sum(p.client_commands for p in parts), commands)
