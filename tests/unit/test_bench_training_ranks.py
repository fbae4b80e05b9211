"""bench/bench_training.py: every rank's reads and batch making, as the trainers gather them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_training as bt
from distgnn.distributed.localread import LocalStats
from distgnn.distributed.localsample import SampleStats
from distgnn.rpc.stats import ClientStats


class FakeGraph:
    """What :func:`bench_training.io_counters` reads of a ``TrainGraph``: its counters."""

    def __init__(self, client: ClientStats | None, local: LocalStats | None) -> None:
        self.client, self.local = client, local

    def client_stats(self) -> ClientStats | None:
        return self.client

    def local_stats(self) -> LocalStats | None:
        return self.local

    def local_sample_stats(self) -> SampleStats | None:
        return SampleStats(requests=6, seeds=90) if self.local else None


def result(io: list[list[float]], make: list[list[float]], steps: int = 2) -> dict:
    return {
        "timed_steps": steps,
        "io_by_rank": [dict(zip(bt.IO_FIELDS, v, strict=True)) for v in io],
        "make_by_rank": [bt.make_parts(v) for v in make],
    }


def test_io_counters_follow_the_graphs_counters_in_field_order() -> None:
    c = ClientStats(requests=5, pull_requests=2, rows_pulled=300, bytes_pulled=120_000)
    got = bt.io_counters(FakeGraph(c, LocalStats(reads=2, rows=900, bytes=360_000)))
    assert dict(zip(bt.IO_FIELDS, got, strict=True)) == {
        "requests": 5, "pull_requests": 2, "rows_pulled": 300, "bytes_pulled": 120_000,
        "local_rows": 900, "local_bytes": 360_000, "local_sample_requests": 6,
        "local_seeds": 90,
    }  # fmt: skip
    assert bt.io_counters(FakeGraph(None, None)) == [0.0] * len(bt.IO_FIELDS)


def test_each_rank_gets_its_own_line_per_step() -> None:
    # rank 1 pulls twice rank 0's bytes over 2 steps; both read 4 MB from shared memory
    io = [[6, 2, 2000, 2e6, 9000, 4e6, 6, 90], [10, 4, 4000, 4e6, 9000, 4e6, 6, 90]]
    # sampling then pull: wall, CPU, wait for a core, kernel, faults (summed over 2 steps)
    make = [[0.02, 0.016, 0.002, 0.0, 2, 0.04, 0.03, 0.004, 0.002, 100]] * 2
    lines = bt.io_lines([result(io, make)])
    assert len(lines) == 2
    assert "rank 0 per step: pulled over TCP 1.0 MB (1.0k rows, 1.0 pull requests)" in lines[0]
    assert "rank 1 per step: pulled over TCP 2.0 MB (2.0k rows, 2.0 pull requests)" in lines[1]
    assert "read from shared memory 2.0 MB" in lines[1]
    made = bt.make_lines([result(io, make)])
    assert len(made) == 2
    # per step: wall 10 ms = CPU 8 + waiting for a core 1 + blocked 1 (what is left)
    assert (
        "sampling 10.0 = CPU 8.0 (kernel 0.0, 1 faults) + waiting for a core 1.0 + blocked 1.0"
        in made[0]
    )
    assert (
        "pull 20.0 = CPU 15.0 (kernel 1.0, 50 faults) + waiting for a core 2.0 + blocked 3.0"
        in made[1]
    )


def test_results_without_the_figures_print_nothing() -> None:
    assert bt.io_lines([{"timed_steps": 3}]) == []
    assert bt.make_lines([{"timed_steps": 3}]) == []
