"""Row gathers split over threads: same rows as fancy indexing, thread count settings."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.rpc import gather
from distgnn.rpc.gather import RowGatherer


@pytest.mark.parametrize(("threads", "n"), [(1, 5000), (3, 5000), (4, 7), (8, 100_001)])
def test_gather_equals_fancy_indexing(threads: int, n: int) -> None:
    rng = np.random.default_rng(n)
    table = rng.random((20_000, 48), dtype=np.float32)
    rows = rng.integers(0, len(table), n)
    g = RowGatherer(threads)
    try:
        out = np.full((n, 48), -1.0, dtype=np.float32)
        assert g.gather(table, rows, out) is out
        np.testing.assert_array_equal(out, table[rows])
        # large enough gathers are split (the pool exists); tiny ones stay on the caller
        assert (g._pool is not None) == (threads > 1 and n * 48 * 4 >= 2 * gather.MIN_SLICE_BYTES)
    finally:
        g.close()


def test_gather_one_dimensional_and_empty() -> None:
    table = np.arange(1000, dtype=np.int64) * 3
    g = RowGatherer(2)
    rows = np.array([999, 0, 5, 5], dtype=np.int64)
    np.testing.assert_array_equal(g.gather(table, rows, np.empty(4, np.int64)), table[rows])
    assert g.gather(table, rows[:0], np.empty(0, np.int64)).shape == (0,)
    g.close()


def test_thread_count_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTGNN_GATHER_THREADS", "3")
    assert gather.gather_threads() == 3
    monkeypatch.setenv("DISTGNN_GATHER_THREADS", "0")
    assert gather.gather_threads() == 1
    monkeypatch.setenv("DISTGNN_GATHER_THREADS", "many")
    with pytest.raises(ValueError, match="DISTGNN_GATHER_THREADS"):
        gather.gather_threads()
    monkeypatch.delenv("DISTGNN_GATHER_THREADS")
    assert 1 <= gather.gather_threads() <= min(gather.MAX_THREADS, gather.available_cpus())


def test_a_trainer_sizes_the_gatherer_by_its_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``set_default_threads`` (a trainer's torch threads) sizes the process's gatherer,
    unless DISTGNN_GATHER_THREADS is set or the gatherer exists already."""
    from distgnn.rpc import gather

    monkeypatch.delenv(gather.ENV_GATHER_THREADS, raising=False)
    monkeypatch.setattr(gather, "available_cpus", lambda: 4)
    monkeypatch.setattr(gather, "_DEFAULT", None)
    gather.set_default_threads(1)
    assert gather.default_gatherer().threads == 1
    gather.set_default_threads(3)  # already made: kept
    assert gather.default_gatherer().threads == 1
    monkeypatch.setattr(gather, "_DEFAULT", None)
    monkeypatch.setenv(gather.ENV_GATHER_THREADS, "2")
    gather.set_default_threads(1)
    assert gather.default_gatherer().threads == 2
    monkeypatch.setattr(gather, "_DEFAULT", None)
    monkeypatch.delenv(gather.ENV_GATHER_THREADS)
    assert gather.default_gatherer().threads == 4  # nobody said: every CPU
