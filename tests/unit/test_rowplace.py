"""A cached read's rows placed in the caller's order (``distgnn.distributed.rowplace``):
the native ``place_rows`` against torch's fallback and a NumPy reference, bit for bit,
on every dtype, row width, code pattern and buffer arrangement (pulled rows in a buffer
of their own or in the output's first rows, expanded in place); its refusals, which
write nothing; and a stale build without the kernel."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from distgnn.distributed import rowplace
from distgnn.distributed.rowplace import place_rows, place_rows_torch


def _reference(codes: np.ndarray, rows: np.ndarray, pulled: np.ndarray | None,
               before: np.ndarray) -> np.ndarray:  # fmt: skip
    want = before.copy()
    hit = codes >= 0
    want[hit] = rows[codes[hit]]
    if pulled is not None:
        want[~hit] = pulled
    return want


def _case(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype: str, share: float):
    nrows = 500
    rows = (rng.random((nrows, *shape)) * 1000).astype(dtype)
    codes = np.where(rng.random(n) < share, rng.integers(0, nrows, n), -1).astype(np.int32)
    codes[rng.random(n) < 0.1] = -2  # a chosen row not filled: pulled too
    m = int((codes < 0).sum())
    pulled = (rng.random((m, *shape)) * 1000 + 2000).astype(dtype)
    return rows, codes, pulled


CASES = [
    # n, row shape, dtype, share of cached rows
    (3000, (100,), "float32", 0.6),  # the step's feature rows: 400 bytes
    (3000, (100,), "float32", 0.0),  # all pulled
    (3000, (100,), "float32", 1.0),  # all cached
    (2000, (3,), "int64", 0.5),  # 24-byte rows, several per line
    (500, (), "float64", 0.5),  # one value per row
    (300, (3000,), "float32", 0.5),  # 12 KB rows: wider than the staging buffer
    (1, (7,), "int8", 1.0),
    (0, (4,), "float32", 0.5),
]


@pytest.mark.parametrize(("n", "shape", "dtype", "share"), CASES)
@pytest.mark.parametrize("stream", [True, False])
def test_the_kernel_places_the_same_rows_as_the_reference(
    k: ModuleType, n: int, shape: tuple[int, ...], dtype: str, share: float, stream: bool
) -> None:
    rng = np.random.default_rng(n + len(shape))
    rows, codes, pulled = _case(rng, n, shape, dtype, share)
    before = np.full((n, *shape), 7, dtype)
    want = _reference(codes, rows, pulled, before)
    # pulled rows in their own buffer
    out = before.copy()
    assert k.place_rows(out, codes, rows, pulled, stream) is None
    np.testing.assert_array_equal(out, want)
    # pulled rows received into the output's first rows: expanded in place
    out = before.copy()
    out[: len(pulled)] = pulled
    k.place_rows(out, codes, rows, out[: len(pulled)], stream)
    np.testing.assert_array_equal(out, want)
    # no pulled rows: those positions keep what they hold
    out = before.copy()
    k.place_rows(out, codes, rows, None, stream)
    np.testing.assert_array_equal(out, _reference(codes, rows, None, before))


@pytest.mark.parametrize(("n", "shape", "dtype", "share"), CASES)
def test_the_fallback_places_the_same_rows_as_the_reference(
    n: int, shape: tuple[int, ...], dtype: str, share: float
) -> None:
    rng = np.random.default_rng(n + len(shape))
    rows, codes, pulled = _case(rng, n, shape, dtype, share)
    before = np.full((n, *shape), 7, dtype)
    want = _reference(codes, rows, pulled, before)
    for in_out in (False, True):
        out = before.copy()
        src = pulled
        if in_out:
            out[: len(pulled)] = pulled
            src = out[: len(pulled)]
        place_rows_torch(out, codes, rows, src)
        np.testing.assert_array_equal(out, want)
    out = before.copy()
    place_rows_torch(out, codes, rows, None)
    np.testing.assert_array_equal(out, _reference(codes, rows, None, before))


def test_a_step_sized_read_is_the_same_on_both_paths(path: str) -> None:
    """``place_rows`` as the cache calls it, a step's size (streamed on the native path):
    the pulled rows in the output's first rows on the native path, a scratch buffer on
    the other; the same output."""
    rng = np.random.default_rng(3)
    rows, codes, pulled = _case(rng, 40_000, (100,), "float32", 0.6)
    want = _reference(codes, rows, pulled, np.zeros((40_000, 100), np.float32))
    out = np.zeros((40_000, 100), np.float32)
    in_place = rowplace.kernel_for(out, rows) is not None
    assert in_place == (path == "native")
    src = out[: len(pulled)] if in_place else pulled.copy()
    src[...] = pulled
    place_rows(out, codes, rows, src)
    np.testing.assert_array_equal(out, want)


def test_the_kernel_refuses_bad_arguments_and_writes_nothing(k: ModuleType) -> None:
    rows = np.arange(40, dtype=np.float32).reshape(10, 4)
    codes = np.array([0, -1, 9, -1], np.int32)
    pulled = np.ones((2, 4), np.float32)
    out = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"codes\[1\] = 10 is out of range"):
        k.place_rows(out, np.array([0, 10, -1, -1], np.int32), rows, pulled, True)
    with pytest.raises(ValueError, match="pulled: 4 bytes"):
        k.place_rows(out, codes, rows, np.ones(1, np.float32), True)
    with pytest.raises(ValueError, match="overlaps out but is not its first rows"):
        k.place_rows(out, codes, rows, out[1:3], True)
    with pytest.raises(ValueError, match="out: 64 bytes for 3 rows"):
        k.place_rows(out, codes[:3], rows, pulled, True)
    with pytest.raises(TypeError, match="1-D int32"):
        k.place_rows(out, codes.astype(np.int64), rows, pulled, True)
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        k.place_rows(ro, codes, rows, pulled, True)
    assert not out.any()  # every refusal before a row was written


def test_an_extension_built_before_the_kernel_falls_back_to_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale in-place build (no ``place_rows``): no kernel, so the caller receives
    into a buffer of its own; the same rows by torch's row copies."""
    monkeypatch.setattr(rowplace, "native", SimpleNamespace(kernels=SimpleNamespace))
    rng = np.random.default_rng(4)
    rows, codes, pulled = _case(rng, 5000, (100,), "float32", 0.6)
    out = np.zeros((5000, 100), np.float32)
    assert rowplace.kernel_for(out, rows) is None
    place_rows(out, codes, rows, pulled)
    np.testing.assert_array_equal(out, _reference(codes, rows, pulled, np.zeros_like(out)))
