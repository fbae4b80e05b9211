"""Eight parts and more: the recursive bisection's halves at once (distgnn.partition.bisect)
and ``method: metis`` into 8 and 16 parts against plain pymetis."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pymetis
import pytest

from distgnn.graph.generate import GenerateOptions, generate_graph
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.assign import (
    _kway_cut,
    recursive_split,
    symmetric_csr,
    weighted_symmetric_csr,
)
from distgnn.partition.bisect import bisect_then_halves, induced, second_instance
from distgnn.partition.metislib import MetisLib, find_metis
from distgnn.partition.partitioner import partition_graph
from distgnn.partition.refine import GROUP_SLACK, IMBALANCE
from distgnn.partition.sampled import count_cut, sampled_metis
from distgnn.partition.sparsify import keep_fraction


def system_metis() -> MetisLib:
    lib = find_metis()
    if lib is None or lib.idx_bits != 32:
        pytest.skip("no system libmetis (32-bit indices)")
    with second_instance(lib) as other:
        if other is None:
            pytest.skip("no second METIS instance (dlmopen) on this host")
    return lib


def band_graph(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges between nearby node IDs (on a ring), a few anywhere: many good cuts, so a
    partition depends on METIS's random draws."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 8 * n)
    near = rng.random(src.shape[0]) < 0.95
    dst = np.where(
        near, (src + rng.integers(-300, 300, src.shape[0])) % n, rng.integers(0, n, src.shape[0])
    )
    keep = src != dst
    return src[keep], dst[keep]


def test_induced_keeps_the_edges_inside_renumbered() -> None:
    # 0-1 (w 2), 1-2, 2-3, 0-3 as a symmetric CSR; keep nodes 1, 2, 3
    src, dst = np.array([0, 1, 0, 1, 2, 0]), np.array([1, 0, 3, 2, 3, 3])
    xadj, adj, w = weighted_symmetric_csr(src, dst, 4, np.int32)
    vw = np.array([5, 6, 7, 8], np.int32)
    nodes, sx, sa, sw, svw = induced(xadj, adj, w, vw, np.array([False, True, True, True]))
    assert nodes.tolist() == [1, 2, 3]
    assert sx.tolist() == [0, 1, 3, 4]  # 1: {2}; 2: {1, 3}; 3: {2}
    assert sa.tolist() == [1, 0, 2, 1] and sa.dtype == np.int32
    assert sw is not None and sw.tolist() == [1, 1, 1, 1]
    assert svw is not None and svw.tolist() == [6, 7, 8]


@pytest.mark.parametrize("k", [4, 8])
def test_halves_at_once_are_seeded_balanced_and_cut_as_reported(
    k: int, caplog: pytest.LogCaptureFixture
) -> None:
    lib = system_metis()
    n = 20000
    src, dst = band_graph(n, seed=5)
    xadj, adj, w = weighted_symmetric_csr(src, dst, n, lib.dtype)
    vw = (1 + np.bincount(dst, minlength=n)).astype(lib.dtype)
    runs = []
    with caplog.at_level(logging.INFO, logger="distgnn.partition"):
        for _ in range(3):  # each run: the halves in two threads, two METIS instances
            runs.append(bisect_then_halves(xadj, adj, w, vw, k, lib, recursive_split(0)))
    assert any(r.getMessage() == "bisected" for r in caplog.records)
    parts, cut = runs[0]
    # the same partition every time: the two instances draw from their own random state
    for other, other_cut in runs[1:]:
        assert np.array_equal(other, parts) and other_cut == cut
    # the cut METIS reports (top + both halves) is the partition's cut of its input
    assert cut == count_cut(parts, src, dst) - count_cut(parts, src[src == dst], dst[src == dst])
    load = np.bincount(parts, weights=vw, minlength=k)
    assert load.min() > 0 and load.max() <= (1 + IMBALANCE) * load.mean()
    # and it cuts about as METIS's own recursion does
    _, whole_cut = _kway_cut(xadj, adj, k, vw, 0, lib, w, recursive=True)
    assert cut <= 1.1 * whole_cut


def test_odd_parts_and_tiny_graphs_leave_the_recursion_to_metis(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lib = system_metis()
    src, dst = band_graph(3000, seed=1)
    xadj, adj, w = weighted_symmetric_csr(src, dst, 3000, lib.dtype)
    with caplog.at_level(logging.INFO, logger="distgnn.partition"):
        parts, _ = bisect_then_halves(xadj, adj, w, None, 6 - 1, lib, recursive_split(0))
        tiny = weighted_symmetric_csr(src[:10] % 6, dst[:10] % 6, 6, lib.dtype)
        bisect_then_halves(*tiny, None, 4, lib, recursive_split(0))
    assert np.unique(parts).tolist() == [0, 1, 2, 3, 4]
    assert not any(r.getMessage() == "bisected" for r in caplog.records)


def generated(flat: bool) -> tuple[np.ndarray, np.ndarray, int]:
    n = 30000
    opts = (
        GenerateOptions(nodes=n, feat_dim=0, seed=3, group_sizes=(), locality=(0.8,))
        if flat
        else GenerateOptions(nodes=n, feat_dim=0, seed=3)
    )
    g = generate_graph(opts)
    src, dst = np.asarray(g["src"]), np.asarray(g["dst"])
    assert keep_fraction(n, src.shape[0]) < 1  # METIS gets an edge sample
    return src, dst, n


@pytest.mark.parametrize(("k", "flat"), [(8, False), (16, False), (16, True)])
def test_many_parts_cut_no_worse_than_plain_pymetis(
    k: int, flat: bool, caplog: pytest.LogCaptureFixture
) -> None:
    src, dst, n = generated(flat)
    xadj, adj = symmetric_csr(src, dst, n)
    plain = pymetis.part_graph(k, pymetis.CSRAdjacency(xadj, adj), options=pymetis.Options(seed=0))
    plain_cut = count_cut(np.asarray(plain.vertex_part), src, dst)
    with caplog.at_level(logging.INFO, logger="distgnn.partition"):
        parts = sampled_metis(src, dst, n, k, None, None, seed=0)
    # the sample bisected recursively (no k-way), one refinement pass a level
    metis = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("parts") == k]
    assert any(f.get("routine") == "recursive" and f.get("niter") == 1 for f in metis)
    assert count_cut(parts, src, dst) <= plain_cut
    sizes = np.bincount(parts, minlength=k)
    assert sizes.shape[0] == k and sizes.min() > 0
    assert sizes.max() <= (1 + IMBALANCE) * n / k + 1
    # the seed decides: the same partition again
    assert np.array_equal(sampled_metis(src, dst, n, k, None, None, seed=0), parts)


@pytest.mark.parametrize("k", [8, 16])
def test_many_parts_keep_the_balance_bounds(k: int, tmp_path: Path) -> None:
    src, dst, n = generated(flat=False)
    train = np.random.default_rng(0).random(n) < 0.1
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n), "train_mask": train})
    m = partition_graph(
        g, k, str(tmp_path), "g", balance_train=True, balance_edges=True, progress=False
    )
    assert len(m.parts) == k and min(p.owned_nodes for p in m.parts) > 0
    assert max(p.train_nodes for p in m.parts) <= np.ceil(train.sum() / k * GROUP_SLACK)
    # vertex weight 1 + in-degree + training (an owned node's in-edges are its
    # partition's edges): the refinement's 1.03x the mean, plus the training nodes the
    # rebalancing moves after it (as test_partition_sparsify's 1.04x)
    weight = [p.owned_nodes + p.edges + p.train_nodes for p in m.parts]
    assert max(weight) <= (1 + IMBALANCE + 0.01) * sum(weight) / k


def test_four_parts_leave_the_recursion_to_metis(caplog: pytest.LogCaptureFixture) -> None:
    # with 4 parts the cluster step still has the other core: METIS recurses by itself,
    # with its default refinement, as before the halves existed
    src, dst, n = generated(flat=False)
    with caplog.at_level(logging.INFO, logger="distgnn.partition"):
        parts = sampled_metis(src, dst, n, 4, None, None, seed=0)
    assert np.bincount(parts, minlength=4).min() > 0
    messages = {r.getMessage() for r in caplog.records}
    assert "bisected" not in messages and "regrouped" in messages
    metis = [r.fields for r in caplog.records if getattr(r, "fields", {}).get("parts") == 4]
    assert any(f.get("routine") == "recursive" and f.get("niter") == 10 for f in metis)
