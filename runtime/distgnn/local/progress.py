"""``distgnn run``'s progress lines: rank 0's ``/progress``, polled like the operator does.

The same snapshot the operator writes into ``status.progress`` is logged here whenever
it changes (at most every ``interval`` seconds), e.g.
``progress: epoch 7/25 loss=0.41 valAccuracy=0.78 epoch_seconds=1.2``.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

from distgnn import contract
from distgnn import log as dlog
from distgnn.api.progress import progress_status, progress_text
from distgnn.local.ports import LOOPBACK

log = logging.getLogger("distgnn.local")


def fetch_progress(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> Any:
    """The decoded snapshot, or None when rank 0 does not answer (yet)."""
    url = f"http://{host}:{port}{contract.PROGRESS_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read(64 << 10))
    except (urllib.error.URLError, OSError, ValueError):
        return None


class ProgressWatch:
    """Polls rank 0 and logs its progress when it changed."""

    def __init__(self, port: int | None, interval: float = 2.0) -> None:
        self.port = port
        self.interval = interval
        self.last: dict[str, Any] | None = None
        self._next = 0.0

    def poll(self, now: float | None = None) -> dict[str, Any] | None:
        """Fetch when due; returns the progress when it changed (and was logged)."""
        now = time.monotonic() if now is None else now
        if self.port is None or now < self._next:
            return None
        self._next = now + self.interval
        p = progress_status(fetch_progress(self.port))
        if p is None or p == self.last:
            return None
        self.last = p
        # JSON lines carry the fields; a text line already says it all in its message
        fields = p if dlog.current_format() == "json" else {}
        log.info("progress: %s", progress_text(p), extra={"fields": fields})
        return p
