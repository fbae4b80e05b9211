"""A co-located trainer's copy of its partition's CSC on huge pages: the copy holds the same
values in memory of its own (read-only, 2 MiB-aligned), the in-process draw over it gives
the server's answer, and a partition over the size cap (or a kernel without transparent
huge pages) keeps the shared-memory maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.support.cora import handlers_on, partition_cora

from distgnn import hugecopy
from distgnn.distributed import localsample
from distgnn.server.handlers import Handlers


@pytest.mark.parametrize(
    "shape,dtype", [((6_000_000,), np.int64), ((1000, 7), np.float32), ((0,), np.int64)]
)
def test_huge_copy_holds_the_same_values_in_its_own_aligned_read_only_memory(
    shape: tuple[int, ...], dtype: type
) -> None:
    a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    b = hugecopy.huge_copy(a)
    assert b.shape == a.shape and b.dtype == a.dtype and np.array_equal(a, b)
    assert not np.shares_memory(a, b)
    assert not b.flags.writeable and b.flags.c_contiguous
    assert b.ctypes.data % hugecopy.HUGE == 0
    with pytest.raises(ValueError):
        b[...] = 0


def test_huge_copy_of_a_strided_view_is_contiguous() -> None:
    a = np.arange(100, dtype=np.int64)[::3]
    b = hugecopy.huge_copy(a)
    assert np.array_equal(a, b) and b.flags.c_contiguous


@pytest.mark.parametrize(
    "text,available",
    [("always [madvise] never\n", True), ("[always] madvise never\n", True),
     ("always madvise [never]\n", False)],
)  # fmt: skip
def test_thp_available_reads_the_kernels_setting(
    tmp_path: Path, text: str, available: bool
) -> None:
    f = tmp_path / "enabled"
    f.write_text(text)
    assert hugecopy.thp_available(str(f)) is available
    assert hugecopy.thp_available(str(tmp_path / "missing")) is False


def _answer(h: Handlers, seeds: np.ndarray) -> list[bytes]:
    meta = {"fanout": 3, "replace": False, "runs": True, "seed": 11}
    return [np.asarray(b).tobytes() for b in h.sample_neighbors(meta, [seeds])[1]]


def test_hot_copy_draws_the_servers_answer_from_memory_of_its_own(
    tmp_path: Path, cora_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = partition_cora(tmp_path / "p", cora_path, 2)
    monkeypatch.setattr(localsample, "thp_available", lambda: True)
    with handlers_on(url, 0) as h:
        g = h.g
        hot = localsample.hot_copy(g)
        assert hot is not g
        for name in ("indptr", "src"):
            a, b = getattr(g, name), getattr(hot, name)
            assert np.array_equal(a, b) and not np.shares_memory(a, b)
        assert hot.eid is g.eid and hot.local2global is g.local2global
        seeds = np.arange(0, g.n_owned, 3, dtype=np.int64)
        want = _answer(h, seeds)
        h.g = hot
        assert _answer(h, seeds) == want


def test_hot_copy_keeps_the_maps_over_the_cap_or_without_huge_pages(
    tmp_path: Path, cora_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = partition_cora(tmp_path / "p", cora_path, 2)
    with handlers_on(url, 0) as h:
        monkeypatch.setattr(localsample, "thp_available", lambda: False)
        assert localsample.hot_copy(h.g) is h.g
        monkeypatch.setattr(localsample, "thp_available", lambda: True)
        monkeypatch.setattr(localsample, "HOT_COPY_MAX_BYTES", 1024)
        assert localsample.hot_copy(h.g) is h.g
