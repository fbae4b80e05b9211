"""Row gathers (``out = table[rows]``) split over the process's cores.

A pull answer is gathered before it is sent, and the requesting client waits idle
meanwhile, so the gather is on the critical path: splitting it over threads (NumPy
releases the GIL in ``take``) shortens the pull by the gather's share. ``mode="clip"``
is used because the rows are checked before they get here, and NumPy's clip loop is
1.5-3x faster than its bounds-checking one (measured: 10k random 512-byte rows out of
77 MB, 0.72 vs 1.06 ms).
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from distgnn.cpus import available_cpus

GATHER_TIMEOUT = 60.0
"""Seconds to wait for one slice (a gather never waits on the network)."""
MIN_SLICE_BYTES = 256 << 10
"""Below this many bytes per thread, handing a slice to a thread costs more than it saves."""
MAX_THREADS = 8
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

    def gather(self, table: np.ndarray, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[:] = table[rows]``; every row must be in ``[0, len(table))`` (not re-checked)."""
        n = len(rows)
        k = min(self.threads, max(1, out.nbytes // MIN_SLICE_BYTES))
        if k <= 1:
            return np.take(table, rows, 0, out, "clip")
        cuts = [n * i // k for i in range(k + 1)]
        pool = self._executor()
        futs = [
            pool.submit(np.take, table, rows[a:b], 0, out[a:b], "clip")
            for a, b in itertools.pairwise(cuts[1:])
        ]
        try:
            np.take(table, rows[: cuts[1]], 0, out[: cuts[1]], "clip")
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
