"""Starts throwaway redis-server processes on loopback ports reserved for the tests
(tests/ports.py)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from clock import HANG_GUARD_S
from ports import free_port


class RedisServer:
    """One redis-server in its own temporary directory; stop() kills it and removes the dir."""

    def __init__(self, *extra_args: str, port: int | None = None, directory: Path | None = None,
                 config_file: Path | None = None, tls: dict[str, str] | None = None):
        """Without a config file the server persists nothing (as the tests' default).
        With tls (ca, cert, key file paths) it listens with TLS only."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; scripts/test.sh installs it")
        self.port = port or free_port()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="mooncake-redis-test-"))
        self._owns_directory = directory is None
        persistence = [] if config_file else ["--save", "", "--appendonly", "no"]
        listen = ["--port", str(self.port)]
        self._client_options: dict[str, object] = {}
        if tls:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-ca-cert-file", tls["ca"],
                      "--tls-cert-file", tls["cert"], "--tls-key-file", tls["key"],
                      "--tls-auth-clients", "no"]
            self._client_options = {"ssl": True, "ssl_ca_certs": tls["ca"]}
        self.process = subprocess.Popen(
            [binary, *([str(config_file)] if config_file else []), *listen,
             "--bind", "127.0.0.1", "--dir", str(self.directory), "--protected-mode", "no",
             *persistence, *extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"{'rediss' if tls else 'redis'}://127.0.0.1:{self.port}/0"
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2,
                             **self._client_options)  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited at start")
            try:
                client.ping()
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start in 10 s")

    def start_replica(self) -> RedisServer:
        """A new server replicating this one, returned once its link is up and it holds
        everything this one had written."""
        replica = RedisServer("--replicaof", "127.0.0.1", str(self.port))
        try:
            if not redis.Redis(port=self.port, socket_timeout=HANG_GUARD_S).wait(
                    1, int(HANG_GUARD_S * 1000)):
                raise RuntimeError(f"no replica of port {self.port} caught up in "
                                   f"{HANG_GUARD_S:g} s")
        except BaseException:
            replica.stop()
            raise
        return replica

    def kill(self) -> None:
        """kill -9: no shutdown save, as a crash."""
        self.process.kill()
        self.process.wait(timeout=60)

    def pause(self) -> None:
        """kill -STOP: the process is there (its connections stay open) but does nothing,
        as a replica that has fallen far behind."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()  # a paused server would not act on SIGTERM
            self.process.terminate()
            self.process.wait(timeout=10)
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

