"""METIS on an edge sample of dense graphs, refined on the full graph (``method="metis"``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_partition_roundtrip import reassemble

from distgnn.cli import main as cli_main
from distgnn.graph.io import graph_from_arrays
from distgnn.partition import sparsify
from distgnn.partition.loader import load_manifest
from distgnn.partition.partitioner import partition_graph
from distgnn.partition.refine import GROUP_SLACK, IMBALANCE, refine_boundary
from distgnn.partition.sampled import OVERFIT, representative
from distgnn.partition.sparsify import keep_fraction, sample_edges


def community_graph(
    n: int, communities: int, degree: int, inside: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Flat communities (the model METIS coarsens worst): each edge stays in its source's
    community with probability ``inside``, else goes anywhere; no self-loops."""
    rng = np.random.default_rng(seed)
    e = n * degree // 2
    comm = rng.integers(0, communities, n)
    members = [np.flatnonzero(comm == c) for c in range(communities)]
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    local = rng.random(e) < inside
    for c in range(communities):
        sel = np.flatnonzero(local & (comm[src] == c))
        dst[sel] = members[c][rng.integers(0, members[c].shape[0], sel.shape[0])]
    keep = src != dst
    return src[keep], dst[keep]


def cut(parts: np.ndarray, src: np.ndarray, dst: np.ndarray) -> int:
    return int(np.count_nonzero(parts[src] != parts[dst]))


def test_keep_fraction_samples_only_large_dense_graphs() -> None:
    big = sparsify.MIN_EDGES
    assert keep_fraction(0, 0) == 1.0
    assert keep_fraction(big, big) == 1.0  # 2 edge ends per node: sparse
    assert keep_fraction(1000, big // 2) == 1.0  # dense but small
    n = big // 8  # 24 edge ends per node, as the benchmark graphs
    assert keep_fraction(n, 12 * n) == pytest.approx(sparsify.TARGET_DEGREE / 24)


def test_sample_edges_is_a_seeded_uniform_subset(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    e = (1 << 22) + 12345  # more than one block
    src, dst = rng.integers(0, 1000, e), np.arange(e)
    np.save(tmp_path / "src.npy", src)
    mapped = np.load(tmp_path / "src.npy", mmap_mode="r")
    s1, d1 = sample_edges(mapped, dst, 0.3, seed=4)
    s2, d2 = sample_edges(src, dst, 0.3, seed=4)
    _, d3 = sample_edges(src, dst, 0.3, seed=5)
    assert np.array_equal(s1, s2) and np.array_equal(d1, d2)  # seeded, mapped or not
    assert not np.array_equal(d1, d3)
    assert abs(d1.shape[0] / e - 0.3) < 0.002
    assert np.all(np.diff(d1) > 0) and np.array_equal(src[d1], s1)  # edges, in input order
    full_s, _ = sample_edges(src, dst, 1.0)
    assert full_s.shape[0] == e


def test_refine_recovers_a_planted_bisection() -> None:
    n = 4000
    src, dst = community_graph(n, 2, 20, 0.95, seed=3)
    planted = np.zeros(n, np.int64)
    # the two communities of community_graph(seed=3) are its first rng draw
    planted[np.random.default_rng(3).integers(0, 2, n) == 1] = 1
    noisy = planted.copy()
    flip = np.random.default_rng(9).choice(n, n // 10, replace=False)
    noisy[flip] = 1 - noisy[flip]
    res = refine_boundary(noisy, src, dst, 2)
    assert cut(res.parts, src, dst) <= cut(planted, src, dst) * 1.02
    assert cut(noisy, src, dst) - cut(res.parts, src, dst) >= res.gain > 0
    assert res.cut_before == cut(noisy, src, dst) and res.moved >= n // 12
    assert np.bincount(res.parts, minlength=2).max() <= (1 + IMBALANCE) * n / 2


@pytest.mark.parametrize(("k", "seed"), [(2, 0), (3, 1), (4, 2), (8, 3)])
def test_refine_never_raises_the_cut_and_keeps_the_bounds(k: int, seed: int) -> None:
    n = 3000
    src, dst = community_graph(n, 2 * k, 16, 0.8, seed=seed)
    rng = np.random.default_rng(seed)
    start = rng.integers(0, k, n)
    vw = 1 + np.bincount(dst, minlength=n)
    group = rng.random(n) < 0.2
    res = refine_boundary(start, src, dst, k, vw, group)
    assert cut(res.parts, src, dst) <= cut(start, src, dst) - res.gain
    load = np.bincount(res.parts, weights=vw, minlength=k)
    before = np.bincount(start, weights=vw, minlength=k)
    cap = (1 + IMBALANCE) * vw.sum() / k
    assert np.all(load <= np.maximum(before, cap))  # nothing moved into a full part
    gcount = np.bincount(res.parts[group], minlength=k)
    gbefore = np.bincount(start[group], minlength=k)
    gcap = np.ceil(group.sum() / k * GROUP_SLACK)
    assert np.all(gcount <= np.maximum(gbefore, gcap))


def test_refine_counts_pairs_linked_both_ways_and_ignores_self_loops() -> None:
    # 0-1 linked both ways, 1-2 once, 2 has a self-loop, 3 alone; parts 0 | 1 2 3
    src, dst = np.array([0, 1, 1, 2]), np.array([1, 0, 2, 2])
    res = refine_boundary(np.array([0, 1, 1, 1]), src, dst, 2, max_passes=2)
    # 0 -> 1 would gain 2 but overload part 1 (4 nodes > 1.03 x 2); moving 1 to part 0
    # gains 2 (both 0-1 edges) and loses 1 (1-2): it moves, 2 (self-loop only) does not
    assert res.parts.tolist() == [0, 0, 1, 1] and res.gain == 1 and res.cut_before == 2


@pytest.mark.parametrize(("balance", "k"), [(False, 4), (True, 2), (True, 4)])
def test_dense_graph_metis_on_a_sample_cuts_like_full_metis(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, balance: bool, k: int
) -> None:
    n = 16000
    src, dst = community_graph(n, 16, 40, 0.8, seed=7)
    assert keep_fraction(n, src.shape[0]) < 0.5  # this graph is sampled
    train = np.random.default_rng(0).random(n) < 0.1
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n), "train_mask": train})
    kw = {"balance_train": balance, "balance_edges": balance, "progress": False}
    with caplog.at_level("INFO", logger="distgnn.partition"):
        sampled = partition_graph(g, k, str(tmp_path / "s"), "g", **kw)  # type: ignore[arg-type]
    steps = {getattr(r, "fields", {}).get("step") for r in caplog.records}
    assert "sample edges" in steps and "refine" in steps
    # up to 8 parts: METIS bisects the sample recursively, and the clusters of the
    # regrouping come from a 16-way call on the core
    calls = {
        (r.fields["routine"], r.fields["parts"])
        for r in caplog.records
        if "routine" in getattr(r, "fields", {})
    }
    assert calls == {("recursive", k), ("kway", 16)}
    assert "regroup" in steps
    caplog.clear()
    with caplog.at_level("INFO", logger="distgnn.partition"):
        full = partition_graph(g, k, str(tmp_path / "f"), "g", method="metis-full", **kw)  # type: ignore[arg-type]
    steps = {getattr(r, "fields", {}).get("step") for r in caplog.records}
    assert "sample edges" not in steps and "refine" not in steps
    assert full.options.method == "metis-full" and sampled.options.method == "metis"
    # the flat communities are found: both cut about 15/16 of the 20 % random edges
    assert sampled.edge_cut <= full.edge_cut * 1.02
    r = reassemble(str(tmp_path / "s" / "g.json"))  # valid partitions: every edge once
    e = r["eid"]
    assert sorted(e.tolist()) == list(range(src.shape[0]))  # type: ignore[union-attr]
    assert np.array_equal(src[e], r["src"]) and np.array_equal(dst[e], r["dst"])
    owned = [p.owned_nodes for p in sampled.parts]
    if balance:
        counts = [p.train_nodes for p in sampled.parts]
        assert max(counts) <= np.ceil(train.sum() / k * 1.02)
        edges = [p.edges for p in sampled.parts]
        assert max(edges) <= 1.04 * src.shape[0] / k
    else:
        assert max(owned) <= (1 + IMBALANCE) * n / k + 1


