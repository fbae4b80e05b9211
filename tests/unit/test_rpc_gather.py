"""Row gathers split over threads: same rows as fancy indexing, thread count settings;
the native streaming gather (``distgnn._native.gather_rows``) against ``np.take`` on
every dtype, row width, ID type and alignment, and its refusals; the co-located
trainer's shared-memory read on both paths (``DISTGNN_NATIVE=0``: NumPy)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from distgnn import native
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


# --- the native streaming gather -----------------------------------------------------------


def _step_like(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """A step's local input IDs: random seeds, then ascending sweeps (the hops' new nodes)."""
    seeds = rng.choice(rows, min(rows, 50), replace=False)
    hops = [np.sort(rng.choice(rows, min(rows, m), replace=False)) for m in (n // 8, n // 2)]
    return np.concatenate([seeds, *hops])


@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.float64, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, bool],
)
@pytest.mark.parametrize("row_shape", [(), (1,), (100,), (3, 7), (1250,), (0,)])
@pytest.mark.parametrize("stream", [True, False])
def test_gather_kernel_equals_take(
    k: ModuleType, dtype: type, row_shape: tuple[int, ...], stream: bool
) -> None:
    """Every dtype, rows of 0 bytes to 10 KB (past the staging buffer: the wide-row
    path), int64 and int32 IDs, repeated IDs, an output not aligned to a cache line."""
    rng = np.random.default_rng(len(row_shape) + sum(row_shape))
    table = (rng.random((1000, *row_shape)) * 100).astype(dtype)
    for ids in (_step_like(rng, 1000, 600), rng.integers(0, 1000, 333), np.array([5, 5, 0])):
        for it in (np.int64, np.int32):
            want = np.take(table, ids, 0)
            buf = np.full((len(ids) + 1, *row_shape), 1, dtype)
            out = buf[1:]  # one row past a line boundary (or an odd offset)
            assert k.gather_rows(table, ids.astype(it), out, stream) is None
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(buf[:1], np.full((1, *row_shape), 1, dtype))


def test_gather_kernel_empty_and_edges(k: ModuleType) -> None:
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    for stream in (True, False):
        k.gather_rows(table, np.empty(0, np.int64), np.empty((0, 3), np.float32), stream)
        k.gather_rows(table[:0], np.empty(0, np.int32), np.empty((0, 3), np.float32), stream)
        out = np.empty((2, 3), np.float32)
        k.gather_rows(table, np.array([3, 0]), out, stream)
        np.testing.assert_array_equal(out, table[[3, 0]])
    with pytest.raises(ValueError, match=r"ids\[0\] = 0 is out of range \[0, 0\)"):
        k.gather_rows(table[:0], np.array([0]), np.empty((1, 3), np.float32), True)
    with pytest.raises(ValueError, match="out of range"):  # rows of 0 bytes: still checked
        k.gather_rows(np.empty((4, 0)), np.array([4]), np.empty((1, 0)), True)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("bad", [-1, 3000, 2**40, -(2**62)])
def test_gather_kernel_refuses_out_of_range_ids(k: ModuleType, stream: bool, bad: int) -> None:
    """A clear error naming the position and the ID, never a read outside the table."""
    table = np.ones((3000, 100), np.float32)
    ids = np.arange(0, 3000, 2, dtype=np.int64)
    ids[700] = bad
    with pytest.raises(ValueError, match=rf"ids\[700\] = {bad} is out of range \[0, 3000\)"):
        k.gather_rows(table, ids, np.empty((len(ids), 100), np.float32), stream)
    if -(2**31) <= bad < 2**31:
        with pytest.raises(ValueError, match="out of range"):
            k.gather_rows(
                table, ids.astype(np.int32), np.empty((len(ids), 100), np.float32), stream
            )


@pytest.mark.parametrize(
    ("args", "err", "match"),
    [
        ((np.ones((10, 4))[:, ::2], np.array([1]), np.empty((1, 2))), TypeError, "table"),
        ((np.ones((10, 4)), np.array([1.0]), np.empty((1, 4))), TypeError, "int64 or int32"),
        ((np.ones((10, 4)), np.array([[1]]), np.empty((1, 4))), TypeError, "1-D"),
        ((np.ones((10, 4)), np.array([1], np.int16), np.empty((1, 4))), TypeError, "int32"),
        ((np.ones((10, 4)), np.array([1]), np.empty((2, 4))), ValueError, "out: 64 bytes"),
        ((np.ones((10, 4)), np.array([1]), np.empty((1, 4), np.float32)), ValueError, "out"),
        ((np.ones((10, 4)), np.array([1, 2]), np.empty((2, 8))[:, ::2]), TypeError, "out"),
        ((np.ones(3)[0], np.array([0]), np.empty(1)), TypeError, "table"),
    ],
)
def test_gather_kernel_refuses_bad_input(
    k: ModuleType, args: tuple[object, ...], err: type[Exception], match: str
) -> None:
    with pytest.raises(err, match=match):
        k.gather_rows(*args, True)
    ro = np.empty((1, 4))
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        k.gather_rows(np.ones((10, 4)), np.array([1]), ro, True)


def _spy_kernel(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The arguments of every ``gather_rows`` call the gatherer makes (it still runs)."""
    seen: list[tuple] = []
    k = native.kernels()
    if k is not None:

        def gather_rows(*a: object) -> None:
            seen.append(a)
            k.gather_rows(*a)

        spy = SimpleNamespace(gather_rows=gather_rows)
        monkeypatch.setattr(gather, "native", SimpleNamespace(kernels=lambda: spy))
    return seen


