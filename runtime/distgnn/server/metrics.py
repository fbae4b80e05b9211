"""Prometheus metrics of a graph server, aggregated in the parent over its workers.

A server runs N worker processes. Rather than prometheus_client's multiprocess mode
(a directory of per-process files that every metric object writes through, an
environment variable that must be set before the library is imported, and cleanup of
dead processes' files), each worker counts into one small fixed-layout array of
float64 in a file of the server's shared-memory folder (:class:`WorkerStats`): one
lock and a handful of in-place additions per request, no per-ID work, no allocation.
The parent's :class:`ServerCollector` sums every worker's array when Prometheus
scrapes ``/metrics`` (on its own port, ``DISTGNN_METRICS_PORT``) and adds what only
the parent knows (partition loaded, shared memory used, workers). A restarted worker
reopens its slot and keeps counting, so counters never go backwards.
"""

from __future__ import annotations

import bisect
import glob
import mmap
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from distgnn.rpc.protocol import Frame, MsgType

TYPES: tuple[MsgType, ...] = tuple(MsgType)
_TYPE_INDEX = {m: i for i, m in enumerate(TYPES)}
OUTCOMES = ("ok", "client_error", "server_error")
OK, CLIENT_ERROR, SERVER_ERROR = 0, 1, 2
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the request latency histogram; +Inf is implied."""
_NB = len(BUCKETS) + 1
_NT = len(TYPES)

# the layout of one worker's array (float64 slots)
_REQ = 0  # [type][outcome] request counts
_HIST = _REQ + _NT * len(OUTCOMES)  # [type][bucket] non-cumulative latency counts
_HSUM = _HIST + _NT * _NB  # [type] latency sums
_BYTES_IN = _HSUM + _NT
_BYTES_OUT = _BYTES_IN + 1
_ROWS_SERVED = _BYTES_OUT + 1
_ROWS_WRITTEN = _ROWS_SERVED + 1
_OPEN = _ROWS_WRITTEN + 1
_CONNS = _OPEN + 1
_PROTO_ERR = _CONNS + 1
SLOTS = _PROTO_ERR + 1
STATS_SUFFIX = ".stats"
_ROWS = frozenset((MsgType.PULL, MsgType.PUSH, MsgType.SPARSE_UPDATE))


def stats_path(shm_root: str, slot: int) -> str:
    """The stats file of worker ``slot`` in a server's shared-memory folder."""
    return os.path.join(shm_root, f"worker-{slot}{STATS_SUFFIX}")


class WorkerStats:
    """One worker's counters in shared memory (see the module docstring)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOTS * 8:
                os.ftruncate(fd, SLOTS * 8)
            self._mm = mmap.mmap(fd, SLOTS * 8)
        finally:
            os.close(fd)
        self._v = memoryview(self._mm).cast("d")
        self._lock = threading.Lock()
        self._v[_OPEN] = 0.0  # a restarted worker's connections died with its predecessor

    def observe(self, frame: Frame, reply: Sequence[Any], outcome: int, t0: float) -> None:
        """Count one answered request: ``reply`` its buffers, ``t0`` from perf_counter."""
        dt = time.perf_counter() - t0
        mtype = frame.type
        t = _TYPE_INDEX[mtype]
        nin = 0
        for a in frame.bufs:
            nin += a.nbytes
        nout = 0
        for r in reply:
            nout += r.nbytes
        rows = len(frame.bufs[0]) if outcome == OK and mtype in _ROWS and frame.bufs else 0
        bucket = bisect.bisect_left(BUCKETS, dt)
        with self._lock:
            v = self._v
            v[_REQ + t * 3 + outcome] += 1.0
            v[_HIST + t * _NB + bucket] += 1.0
            v[_HSUM + t] += dt
            v[_BYTES_IN] += nin
            v[_BYTES_OUT] += nout
            if mtype is MsgType.PULL:
                v[_ROWS_SERVED] += rows
            elif rows:
                v[_ROWS_WRITTEN] += rows

    def refused(self, mtype: MsgType) -> None:
        """A request answered with an error before it reached a handler (auth)."""
        with self._lock:
            self._v[_REQ + _TYPE_INDEX[mtype] * 3 + CLIENT_ERROR] += 1.0

    def connection(self, delta: int) -> None:
        with self._lock:
            self._v[_OPEN] += delta
            if delta > 0:
                self._v[_CONNS] += 1.0

    def protocol_error(self) -> None:
        with self._lock:
            self._v[_PROTO_ERR] += 1.0

    def close(self) -> None:
        self._v.release()
        self._mm.close()


def read_totals(shm_root: str) -> np.ndarray:
    """The sum of every worker's array in a server's folder."""
    total = np.zeros(SLOTS, dtype=np.float64)
    for path in glob.glob(os.path.join(shm_root, f"*{STATS_SUFFIX}")):
        try:
            a = np.fromfile(path, dtype=np.float64, count=SLOTS)
        except OSError:
            continue
        if a.size == SLOTS:
            total += a
    return total


@dataclass
class ServerState:
    """What the parent knows and a scrape reports besides the workers' counters."""

    part_id: int
    shm_root: str | None = None
    loaded: bool = False
    load_seconds: float = 0.0
    workers: list[int] = field(default_factory=list)


