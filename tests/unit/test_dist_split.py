"""node_split/edge_split cover the input exactly once, balanced, preferring local nodes;
server-side sampling kernels respect fanout bounds and pick distinct real edges."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.distributed.split import split_even, split_local
from distgnn.server import sampling


def _parts(rng: np.random.Generator, sizes: list[int], frac: float) -> list[np.ndarray]:
    out, base = [], 0
    for n in sizes:
        ids = np.arange(base, base + n)
        out.append(ids[rng.random(n) < frac])
        base += n
    return out


@pytest.mark.parametrize(("sizes", "world"), [([500, 300, 200], 3), ([500, 10], 4), ([40, 60], 7)])
def test_split_even_covers_once_and_balances(sizes: list[int], world: int) -> None:
    rng = np.random.default_rng(sum(sizes) + world)
    per_part = _parts(rng, sizes, 0.3)
    shares = [split_even(per_part, r, world) for r in range(world)]
    allids = np.concatenate(shares)
    expected = np.concatenate(per_part)
    assert len(allids) == len(expected)
    np.testing.assert_array_equal(np.sort(allids), np.sort(expected))
    lens = [len(s) for s in shares]
    assert max(lens) - min(lens) <= 1
    # ranks take their own partition's items first, as far as their quotas allow
    k = len(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for p in range(k):
        mine = [shares[r] for r in range(world) if r % k == p]
        own = sum(int(((s >= offsets[p]) & (s < offsets[p + 1])).sum()) for s in mine)
        assert own == min(len(per_part[p]), sum(len(s) for s in mine))


def test_split_local_keeps_partitions() -> None:
    per_part = [np.arange(0, 10), np.arange(100, 130)]
    shares = [split_local(per_part, r, 4) for r in range(4)]
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)), np.concatenate(per_part))
    assert (shares[0] < 100).all() and (shares[1] >= 100).all()


def _csc(rng: np.random.Generator, n: int) -> np.ndarray:
    deg = rng.integers(0, 60, n)
    return np.concatenate([[0], np.cumsum(deg)])


@pytest.mark.parametrize("fanout", [1, 5, 25])
def test_uniform_sampling_bounds(fanout: int) -> None:
    rng = np.random.default_rng(fanout)
    indptr = _csc(rng, 400)
    seeds = rng.permutation(400)[:300]
    deg = indptr[seeds + 1] - indptr[seeds]
    pos, seg = sampling.sample_uniform(indptr, seeds, fanout, False, rng)
    assert (pos >= indptr[seeds[seg]]).all() and (pos < indptr[seeds[seg] + 1]).all()
    np.testing.assert_array_equal(np.bincount(seg, minlength=300), np.minimum(deg, fanout))
    assert len(np.unique(pos)) == len(pos)
    pos, seg = sampling.sample_uniform(indptr, seeds, fanout, True, rng)
    np.testing.assert_array_equal(np.bincount(seg, minlength=300), np.where(deg > 0, fanout, 0))
    assert (pos >= indptr[seeds[seg]]).all() and (pos < indptr[seeds[seg] + 1]).all()


def test_uniform_sampling_is_roughly_uniform() -> None:
    rng = np.random.default_rng(1)
    indptr = np.array([0, 100])
    seeds = np.zeros(4000, dtype=np.int64)
    pos, _ = sampling.sample_uniform(indptr, seeds, 10, False, rng)
    counts = np.bincount(pos, minlength=100)
    assert counts.min() > 250 and counts.max() < 550  # expectation 400 each


def test_high_degree_draws_are_uniform_distinct_subsets() -> None:
    """Degree > 2*fanout (Floyd's algorithm): every row a distinct, ascending subset and
    every f-subset equally likely (not only every position)."""
    rng = np.random.default_rng(4)
    deg = np.full(30000, 5, dtype=np.int64)
    picks = sampling._distinct_draws(deg, 2, rng)
    assert (picks[:, 0] < picks[:, 1]).all() and picks.min() >= 0 and picks.max() < 5
    pairs = np.bincount(picks[:, 0] * 5 + picks[:, 1], minlength=25)
    pairs = pairs[[a * 5 + b for a in range(5) for b in range(a + 1, 5)]]
    assert pairs.min() > 2700 and pairs.max() < 3300  # 10 pairs, expectation 3000 each
    wide = sampling._distinct_draws(np.array([31, 40, 1000, 2**40]), 15, rng)
    assert all(len(set(row)) == 15 for row in wide.tolist())
    assert (wide < np.array([[31], [40], [1000], [2**40]])).all()


def test_weighted_sampling_follows_weights() -> None:
    rng = np.random.default_rng(2)
    cand = np.arange(6)
    seg = np.array([0, 0, 0, 1, 1, 1])
    w = np.array([0.0, 1.0, 3.0, 1.0, 0.0, 0.0])
    for replace in (False, True):
        tot = np.zeros(6)
        for _ in range(200):
            p, _ = sampling.sample_candidates(cand, seg, 2, 1, replace, rng, w)
            tot += np.bincount(p, minlength=6)
        assert tot[0] == 0 and tot[4] == 0 and tot[5] == 0
        assert tot[3] == 200 and tot[2] > 2 * tot[1]
