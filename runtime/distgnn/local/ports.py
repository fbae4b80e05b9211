"""Free TCP ports on the loopback interface for local servers and the rendezvous."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel considers free right now (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def is_listening(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class PortAllocator:
    """Hands out distinct free ports; never gives the same port twice in one run."""

    host: str = LOOPBACK
    given: set[int] = field(default_factory=set)

    def take(self, attempts: int = 50) -> int:
        for _ in range(attempts):
            port = free_port(self.host)
            if port not in self.given:
                self.given.add(port)
                return port
        raise OSError(f"no free TCP port on {self.host} after {attempts} attempts")
