"""Partitions together reproduce the input graph exactly (edges and data under original IDs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.graph.data import etype_str
from distgnn.graph.io import graph_from_arrays, load_graph
from distgnn.partition.book import PartitionBook
from distgnn.partition.loader import load_manifest, load_partition
from distgnn.partition.partitioner import partition_graph


def hetero_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """2 node types, 3 edge types (two share the destination type), node and edge data."""
    rng = np.random.default_rng(seed)
    nu, ni = 60, 40
    out: dict[str, np.ndarray] = {
        "num_nodes/user": np.int64(nu),
        "num_nodes/item": np.int64(ni),
        "ndata/user/feat": rng.random((nu, 4), dtype=np.float32),
        "ndata/user/train_mask": rng.random(nu) < 0.3,
        "ndata/item/label": rng.integers(0, 5, ni),
    }
    for et, (ns, nd, m) in {
        "user:follows:user": (nu, nu, 200),
        "user:buys:item": (nu, ni, 150),
        "item:similar:item": (ni, ni, 80),
    }.items():
        out[f"edges/{et}/src"] = rng.integers(0, ns, m)
        out[f"edges/{et}/dst"] = rng.integers(0, nd, m)
        out[f"edata/{et}/w"] = rng.random(m, dtype=np.float32)
    return out


def reassemble(url: str) -> dict[str, object]:
    """Check every partition and rebuild the graph under original IDs."""
    m = load_manifest(url)
    parts = [load_partition(url, p) for p in range(m.num_parts)]
    new2orig = np.concatenate([p.orig_nid for p in parts])
    new2orig_e = np.concatenate([p.orig_eid for p in parts])
    src, dst, eids = [], [], []
    for p in parts:
        l2g = p.local2global
        dloc = np.repeat(np.arange(p.num_local_nodes), np.diff(p.indptr))
        own = p.num_owned_edges
        # owned edges first; their destinations are owned nodes
        assert dloc[:own].max(initial=0) < p.num_owned_nodes
        assert np.array_equal(np.sort(p.eid[:own]), p.book.partid2eids(p.part_id))
        src.append(new2orig[l2g[p.indices[:own]]])
        dst.append(new2orig[l2g[dloc[:own]]])
        eids.append(new2orig_e[p.eid[:own]])
        # halo nodes are really not owned
        assert not np.any(p.book.nid2partid(p.halo_nid) == p.part_id)
    return {
        "m": m,
        "parts": parts,
        "src": np.concatenate(src),
        "dst": np.concatenate(dst),
        "eid": np.concatenate(eids),
        "new2orig": new2orig,
        "new2orig_e": new2orig_e,
    }


@pytest.mark.parametrize("method", ["metis", "metis-full", "random"])
def test_homogeneous_roundtrip(cora_path: Path, tmp_path: Path, method: str) -> None:
    g = load_graph(str(cora_path))
    partition_graph(g, 3, str(tmp_path), "cora", method=method, progress=False)
    r = reassemble(str(tmp_path / "cora.json"))
    assert sorted(r["eid"].tolist()) == list(range(g.num_edges))  # type: ignore[union-attr]
    e = r["eid"]
    assert np.array_equal(g.src[e], r["src"]) and np.array_equal(g.dst[e], r["dst"])
    assert np.array_equal(np.sort(r["new2orig"]), np.arange(g.num_nodes))  # type: ignore[arg-type]
    for p in r["parts"]:  # type: ignore[attr-defined]
        for name, arr in g.node_data["_N"].items():
            assert np.array_equal(p.node_data["_N"][name], arr[p.orig_nid]), name
        assert np.array_equal(p.eid[: p.num_owned_edges], p.book.partid2eids(p.part_id))


def test_hetero_roundtrip(tmp_path: Path) -> None:
    g = graph_from_arrays(hetero_arrays())
    m = partition_graph(g, 3, str(tmp_path), "h", progress=False)
    assert m.node_types == ["item", "user"]
    r = reassemble(str(tmp_path / "h.json"))
    e = r["eid"]
    assert sorted(e.tolist()) == list(range(g.num_edges))  # type: ignore[union-attr]
    assert np.array_equal(g.src[e], r["src"]) and np.array_equal(g.dst[e], r["dst"])
    book = PartitionBook(m)
    offs, eoffs = g.ntype_offsets, g.etype_offsets
    for p in r["parts"]:  # type: ignore[attr-defined]
        gids = book.partid2nids(p.part_id)
        tids, tw = book.map_nids(gids)
        assert np.array_equal(book.to_homogeneous_nids("user", tw[tids == 1]), gids[tids == 1])
        for t, ntype in enumerate(g.node_types):
            orig = p.orig_nid[tids == t] - offs[t]
            for name, arr in g.node_data[ntype].items():
                assert np.array_equal(p.node_data[ntype][name], arr[orig])
        # every local edge's type matches its global edge's type; edge data by type-wise row
        own = p.num_owned_edges
        et_ids, et_tw = book.map_eids(p.eid[:own])
        assert np.array_equal(et_ids, p.etype[:own])
        for t, et in enumerate(g.edge_types):
            name = etype_str(et)
            sel = et_ids == t
            rows = et_tw[sel] - book.etype_offsets(name)[p.part_id]
            orig = r["new2orig_e"][p.eid[:own][sel]] - eoffs[t]  # type: ignore[index]
            assert np.array_equal(p.edge_data[name]["w"][rows], g.edge_data[name]["w"][orig])


def test_halo_two_hops(cora_path: Path, tmp_path: Path) -> None:
    g = load_graph(str(cora_path))
    m1 = partition_graph(g, 2, str(tmp_path / "a"), "c", progress=False)
    m2 = partition_graph(g, 2, str(tmp_path / "b"), "c", halo_hops=2, progress=False)
    p1 = load_partition(str(tmp_path / "a" / "c.json"), 0)
    p2 = load_partition(str(tmp_path / "b" / "c.json"), 0)
    assert m2.parts[0].halo_nodes > m1.parts[0].halo_nodes
    assert set(p1.halo_nid.tolist()) < set(p2.halo_nid.tolist())
    # in-edges of 1-hop halo nodes follow the owned edges, and are true graph edges
    own = p2.num_owned_edges
    assert p2.indices.shape[0] > own
    l2g = p2.local2global
    dloc = np.repeat(np.arange(p2.num_local_nodes), np.diff(p2.indptr))
    n2o = np.concatenate(
        [load_partition(str(tmp_path / "b" / "c.json"), i).orig_nid for i in range(2)]
    )
    e2o = np.concatenate(
        [load_partition(str(tmp_path / "b" / "c.json"), i).orig_eid for i in range(2)]
    )
    extra = slice(own, None)
    assert np.all(np.isin(l2g[dloc[extra]], p1.halo_nid))
    oe = e2o[p2.eid[extra]]
    assert np.array_equal(g.src[oe], n2o[l2g[p2.indices[extra]]])
    assert np.array_equal(g.dst[oe], n2o[l2g[dloc[extra]]])
