"""Regrouping a two-way partition's clusters on every edge (distgnn.partition.regroup)."""

from __future__ import annotations

import numpy as np

from distgnn.partition.refine import GROUP_SLACK, IMBALANCE, refine_boundary
from distgnn.partition.regroup import CLUSTERS, best_grouping, regroup


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
    # every pair now on one side: only the random 5 % are cut (about half of them)
    pair = comm // 2
    assert all(np.unique(res.parts[pair == p]).shape[0] == 1 for p in range(8))
    assert res.cut_after < 0.05 * src.shape[0]
    # within the refinement's bounds, and the refinement then keeps them too
    for parts in (res.parts, refine_boundary(res.parts, src, dst, 2, vw, train).parts):
        load = np.bincount(parts, weights=vw, minlength=2)
        assert load.max() <= (1 + IMBALANCE) * vw.sum() / 2
        assert np.bincount(parts[train], minlength=2).max() <= np.ceil(
            train.sum() / 2 * GROUP_SLACK
        )
    final = refine_boundary(res.parts, src, dst, 2, vw, train).parts
    assert cut(final, src, dst) <= res.cut_after < cut(alone, src, dst)


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
    # clusters 0-3 of 40, 30, 20, 10 nodes; 0-1 and 2-3 joined by many edges, 0-2 and
    # 1-3 by few. The lowest cut ({0,1} | {2,3}) puts 70 % of the weight on one side
    rng = np.random.default_rng(0)
    sizes = [40, 30, 20, 10]
    labels = np.repeat(np.arange(4), sizes).astype(np.int8)
    first = np.cumsum([0, *sizes])

    def edges(a: int, b: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            rng.integers(first[a], first[a + 1], m),
            rng.integers(first[b], first[b + 1], m),
        )

    parts_e = [edges(a, a, 200) for a in range(4)]
    parts_e += [edges(0, 1, 60), edges(2, 3, 60), edges(0, 2, 5), edges(1, 3, 5)]
    src = np.concatenate([s for s, _ in parts_e])
    dst = np.concatenate([d for _, d in parts_e])
    start = np.zeros(100, dtype=np.int64)
    start[first[2] :] = 1
    side, c = best_grouping(labels, start, src, dst, CLUSTERS) or (None, -1)
    assert side is not None
    assert c == cut(side[labels.astype(np.int64)], src, dst)
    load = np.bincount(side[labels.astype(np.int64)], minlength=2)
    assert load.max() <= (1 + IMBALANCE) * 100 / 2  # 50/50: {0,3} | {1,2}
    assert sorted(load.tolist()) == [50, 50]
    # a grouped node set (training nodes) is bounded too: all in cluster 0 and 3 is
    # forbidden once they outnumber 1.02 x their half
    group = np.zeros(100, dtype=bool)
    group[:40] = True
    group[90:] = True
    assert best_grouping(labels, start, src, dst, CLUSTERS, group=group) is None