@pytest.mark.parametrize("threads", [1, 3])
def test_streaming_gather_is_the_same_rows_on_both_paths(
    path: str, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gather(stream=True)``: the streaming kernel for a large output on the native path
    (one call per thread's slice), the kernel's plain stores below ``STREAM_MIN_BYTES``,
    ``np.take`` for a table that is not C-contiguous and on the NumPy path; the same
    rows every time."""
    seen = _spy_kernel(monkeypatch)
    rng = np.random.default_rng(threads)
    table = np.arange(4_000_000, dtype=np.float32).reshape(40_000, 100)
    ids = _step_like(rng, 40_000, 30_000)
    native_path = path == "native"
    g = RowGatherer(threads)
    try:
        for t, rows, kernel, stream in (
            (table, ids, native_path, True),  # 7.6 MB: streamed
            (table, ids[:2000], native_path, False),  # 0.8 MB: plain stores
            (np.asfortranarray(table), ids, False, False),  # not C-contiguous: np.take
            (table, ids.astype(np.int32), native_path, True),
        ):
            seen.clear()
            out = np.empty((len(rows), 100), np.float32)
            g.gather(t, rows, out, stream=True)
            np.testing.assert_array_equal(out, table[rows])
            assert all(a[3] is stream for a in seen)
            assert sum(len(a[1]) for a in seen) == (len(rows) if kernel else 0)
            assert len(seen) == (
                max(1, min(threads, out.nbytes // gather.MIN_SLICE_BYTES)) if kernel else 0
            )
    finally:
        g.close()


def test_a_plain_gather_prefetches_with_the_kernel(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gather()`` (a server's pull answer): the kernel's plain stores (rows prefetched
    ahead) on the native path, ``np.take`` on the NumPy path; the same rows."""
    seen = _spy_kernel(monkeypatch)
    table = np.arange(2_000_000, dtype=np.float32).reshape(40_000, 50)
    ids = np.random.default_rng(4).integers(0, 40_000, 10_000)
    out = np.empty((len(ids), 50), np.float32)
    RowGatherer(1).gather(table, ids, out)
    np.testing.assert_array_equal(out, table[ids])
    assert [(len(a[1]), a[3]) for a in seen] == ([(10_000, False)] if path == "native" else [])


def test_a_colocated_read_streams_the_rows_from_shared_memory(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The co-located trainer's read of a mapped (read-only) store file: the same rows on
    both paths, the native one through the streaming kernel."""
    from distgnn.distributed.localread import LocalReader

    seen = _spy_kernel(monkeypatch)
    store = tmp_path / "store-0"
    store.mkdir()
    (store / "info.json").write_text(json.dumps({"part_id": 0}))
    rng = np.random.default_rng(0)
    feat = np.arange(5_000_000, dtype=np.float32).reshape(50_000, 100)
    np.save(store / (b"feat".hex() + ".npy"), feat)
    reader = LocalReader.open(str(tmp_path), 0, "store-0", lambda: "store-0")
    ids = _step_like(rng, 50_000, 40_000)
    out = [np.empty((50, 100), np.float32), np.empty((len(ids) - 50, 100), np.float32)]
    assert reader.gather("feat", ids, out, rows=50_000)
    np.testing.assert_array_equal(np.concatenate(out), feat[ids])
    # the hops' 25k rows streamed (a call per gather thread), the 50 seeds by plain stores
    streamed = [len(a[1]) for a in seen if a[3] is True]
    plain = [len(a[1]) for a in seen if a[3] is False]
    assert sum(streamed) == (len(ids) - 50 if path == "native" else 0)
    assert plain == ([50] if path == "native" else [])
    reader.close()


def test_an_extension_built_before_the_kernel_falls_back_to_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale in-place build (no ``gather_rows``): the same rows by ``np.take``."""
    monkeypatch.setattr(gather, "native", SimpleNamespace(kernels=SimpleNamespace))
    table = np.arange(4_000_000, dtype=np.float32).reshape(40_000, 100)
    ids = _step_like(np.random.default_rng(1), 40_000, 30_000)
    out = np.empty((len(ids), 100), np.float32)
    RowGatherer(1).gather(table, ids, out, stream=True)
    np.testing.assert_array_equal(out, table[ids])
