"""The HTTP health endpoint of a graph server: ``/healthz`` (alive) and ``/readyz`` (loaded).

Bounded so that no client can make it hold resources the data path or a worker restart
need: at most ``max_connections`` requests are served at once (a connection beyond that
is closed at once), a request line and headers must arrive whole within ``timeout``
seconds and within 8 KiB, and the answer is a few hundred bytes written with the same
deadline. It is a plain socket loop, not ``http.server``: nothing is read beyond the
headers and no thread exists per waiting connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from typing import Any

from distgnn.log import kv

log = logging.getLogger("distgnn.server.health")

MAX_REQUEST = 8192


class HealthServer:
    """Serves ``/healthz`` (200 while the process runs) and ``/readyz`` (200 once ready)."""

    def __init__(
        self, bind: str, port: int, max_connections: int = 8, timeout: float = 2.0
    ) -> None:
        self.ready = threading.Event()
        self.details: dict[str, Any] = {}
        self.timeout = timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = threading.Event()
        self.sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((bind, port))
            self.sock.listen(max(4, max_connections))
        except OSError:
            self.sock.close()
            raise
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._accept_loop, daemon=True, name="health")

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.closing.set()
        self.thread.join(5)
        self.sock.close()

    def _accept_loop(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError as e:  # EMFILE and the like: back off, never spin
                log.warning("health accept failed", extra=kv(error=str(e)))
                time.sleep(0.2)
                continue
            if not self.slots.acquire(blocking=False):
                conn.close()  # over the cap: the prober retries
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # cannot start a thread
                self.slots.release()
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            path = self._read_path(conn, time.monotonic() + self.timeout)
            if path is not None:
                self._answer(conn, path)
        except OSError:
            pass
        finally:
            conn.close()
            self.slots.release()

    def _read_path(self, conn: socket.socket, deadline: float) -> str | None:
        """The request's path once its headers are in; None if late, too long or not GET."""
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or len(data) > MAX_REQUEST:
                return None
            conn.settimeout(left)
            try:
                chunk = conn.recv(MAX_REQUEST + 1 - len(data))
            except TimeoutError:
                return None
            if not chunk:
                return None
            data += chunk
        parts = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
        if len(parts) < 2 or parts[0] != b"GET":
            return ""
        return parts[1].decode("latin-1")

    def _answer(self, conn: socket.socket, path: str) -> None:
        if path == "/healthz":
            code, body = 200, {"status": "alive"}
        elif path == "/readyz":
            ok = self.ready.is_set()
            code = 200 if ok else 503
            body = {"status": "ready" if ok else "loading", **self.details}
        else:
            code, body = 404, {"error": "not found"}
        data = json.dumps(body).encode()
        reason = {200: "OK", 503: "Service Unavailable", 404: "Not Found"}[code]
        head = (
            f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        ).encode()
        conn.settimeout(self.timeout)
        with contextlib.suppress(OSError):
            conn.sendall(head + data)
