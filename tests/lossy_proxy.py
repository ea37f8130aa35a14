"""A TCP proxy in front of a redis-server that loses one reply after its commands ran.

Armed with `lose_reply(n)`, it forwards everything until the reply to the client's n-th
round trip (counted from arming, 0-based) starts to arrive; then it reads and discards
the rest of that reply, up to the reply of the round trip's last command (counted with
hiredis's RESP reader), and closes both sides of that connection. The commands ran; the
client sees its connection reset without an answer: what a network failure or a proxy
restart does to a real client. Other connections and later ones pass untouched.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import hiredis

DRAIN_DEADLINE_S = 30.0
"""A hang guard on reading a lost reply to its end (Redis sends it in milliseconds)."""


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
                lost = self._lost_request()
                if lost is not None:
                    self._drain(server, data, count_messages(lost))
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _lost_request(self) -> bytes | None:
        """The request whose reply starts arriving now, if that reply is the one to lose."""
        with self._lock:
            if not self._client_spoke_last:
                return None  # more of a reply already forwarded
            self._client_spoke_last = False
            if self._lose_at is None:
                return None
            if self._round_trips < self._lose_at:
                self._round_trips += 1
                return None
            self._lose_at = None
            self.lost.append(self._last_request)
            return self._last_request

    @staticmethod
    def _drain(server: socket.socket, first: bytes, replies: int) -> None:
        """Read the lost reply to its end, one reply per command of the request: then
        every command has run (a pipeline Redis runs in several reads too) when the
        connection is closed."""
        reader = hiredis.Reader()
        reader.feed(first)
        read = complete_messages(reader)
        server.settimeout(DRAIN_DEADLINE_S)
        try:
            while read < replies and (data := server.recv(65536)):
                reader.feed(data)
                read += complete_messages(reader)
        except OSError:
            pass


def count_messages(data: bytes) -> int:
    """How many RESP messages (commands of a request, or replies) `data` holds whole."""
    reader = hiredis.Reader()
    reader.feed(data)
    return complete_messages(reader)


def complete_messages(reader: hiredis.Reader) -> int:
    count = 0
    while reader.gets() is not False:
        count += 1
    return count


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