def test_cli_method_metis_full(tmp_path: Path) -> None:
    n = 16000
    src, dst = community_graph(n, 16, 40, 0.8, seed=8)
    np.savez(tmp_path / "g.npz", src=src, dst=dst, num_nodes=np.int64(n))
    args = ["partition", str(tmp_path / "g.npz"), "--num-parts", "2", "--out", str(tmp_path)]
    assert cli_main([*args, "--name", "f", "--method", "metis-full"]) == 0
    assert cli_main([*args, "--name", "s"]) == 0
    full, sampled = load_manifest(str(tmp_path / "f.json")), load_manifest(str(tmp_path / "s.json"))
    assert (full.options.method, sampled.options.method) == ("metis-full", "metis")
    assert sampled.edge_cut <= full.edge_cut * 1.02
    with pytest.raises(SystemExit) as exc:  # argparse: usage line, exit 2
        cli_main([*args, "--name", "x", "--method", "metis-sampled"])
    assert exc.value.code == 2


def test_representative_compares_the_cut_fractions() -> None:
    # the sample cut 10 % of its 1000 edges; all edges: 12 % passes, 2x that does not
    assert representative(1200, 10_000, 100, 1000)
    assert not representative(int(10_000 * 0.1 * OVERFIT) + 10, 10_000, 100, 1000)
    assert representative(5, 10_000, 0, 1000)  # a tiny cut passes whatever the ratio
    assert not representative(500, 10_000, 0, 1000)
    assert representative(0, 0, 0, 0)


def test_a_sample_too_sparse_for_the_structure_falls_back_to_every_edge(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 16 communities keeping only 30 % of a 160-degree graph's edges: at 8 edge ends per
    # node the sample hides them (METIS on it + refinement: 1.2x the cut)
    n = 16000
    src, dst = community_graph(n, 16, 160, 0.3, seed=2)
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n)})
    with caplog.at_level("INFO", logger="distgnn.partition"):
        m = partition_graph(g, 4, str(tmp_path / "s"), "g", progress=False)
    assert any("every edge" in r.getMessage() for r in caplog.records)
    steps = {getattr(r, "fields", {}).get("step") for r in caplog.records}
    assert "sample edges" in steps and "refine" not in steps
    full = partition_graph(g, 4, str(tmp_path / "f"), "g", method="metis-full", progress=False)
    assert m.edge_cut == full.edge_cut and m.node_offsets == full.node_offsets
