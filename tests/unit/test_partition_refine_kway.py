"""The boundary refinement with more than two parts (distgnn.partition.refine): every pair
of parts per pass, without moves that spoil each other's gain."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.partition.refine import GROUP_SLACK, IMBALANCE, refine_boundary


def cut(parts: np.ndarray, src: np.ndarray, dst: np.ndarray) -> int:
    return int(np.count_nonzero(parts[src] != parts[dst]))


def planted(k: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``k`` communities of ``size`` nodes, 90 % of the edges inside (degree about 20),
    the rest anywhere. (src, dst, community)."""
    rng = np.random.default_rng(seed)
    n = k * size
    comm = np.repeat(np.arange(k), size)
    e = n * 10
    src = rng.integers(0, n, e)
    home = rng.random(e) < 0.9
    target = np.where(home, comm[src], rng.integers(0, k, e))
    dst = target * size + rng.integers(0, size, e)
    keep = src != dst
    return src[keep], dst[keep], comm


@pytest.mark.parametrize("k", [4, 8])
def test_one_pass_moves_between_every_pair_of_parts(k: int) -> None:
    src, dst, comm = planted(k, 400, seed=k)
    n = comm.shape[0]
    rng = np.random.default_rng(1)
    noisy = comm.copy()
    # 8 % of the nodes scattered into other parts, evenly over all pairs
    flip = rng.choice(n, n * 8 // 100, replace=False)
    noisy[flip] = (comm[flip] + rng.integers(1, k, flip.shape[0])) % k
    vw = 1 + np.bincount(dst, minlength=n)
    # a fifth of every community trains: the planted partition is within the bounds
    train = (rng.permuted(np.arange(n).reshape(k, -1), axis=1) % 400 < 80).reshape(-1)
    res = refine_boundary(noisy, src, dst, k, vw, train, max_passes=1)
    # one pass puts back nearly every scattered node, whichever pair of parts it is in
    # (a pass between half of the parts and the others reached only a third of the pairs)
    assert res.passes == 1
    assert cut(res.parts, src, dst) <= 1.02 * cut(comm, src, dst)
    assert np.count_nonzero(res.parts != comm) < 0.1 * flip.shape[0]
    assert cut(noisy, src, dst) - cut(res.parts, src, dst) >= res.gain > 0
    # and the refinement stops early: two passes bring nothing more
    full = refine_boundary(noisy, src, dst, k, vw, train)
    assert full.passes <= 3
    load = np.bincount(full.parts, weights=vw, minlength=k)
    assert load.max() <= (1 + IMBALANCE) * vw.sum() / k
    assert np.bincount(full.parts[train], minlength=k).max() <= np.ceil(
        train.sum() / k * GROUP_SLACK
    )


def test_two_neighbours_never_swap_parts() -> None:
    # u = 0 in part 0 and v = 1 in part 1, joined by 3 edges; u has one more edge in
    # part 0 (to 2), v one more in part 1 (to 3): each alone gains 2 by joining the
    # other's part, both at once would swap them and raise the cut from 3 to 5
    k, filler = 4, 100
    src = np.array([0, 0, 1, 0, 1])
    dst = np.array([1, 1, 0, 2, 3])
    parts = np.concatenate([[0, 1, 0, 1], np.repeat(np.arange(k), filler)])
    res = refine_boundary(parts, src, dst, k, max_passes=1)
    after = cut(res.parts, src, dst)
    assert res.moved == 1 and res.gain == 2
    assert after == cut(parts, src, dst) - 2 == 1
    assert res.parts[0] == res.parts[1]


def test_neighbours_leaving_one_part_together_both_move() -> None:
    # 0 and 1 in part 0, linked to each other once and each to three nodes of part 2:
    # both move to part 2 in one pass (their shared edge stays inside a part)
    k = 3
    src = np.array([0, 0, 0, 0, 1, 1, 1])
    dst = np.array([1, 2, 3, 4, 2, 3, 4])
    parts = np.concatenate([[0, 0, 2, 2, 2], np.repeat(np.arange(k), [98, 100, 97])])
    res = refine_boundary(parts, src, dst, k, max_passes=1)
    assert res.moved == 2 and res.parts[0] == res.parts[1] == 2
    assert cut(res.parts, src, dst) == 0 and res.gain == 4  # each counted its own gain