def _shm_bytes(root: str | None) -> int:
    if not root:
        return 0
    total = 0
    try:
        with os.scandir(root) as it:
            for e in it:
                try:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    except OSError:
        return 0
    return total


class ServerCollector(Collector):
    """Turns the summed worker arrays and the parent's state into metric families."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        st = self.state
        v = read_totals(st.shm_root) if st.shm_root else np.zeros(SLOTS)
        req = CounterMetricFamily(
            "distgnn_server_requests",
            "Requests answered, by message type and outcome.",
            labels=["type", "outcome"],
        )
        lat = HistogramMetricFamily(
            "distgnn_server_request_duration_seconds",
            "Time from a request's arrival to its answer sent, by message type.",
            labels=["type"],
        )
        for i, m in enumerate(TYPES):
            for o, oname in enumerate(OUTCOMES):
                req.add_metric([m.name.lower(), oname], float(v[_REQ + i * 3 + o]))
            counts = np.cumsum(v[_HIST + i * _NB : _HIST + (i + 1) * _NB])
            buckets = [(repr(ub), float(c)) for ub, c in zip(BUCKETS, counts, strict=False)]
            buckets.append(("+Inf", float(counts[-1])))
            lat.add_metric([m.name.lower()], buckets, float(v[_HSUM + i]))
        yield req
        yield lat
        yield CounterMetricFamily(
            "distgnn_server_received_bytes",
            "Tensor payload bytes received in requests.",
            value=float(v[_BYTES_IN]),
        )
        yield CounterMetricFamily(
            "distgnn_server_sent_bytes",
            "Tensor payload bytes sent in answers.",
            value=float(v[_BYTES_OUT]),
        )
        yield CounterMetricFamily(
            "distgnn_server_rows_served",
            "Rows answered to PULL requests.",
            value=float(v[_ROWS_SERVED]),
        )
        yield CounterMetricFamily(
            "distgnn_server_rows_written",
            "Rows written by PUSH and SPARSE_UPDATE requests.",
            value=float(v[_ROWS_WRITTEN]),
        )
        yield GaugeMetricFamily(
            "distgnn_server_open_connections",
            "Client connections open now.",
            value=float(v[_OPEN]),
        )
        yield CounterMetricFamily(
            "distgnn_server_connections", "Client connections accepted.", value=float(v[_CONNS])
        )
        yield CounterMetricFamily(
            "distgnn_server_protocol_errors",
            "Malformed frames (the connection is closed).",
            value=float(v[_PROTO_ERR]),
        )
        yield GaugeMetricFamily(
            "distgnn_server_shared_memory_bytes",
            "Shared memory (tmpfs) used by this server's tensors.",
            value=float(_shm_bytes(st.shm_root)),
        )
        loaded = GaugeMetricFamily(
            "distgnn_server_partition_loaded",
            "1 once the partition is loaded and served, else 0.",
            labels=["partition"],
        )
        loaded.add_metric([str(st.part_id)], 1.0 if st.loaded else 0.0)
        yield loaded
        yield GaugeMetricFamily(
            "distgnn_server_partition_load_seconds",
            "Time the partition took to load.",
            value=st.load_seconds,
        )
        yield GaugeMetricFamily(
            "distgnn_server_workers", "Worker processes running.", value=float(len(st.workers))
        )


def server_registry(state: ServerState) -> CollectorRegistry:
    """A registry holding only this server's collector (no process-wide default registry)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ServerCollector(state))
    return reg
