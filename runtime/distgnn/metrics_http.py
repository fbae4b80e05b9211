"""A Prometheus ``/metrics`` endpoint over one registry, in a daemon thread.

Every process (graph server parent, trainer, operator) builds its own
``CollectorRegistry`` (never prometheus_client's process-wide default) and serves it
with :func:`serve` on the port named in :mod:`distgnn.contract`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` HTTP server."""

    httpd: Any
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def serve(registry: CollectorRegistry, port: int, bind: str = "0.0.0.0") -> MetricsEndpoint:
    """Serve ``registry`` on ``bind:port`` (0: any free port); OSError if it cannot bind."""
    httpd, thread = start_http_server(port, addr=bind, registry=registry)
    return MetricsEndpoint(httpd, thread)
