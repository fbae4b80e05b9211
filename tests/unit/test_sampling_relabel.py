"""Block relabelling (dense lookup table vs. sort-based) and the prefetch thread."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.errors import ConfigError
from distgnn.sampling import blocks
from distgnn.sampling.blocks import to_block
from distgnn.sampling.loader import prefetch


def _sample(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    seeds = rng.choice(n, 30, replace=False)
    dst = seeds[rng.integers(0, 30, 400)]
    src = rng.integers(0, n, 400)
    return seeds, src, dst


@pytest.mark.parametrize("n", [100, 5000, 1 << 40])
def test_dense_and_sorted_relabelling_agree(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds, src, dst = _sample(n % 97, n)
    a = to_block(seeds, src, dst, np.arange(400))
    monkeypatch.setattr(blocks, "DENSE_RELABEL_MIN", 0)
    monkeypatch.setattr(blocks, "DENSE_RELABEL_FACTOR", 0)
    b = to_block(seeds, src, dst, np.arange(400))
    # destinations given as positions in the seeds (what the servers' runs give)
    at = {int(s): i for i, s in enumerate(seeds)}
    c = to_block(seeds, src, None, np.arange(400), dst_index=np.array([at[d] for d in dst]))
    for name in ("src_nid", "dst_nid", "edge_src", "edge_dst", "eid"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
        assert getattr(a, name).dtype == getattr(b, name).dtype == np.int64
    np.testing.assert_array_equal(a.src_nid[: seeds.size], seeds)
    np.testing.assert_array_equal(a.src_nid[a.edge_src], src)
    np.testing.assert_array_equal(a.dst_nid[a.edge_dst], dst)
    rest = a.src_nid[seeds.size :]
    assert np.all(np.diff(rest) > 0) and not np.isin(rest, seeds).any()


@pytest.mark.parametrize("dense", [True, False])
def test_relabelling_errors(dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not dense:
        monkeypatch.setattr(blocks, "DENSE_RELABEL_MIN", 0)
        monkeypatch.setattr(blocks, "DENSE_RELABEL_FACTOR", 0)
    with pytest.raises(ConfigError, match="unique"):
        to_block(np.array([1, 2, 1]), np.array([0]), np.array([1]), np.array([0]))
    with pytest.raises(ConfigError, match="not among the seeds"):
        to_block(np.array([1, 2]), np.array([0]), np.array([3]), np.array([0]))
    b = to_block(np.array([4, 2]), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    assert b.num_src_nodes() == 2 and b.num_edges() == 0


def test_prefetch_yields_in_order_and_propagates_errors() -> None:
    assert list(prefetch(range(6), lambda i: i * i, depth=2)) == [0, 1, 4, 9, 16, 25]
    assert list(prefetch([], lambda i: i)) == []

    def boom(i: int) -> int:
        if i == 3:
            raise ValueError("boom at 3")
        return i

    got = []
    with pytest.raises(ValueError, match="boom at 3"):
        for v in prefetch(range(10), boom):
            got.append(v)
    assert got == [0, 1, 2]
    with pytest.raises(ConfigError):
        next(prefetch(range(3), lambda i: i, depth=0))


def test_prefetch_stops_when_closed_early() -> None:
    it = prefetch(iter(range(1000)), lambda i: i)
    assert next(it) == 0
    it.close()  # joins the thread; no hang
