"""A co-located trainer's shared-memory row gather against the machine's copy bandwidth.

    python bench/bench_gather.py [--rows 500000] [--dim 100] [--rounds 7]

A partition's float32 feature table (``--rows`` x ``--dim``, a file in ``/dev/shm``
mapped read-only, as ``distgnn.distributed.localread`` maps the server's store) and a
training step's local input IDs as the benchmark graph's steps have them (measured: 600
random seeds, then each hop's new nodes in ascending ID order, 5k, 33k and 181k of the
partition's 500k rows; 220k rows, 88 MB): the thread time of

* a plain copy of the same number of bytes from the table (``np.copyto``: one memcpy),
* ``np.take`` (the NumPy path, and the round-9 gather),
* the native gather with plain stores and streaming (``distgnn._native.gather_rows``),
* each gather followed by a sum of its output (the model reads the rows next: streamed
  rows are not in the caches).

Rounds alternate the methods over 6 ID sets; each figure is the median over rounds of
the round's median, with the range over rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from summary import median_range

HOPS = (5_000, 33_000, 181_000)
SEEDS = 600


def step_ids(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Random seeds, then ascending sweeps of each hop's new nodes (scaled to ``rows``)."""
    scale = rows / 500_000
    sweeps = [np.sort(rng.choice(rows, int(h * scale), replace=False)) for h in HOPS]
    return np.concatenate([rng.choice(rows, int(SEEDS * scale), replace=False), *sweeps])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    from distgnn import native

    k = native.kernels()
    if k is None:
        sys.exit("the native kernels are not built (make native) or DISTGNN_NATIVE=0")
    rng = np.random.default_rng(0)
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(suffix=".npy", dir=folder) as f:
        np.save(f, rng.random((a.rows, a.dim), dtype=np.float32))
        f.flush()
        table = np.load(f.name, mmap_mode="r")
        ids = [step_ids(rng, a.rows) for _ in range(6)]
        out = np.ones((max(map(len, ids)), a.dim), np.float32)
        table[: len(out)].sum()  # every page mapped before timing

        def copy(i: np.ndarray) -> None:
            np.copyto(out[: len(i)], table[: len(i)])

        def take(i: np.ndarray) -> None:
            np.take(table, i, 0, out[: len(i)], "clip")

        def plain(i: np.ndarray) -> None:
            k.gather_rows(table, i, out[: len(i)], False)

        def stream(i: np.ndarray) -> None:
            k.gather_rows(table, i, out[: len(i)], True)

        def then_sum(g: Callable[[np.ndarray], None]) -> Callable[[np.ndarray], None]:
            def f(i: np.ndarray) -> None:
                g(i)
                out[: len(i)].sum()

            return f

        methods = {
            "plain copy of the same bytes (memcpy)": copy,
            "np.take": take,
            "native, plain stores": plain,
            "native, streaming (gather_rows)": stream,
            "np.take, then a sum of the rows": then_sum(take),
            "streaming, then a sum of the rows": then_sum(stream),
        }
        got: dict[str, list[float]] = {m: [] for m in methods}
        for _ in range(a.rounds):
            for m, fn in methods.items():
                ts = []
                for i in ids:
                    t0 = time.thread_time()
                    fn(i)
                    ts.append(time.thread_time() - t0)
                got[m].append(statistics.median(ts) * 1e3)
    mb = statistics.median(len(i) for i in ids) * a.dim * 4 / 1e6
    print(
        f"bench_gather: {a.rows} x {a.dim} float32 in shared memory, a step's {mb:.0f} MB "
        f"of rows, {a.rounds} rounds; ms of thread time (median [range])"
    )
    for m, v in got.items():
        gbs = mb / 1e3 / (statistics.median(v) / 1e3)
        print(f"{m:<40} {median_range(v, '.2f'):>22}  {gbs:5.1f} GB/s")


if __name__ == "__main__":
    main()
