"""A TCP proxy in front of a redis-server that loses one reply after its commands ran.

Armed with `lose_reply(n)`, it forwards everything until the reply to the client's n-th
round trip (counted from arming, 0-based) starts to arrive; then it reads and discards
the rest of that reply until the server stays quiet, and closes both sides of that
connection. The commands ran; the client sees its connection reset without an answer:
what a network failure or a proxy restart does to a real client. Other connections and
later ones pass untouched.
"""

from __future__ import annotations

import contextlib
import socket
import threading

QUIET_SECONDS = 0.1
"""How long the server must send nothing before a dropped reply counts as complete (so a
pipeline that Redis runs in several reads has run to its end before the close)."""


class LossyProxy:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._lose_at: int | None = None
        self._round_trips = 0
        self._client_spoke_last = False
        self.lost: list[bytes] = []
        """The requests whose replies were lost, as the client sent them."""
        self._last_request = b""
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply(self, round_trip: int) -> None:
        """Lose the reply of the round trip `round_trip` from now (0: the next one)."""
        with self._lock:
            self._lose_at, self._round_trips = round_trip, 0

    def disarm(self) -> bool:
        """Stop losing replies; whether the armed loss has happened."""
        with self._lock:
            happened = self._lose_at is None
            self._lose_at = None
            return happened

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._replies, args=(client, server), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    self._last_request = data if not self._client_spoke_last else \
                        self._last_request + data
                    self._client_spoke_last = True
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _replies(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := server.recv(65536):
                if self._reply_is_lost():
                    self._drain(server)
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _reply_is_lost(self) -> bool:
        with self._lock:
            if not self._client_spoke_last:
                return False  # more of a reply already forwarded
            self._client_spoke_last = False
            if self._lose_at is None:
                return False
            if self._round_trips < self._lose_at:
                self._round_trips += 1
                return False
            self._lose_at = None
            self.lost.append(self._last_request)
            return True

    @staticmethod
    def _drain(server: socket.socket) -> None:
        server.settimeout(QUIET_SECONDS)
        try:
            while server.recv(65536):
                pass
        except OSError:
            pass


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
