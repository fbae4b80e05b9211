"""The trainer API on a heterogeneous graph (standalone mode): typed data and typed fanouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distgnn.distributed import DistGraph, DistTensor, sample_neighbors
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.loader import load_partition
from distgnn.partition.partitioner import partition_graph

ETYPES = ["item:bought-by:user", "user:buys:item", "user:follows:user"]  # sorted order
NOFF = {"item": 0, "user": 20}  # node types sorted: item, user


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    bs, bd = rng.integers(0, 30, 80), rng.integers(0, 20, 80)
    fs, fd = rng.integers(0, 30, 50), rng.integers(0, 30, 50)
    w = np.where(np.arange(80) % 2 == 0, 1.0, 0.0).astype(np.float32)
    return {
        "num_nodes/user": np.array(30),
        "num_nodes/item": np.array(20),
        "edges/user:buys:item/src": bs,
        "edges/user:buys:item/dst": bd,
        "edges/item:bought-by:user/src": bd,
        "edges/item:bought-by:user/dst": bs,
        "edges/user:follows:user/src": fs,
        "edges/user:follows:user/dst": fd,
        "ndata/user/x": np.arange(90, dtype=np.float32).reshape(30, 3),
        "ndata/item/y": np.arange(20, dtype=np.int64) * 10,
        "edata/user:buys:item/w": w,
    }


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("hetero")
    g = graph_from_arrays(_arrays(), "test")
    partition_graph(g, 2, str(out), "het", method="random", progress=False)
    return str(out / "het.json")


def test_typed_data_and_typed_sampling(hetero: str) -> None:
    a = _arrays()
    parts = [load_partition(hetero, p) for p in range(2)]
    orig_n = np.concatenate([p.orig_nid for p in parts])
    orig_e = np.concatenate([p.orig_eid for p in parts])
    src_h = np.concatenate(
        [a[f"edges/{e}/src"] + NOFF[e.split(":")[0]] for e in ETYPES]
    )  # original homogeneous edges, types end to end
    dst_h = np.concatenate([a[f"edges/{e}/dst"] + NOFF[e.split(":")[2]] for e in ETYPES])
    with DistGraph.standalone(hetero) as g:
        assert g.ntypes == ["item", "user"] and g.num_nodes("user") == 30
        assert g.num_edges("user:follows:user") == 50 and g.num_edges() == 210
        assert g.canonical_etypes[1] == ("user", "buys", "item")
        book = g.book
        ids = np.arange(30)
        x = g.nodes["user"].data["x"][ids].numpy()
        orig_typed = orig_n[book.to_homogeneous_nids("user", ids)] - NOFF["user"]
        np.testing.assert_array_equal(x, a["ndata/user/x"][orig_typed])
        y = g.nodes["item"].data["y"][np.arange(20)].numpy()
        orig_items = orig_n[book.to_homogeneous_nids("item", np.arange(20))]
        np.testing.assert_array_equal(y, a["ndata/item/y"][orig_items])
        t = DistTensor((30, 2), torch.float32, "h", "ones", part_policy="user", ctx=g)
        t[[4]] = torch.tensor([[5.0, 6.0]])
        assert t[[4, 5]].tolist() == [[5.0, 6.0], [1.0, 1.0]]

        seeds = np.arange(g.num_nodes())
        fan = {"user:buys:item": 2, ("user", "follows", "user"): 1}
        s = sample_neighbors(g, seeds, fan)
        et = s.etype.numpy()
        assert set(np.unique(et)) <= {1, 2}
        np.testing.assert_array_equal(orig_n[s.src.numpy()], src_h[orig_e[s.eid.numpy()]])
        np.testing.assert_array_equal(orig_n[s.dst.numpy()], dst_h[orig_e[s.eid.numpy()]])
        # per (seed, type): min(in-degree of that type, fanout)
        for t_id, f in ((1, 2), (2, 1)):
            d = dst_h[orig_e[s.eid.numpy()[et == t_id]]]
            got = np.bincount(d, minlength=50)
            e = ETYPES[t_id]
            indeg = np.bincount(a[f"edges/{e}/dst"] + NOFF[e.split(":")[2]], minlength=50)
            np.testing.assert_array_equal(got, np.minimum(indeg, f))
        # weights: only even (non-zero weight) buys edges are ever drawn
        w = sample_neighbors(g, seeds, {"user:buys:item": 3}, prob="w")
        assert len(w.eid) > 0
        picked = orig_e[w.eid.numpy()] - 80  # buys edges start at 80 (after bought-by)
        assert ((picked >= 0) & (picked < 80) & (picked % 2 == 0)).all()
