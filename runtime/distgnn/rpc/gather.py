"""Row gathers (``out = table[rows]``) split over the process's cores.

A pull answer is gathered before it is sent, and the requesting client waits idle
meanwhile, so the gather is on the critical path: splitting it over threads (NumPy
releases the GIL in ``take``) shortens the pull by the gather's share. With the native
kernels (:mod:`distgnn.native`) a slice is copied by ``gather_rows`` with plain stores and
the rows prefetched ahead: 8 MiB of random 512-byte rows out of a 77 MB table in
``/dev/shm``, 0.37-0.38 vs 0.65-0.67 ms for ``np.take`` on one thread (2 KiB rows: the
same, 0.77 ms; bench/HISTORY.md, graph server round 14). Without them, ``np.take`` with
``mode="clip"``: the rows are checked before they get here, and NumPy's clip loop is
1.5-3x faster than its bounds-checking one (0.72 vs 1.06 ms for 10k 512-byte rows).

A co-located trainer's shared-memory read asks for a *streaming* gather
(``stream=True``): with the native kernels (:mod:`distgnn.native`), rows prefetched ahead
and the output written with non-temporal stores, for outputs of at least
``STREAM_MIN_BYTES`` (smaller ones stay in the caches for the model to read). Measured on
a step's 220k rows of 400 bytes from shared memory: 13.2-13.5 vs 17.2-17.3 ms for
``np.take`` alone, 15.8-16.1 vs 18.0-18.4 ms in a training step (bench/HISTORY.md, round
10). The rows are the same either way.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from distgnn import native
from distgnn.cpus import available_cpus

GATHER_TIMEOUT = 60.0
"""Seconds to wait for one slice (a gather never waits on the network)."""
MIN_SLICE_BYTES = 256 << 10
"""Below this many bytes per thread, handing a slice to a thread costs more than it saves."""
MAX_THREADS = 8
STREAM_MIN_BYTES = 4 << 20
"""A streaming gather's output below this size (a core's L2) is written by plain stores."""
ENV_GATHER_THREADS = "DISTGNN_GATHER_THREADS"


def gather_threads() -> int:
    """``DISTGNN_GATHER_THREADS`` if set, else the available CPUs (at most ``MAX_THREADS``)."""
    env = os.environ.get(ENV_GATHER_THREADS, "")
    if env.strip():
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"DISTGNN_GATHER_THREADS={env!r} is not an integer") from None
    return min(MAX_THREADS, available_cpus())


def shared_host_threads(host_cpus: int, trainer_cpus: int) -> int:
    """Gather threads for a server whose host also runs trainers whose torch threads use
    ``trainer_cpus`` of its ``host_cpus``: the CPUs they leave free, at least 1 (at most
    ``MAX_THREADS``). A second thread on a CPU a trainer computes on only steals from it:
    measured on 2 CPUs with 2 one-thread trainers (bench_training, 6 alternating runs
    each), 1 thread 0.405 s per step and a 0.082 s pull vs 2 threads 0.422 s and 0.098 s."""
    return max(1, min(MAX_THREADS, host_cpus - trainer_cpus))


def _take(table: np.ndarray, rows: np.ndarray, out: np.ndarray, stream: bool = False) -> None:
    """``out[:] = table[rows]``: the native kernel where it applies (rows prefetched ahead;
    with ``stream``, non-temporal stores), else ``np.take``."""
    kernel = _kernel(table, rows, out)
    if kernel is None:
        np.take(table, rows, 0, out, "clip")
    else:
        kernel(table, np.ascontiguousarray(rows), out, stream)


def _kernel(table: np.ndarray, rows: np.ndarray, out: np.ndarray) -> Any:
    """The native ``gather_rows`` where it applies (C-contiguous table and output of one
    dtype, int64 or int32 rows), else None (also with an extension built before the
    kernel existed: a checkout's stale in-place build)."""
    k = native.kernels()
    kernel = getattr(k, "gather_rows", None)
    if (
        kernel is None
        or table.dtype != out.dtype
        or table.dtype.hasobject
        or not table.flags.c_contiguous
        or not out.flags.c_contiguous
        or out.shape != (len(rows), *table.shape[1:])
        or rows.dtype not in _ROW_DTYPES
    ):
        return None
    return kernel


_ROW_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


class RowGatherer:
    """Gathers rows with the calling thread plus ``threads - 1`` pool threads."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.threads - 1, thread_name_prefix="distgnn-gather"
                )
            return self._pool

    def gather(
        self, table: np.ndarray, rows: np.ndarray, out: np.ndarray, stream: bool = False
    ) -> np.ndarray:
        """``out[:] = table[rows]``; every row must be in ``[0, len(table))`` (not re-checked
        by ``np.take``; the kernel raises ValueError). ``stream``: a large output the
        caller does not read back at once (see the module docstring)."""
        n = len(rows)
        stream = stream and out.nbytes >= STREAM_MIN_BYTES
        k = min(self.threads, max(1, out.nbytes // MIN_SLICE_BYTES))
        if k <= 1:
            _take(table, rows, out, stream)
            return out
        cuts = [n * i // k for i in range(k + 1)]
        pool = self._executor()
        futs = [
            pool.submit(_take, table, rows[a:b], out[a:b], stream)
            for a, b in itertools.pairwise(cuts[1:])
        ]
        try:
            _take(table, rows[: cuts[1]], out[: cuts[1]], stream)
        finally:  # never return while a slice may still write into ``out``
            for f in futs:
                f.result(GATHER_TIMEOUT)
        return out

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


_DEFAULT: RowGatherer | None = None
_DEFAULT_LOCK = threading.Lock()


def set_default_threads(threads: int) -> None:
    """Size the process's gatherer (a trainer: the CPUs its torch threads use), unless
    ``DISTGNN_GATHER_THREADS`` says otherwise or it gathered already."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None and not os.environ.get(ENV_GATHER_THREADS, "").strip():
            _DEFAULT = RowGatherer(min(MAX_THREADS, max(1, threads)))


def default_gatherer() -> RowGatherer:
    """The process's gatherer (created on first use, sized by :func:`gather_threads`)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = RowGatherer(gather_threads())
        return _DEFAULT
