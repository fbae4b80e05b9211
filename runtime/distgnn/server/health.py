"""The HTTP health endpoint of a graph server: ``/healthz`` (alive) and ``/readyz`` (loaded)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HealthServer:
    """Serves ``/healthz`` (200 while the process runs) and ``/readyz`` (200 once ready)."""

    def __init__(self, bind: str, port: int) -> None:
        self.ready = threading.Event()
        self.details: dict[str, Any] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/healthz":
                    code, body = 200, {"status": "alive"}
                elif self.path == "/readyz":
                    ok = outer.ready.is_set()
                    code = 200 if ok else 503
                    body = {"status": "ready" if ok else "loading", **outer.details}
                else:
                    code, body = 404, {"error": "not found"}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.2,), daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
