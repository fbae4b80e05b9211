"""Regrouping a two-way partition's clusters on every edge (distgnn.partition.regroup)."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.partition.refine import GROUP_SLACK, IMBALANCE, refine_boundary
from distgnn.partition.regroup import best_grouping, local_grouping
from distgnn.partition.regroup import regroup_now as regroup


def cut(parts: np.ndarray, src: np.ndarray, dst: np.ndarray) -> int:
    return int(np.count_nonzero(parts[src] != parts[dst]))


def communities(seed: int, halves: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """16 communities of 100 nodes (85 % of the edges inside), linked in pairs (2i, 2i+1)
    by 10 % of the edges, the other 5 % anywhere; ``halves``: 90 % inside, 9 % to the
    same half (communities 0-7 or 8-15), 1 % anywhere. (src, dst, community)."""
    rng = np.random.default_rng(seed)
    size, k = 100, 16
    n = size * k
    comm = np.repeat(np.arange(k), size)
    e = n * 10
    src = rng.integers(0, n, e)
    kind = rng.random(e)
    home = comm[src]
    anywhere = rng.integers(0, k, e)
    if halves:
        near = home // 8 * 8 + rng.integers(0, 8, e)
        target = np.where(kind < 0.9, home, np.where(kind < 0.99, near, anywhere))
    else:
        target = np.where(kind < 0.85, home, np.where(kind < 0.95, home ^ 1, anywhere))
    dst = target * size + rng.integers(0, size, e)
    keep = src != dst
    return src[keep], dst[keep], comm


def test_regroup_moves_whole_clusters_the_refinement_cannot() -> None:
    src, dst, comm = communities(seed=3)
    n = comm.shape[0]
    # a grouping that splits every pair: each community on one side, 8 a side
    start = (comm % 2).astype(np.int64)
    vw = 1 + np.bincount(dst, minlength=n)
    train = np.random.default_rng(1).random(n) < 0.2
    # alone, the refinement keeps the communities where they are: no single node gains
    alone = refine_boundary(start, src, dst, 2, vw, train).parts
    assert cut(alone, src, dst) > 0.9 * cut(start, src, dst)
    res = regroup(start, src, dst, vw, train)
    assert res.adopted and res.moved_clusters > 0
    assert res.cut_before == cut(start, src, dst)
    assert res.cut_after == cut(res.parts, src, dst) < res.cut_before
    # most of every pair on one side (a few nodes mislabelled)
    pair = comm // 2
    on1 = np.bincount(pair, weights=res.parts, minlength=8) / np.bincount(pair, minlength=8)
    assert np.all((on1 <= 0.1) | (on1 >= 0.9)), on1
    # within the refinement's bounds, and the refinement then keeps them too
    for parts in (res.parts, refine_boundary(res.parts, src, dst, 2, vw, train).parts):
        load = np.bincount(parts, weights=vw, minlength=2)
        assert load.max() <= (1 + IMBALANCE) * vw.sum() / 2
        assert np.bincount(parts[train], minlength=2).max() <= np.ceil(
            train.sum() / 2 * GROUP_SLACK
        )
    final = refine_boundary(res.parts, src, dst, 2, vw, train).parts
    assert cut(final, src, dst) <= res.cut_after < cut(alone, src, dst)
    # then every pair is on one side: only the random 5 % are cut (about half of them)
    on1 = np.bincount(pair, weights=final, minlength=8) / np.bincount(pair, minlength=8)
    assert np.all((on1 <= 0.02) | (on1 >= 0.98)), on1
    assert cut(final, src, dst) < 0.04 * src.shape[0]


def test_regroup_keeps_a_partition_no_grouping_improves() -> None:
    src, dst, comm = communities(seed=4, halves=True)
    best = (comm // 8).astype(np.int64)  # the two halves
    res = regroup(best, src, dst)
    # the clusters' best grouping is this one (its cut is no lower): nothing changes
    assert not res.adopted and res.moved_clusters == 0
    assert np.array_equal(res.parts, best) and res.cut_after == res.cut_before == cut(
        best, src, dst
    )


def test_best_grouping_respects_the_balance_bounds() -> None:
    # clusters 0-3 weigh 40, 30, 20, 10; 0-1 and 2-3 are joined by 60 edges each, 0-2
    # and 1-3 by 5. The lowest cut ({0,1} | {2,3}: 10) puts 70 % of the weight on one
    # side; within 1.03 x the mean only {0,3} | {1,2} is (cut 130)
    k = 4
    quot = np.zeros((k + 2, k + 2), dtype=np.int64)
    np.fill_diagonal(quot[:k, :k], 200)
    quot[0, 1] = quot[2, 3] = 60
    quot[0, 2] = quot[1, 3] = 5
    load = np.array([40, 30, 20, 10, 0, 0])
    found = best_grouping(quot, load, np.zeros(k + 2, np.int64), k)
    assert found is not None
    side, c = found
    assert c == 130 and side.tolist() in ([0, 1, 1, 0], [1, 0, 0, 1])
    # unlabelled nodes stay on their side: with 10 of weight on side 1 and cluster 3
    # weightless, only cluster 0 joins them (50 | 50; cut 0-1 and 0-2)
    fixed = np.array([40, 30, 20, 0, 0, 10])
    found = best_grouping(quot, fixed, np.zeros(k + 2, np.int64), k)
    assert found is not None and found[0].tolist() == [1, 0, 0, 0] and found[1] == 65
    # grouped nodes (training nodes) are bounded too: 50 of them, all in clusters 0 and 3
    gload = np.array([40, 0, 0, 10, 0, 0])
    assert best_grouping(quot, load, gload, k) is None


@pytest.mark.parametrize(("k", "weighted"), [(4, True), (8, False)])
def test_regroup_into_more_parts_puts_linked_communities_together(k: int, weighted: bool) -> None:
    src, dst, comm = communities(seed=5)
    n = comm.shape[0]
    # every pair (2i, 2i + 1) split: each community whole, 16 / k of them a part
    start = ((comm + comm // 2) % k).astype(np.int64)
    assert np.bincount(start, minlength=k).max() == n // k
    # 8 parts: a pair of communities is a part, within the bounds only by node count
    vw = 1 + np.bincount(dst, minlength=n) if weighted else np.ones(n, np.int64)
    # a fifth of every community trains
    rng = np.random.default_rng(2)
    train = (rng.permuted(np.arange(n).reshape(16, -1), axis=1) % 100 < 20).reshape(-1)
    alone = refine_boundary(start, src, dst, k, vw, train).parts
    assert cut(alone, src, dst) > 0.9 * cut(start, src, dst)  # no single node gains
    res = regroup(start, src, dst, vw, train, num_parts=k)
    assert res.adopted and res.moved_clusters > 0
    assert res.cut_before == cut(start, src, dst)
    assert res.cut_after == cut(res.parts, src, dst) < 0.8 * res.cut_before
    load = np.bincount(res.parts, weights=vw, minlength=k)
    assert load.max() <= (1 + IMBALANCE) * vw.sum() / k
    assert np.bincount(res.parts[train], minlength=k).max() <= np.ceil(
        train.sum() / k * GROUP_SLACK
    )
    final = refine_boundary(res.parts, src, dst, k, vw, train).parts
    # every pair in one part (but for a few nodes): only random edges are cut
    pair = comm // 2
    for p in range(8):
        assert np.bincount(final[pair == p], minlength=k).max() >= 0.98 * np.sum(pair == p)
    assert cut(final, src, dst) <= 0.05 * src.shape[0]


def test_local_grouping_reaches_the_bounds_from_an_unbalanced_start() -> None:
    # 4 clusters of equal weight, all started in part 0 (of 2): the search first
    # restores the balance, then lowers the cut
    quot = np.zeros((6, 6), dtype=np.int64)
    quot[0, 1] = quot[2, 3] = 50
    quot[1, 2] = 5
    load = np.array([10, 10, 10, 10, 0, 0])
    res = local_grouping(quot, load, np.zeros(6, np.int64), 4, 2, np.zeros(4, np.int64))
    assert res is not None
    side, c = res
    # two parts of 20: clusters 0-1 together, 2-3 together, only the 1-2 edges cut
    assert side[0] == side[1] != side[2] == side[3] and c == 5
