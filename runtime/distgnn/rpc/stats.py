"""Client-side counters of a :class:`~distgnn.rpc.client.ServerPool`.

Plain integers, updated under the pool's lock once per answered request (no per-ID
work); a trainer's Prometheus collector reads them at scrape time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distgnn.rpc.protocol import Frame, MsgType


@dataclass
class ClientStats:
    """What one process asked of the graph servers."""

    requests: int = 0
    pull_requests: int = 0
    rows_pulled: int = 0
    bytes_pulled: int = 0

    def record(self, mtype: MsgType, bufs: Sequence[Any], answer: Frame) -> None:
        """Count one answered request (``bufs``: the request's buffers)."""
        self.requests += 1
        if mtype != MsgType.PULL or not bufs:
            return
        rows = len(bufs[0])
        self.pull_requests += 1
        self.rows_pulled += rows
        if answer.bufs:
            a = answer.bufs[0]  # the rows, or an empty (0, ...) array when received in place
            self.bytes_pulled += rows * a.itemsize * math.prod(a.shape[1:])
