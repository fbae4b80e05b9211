"""DGL's distributed sampling and partition tests, ported onto real ``distgnn serve``
processes (dmlc/dgl ``tests/distributed/test_distributed_sampling.py``: the checks of
``check_rpc_sampling_shuffle``, ``check_rpc_find_edges_shuffle``,
``check_rpc_hetero_find_edges_shuffle``, ``check_rpc_get_degree_shuffle``,
``check_rpc_hetero_sampling_shuffle``, ``..._empty_shuffle``,
``check_rpc_hetero_etype_sampling_shuffle``, ``..._empty_shuffle``,
``check_rpc_bipartite_sampling_empty`` / ``_shuffle``; and ``test_partition.py``'s
partition-book and feature checks). DGL checks hetero samples through ``dgl.to_block``;
here the frontier's typed ``edges(etype=...)`` and ``edata[EID]`` are checked directly.

Each ``# [n]`` marks one ported DGL assertion.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from servers import Servers, running_servers

import distgnn.distributed as dd
from distgnn.errors import ConfigError
from distgnn.graph.io import graph_from_arrays

SEEDS = [0, 10, 99, 66, 1024, 2008]


def _pairs(src: np.ndarray, dst: np.ndarray) -> dict[tuple[int, int], int]:
    return {(int(s), int(d)): i for i, (s, d) in enumerate(zip(src, dst, strict=True))}


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("dgl_sampling")
    mapping = dd.partition_graph(str(cora_path), "test_sampling", 2, str(out), num_hops=1,
                                 part_method="metis", return_mapping=True)  # fmt: skip
    assert mapping is not None
    with running_servers(str(out / "test_sampling.json"), num_parts=2) as s:
        yield {"srv": s, "orig_nid": mapping[0], "orig_eid": mapping[1], "data": np.load(cora_path)}
    assert s.returncodes == [0, 0]


def _hetero(dense: bool = False, empty: bool = False) -> dict[str, np.ndarray]:
    """DGL's create_random_hetero of the sampling test."""
    nn = {"n1": 210, "n2": 200, "n3": 220} if dense else {"n1": 1010, "n2": 1000, "n3": 1020}
    rng = np.random.default_rng(42)
    out: dict[str, np.ndarray] = {f"num_nodes/{t}": np.array(c) for t, c in nn.items()}
    for s, e, d in [("n1", "r12", "n2"), ("n1", "r13", "n3"), ("n2", "r23", "n3")]:
        ns, nd = (nn[s] - 10, nn[d] - 10) if empty else (nn[s], nn[d])
        m = int(ns * nd * (0.1 if dense else 0.001))
        flat = rng.choice(ns * nd, m, replace=False)
        out[f"edges/{s}:{e}:{d}/src"] = flat // nd
        out[f"edges/{s}:{e}:{d}/dst"] = flat % nd
    out["ndata/n1/feat"] = np.ones((nn["n1"], 10), np.float32)
    return out


def _serve_hetero(tmp: Path, arrays: dict[str, np.ndarray], name: str) -> Any:
    mapping = dd.partition_graph(graph_from_arrays(arrays), name, 2, str(tmp),
                                 part_method="random", return_mapping=True)  # fmt: skip
    return mapping, running_servers(str(tmp / f"{name}.json"), num_parts=2)


@pytest.mark.parametrize("replace", [False, True])
def test_rpc_sampling_shuffle(cora: dict[str, Any], replace: bool) -> None:
    """start_sample_client_shuffle: 7 assertions (x2)."""
    srv: Servers = cora["srv"]
    data, orig_nid, orig_eid = cora["data"], cora["orig_nid"], cora["orig_eid"]
    edges = _pairs(data["src"], data["dst"])
    indeg = np.bincount(data["dst"], minlength=len(data["feat"]))
    with dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        seeds = torch.from_numpy(np.argsort(orig_nid.numpy())[SEEDS])  # DGL's seed nodes
        sg = dd.sample_neighbors(g, seeds, 3, replace=replace)
        assert sg.idtype == g.idtype  # [1]
        assert sg.idtype == torch.int64  # [2]
        assert "_TYPE" not in sg.edata  # [3]
        src, dst = sg.edges()
        sampled_in = sg.in_degrees(dst)
        osrc, odst = orig_nid[src].numpy(), orig_nid[dst].numpy()
        assert sg.num_nodes() == len(data["feat"])  # [4]
        assert all((s, d) in edges for s, d in zip(osrc, odst, strict=True))  # [5]
        eids = np.array([edges[(s, d)] for s, d in zip(osrc, odst, strict=True)])
        assert np.array_equal(orig_eid[sg.edata[dd.EID]].numpy(), eids)  # [6]
        orig_in = torch.from_numpy(indeg[odst])
        if replace:
            assert torch.all((sampled_in == 3) | (sampled_in == orig_in))  # [7]
        else:
            assert torch.all(sampled_in <= 3)  # [7]


def test_rpc_find_edges_shuffle(cora: dict[str, Any]) -> None:
    """check_rpc_find_edges_shuffle: 2 assertions."""
    srv: Servers = cora["srv"]
    data, orig_nid, orig_eid = cora["data"], cora["orig_nid"], cora["orig_eid"]
    eids = torch.from_numpy(np.random.randint(len(data["src"]), size=100))
    u, v = data["src"][orig_eid[eids]], data["dst"][orig_eid[eids]]
    with dd.initialize(servers=srv.addrs, token=srv.token):
        du, dv = dd.DistGraph("test_sampling").find_edges(eids)
    assert np.array_equal(u, orig_nid[du].numpy())  # [1]
    assert np.array_equal(v, orig_nid[dv].numpy())  # [2]


def test_rpc_get_degree_shuffle(cora: dict[str, Any]) -> None:
    """check_rpc_get_degree_shuffle: 4 assertions."""
    srv: Servers = cora["srv"]
    data, orig_nid = cora["data"], cora["orig_nid"].numpy()
    n = len(data["feat"])
    indeg, outdeg = np.bincount(data["dst"], minlength=n), np.bincount(data["src"], minlength=n)
    nids = torch.from_numpy(np.random.randint(n, size=100))
    with dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        assert np.array_equal(indeg[orig_nid[nids]], g.in_degrees(nids).numpy())  # [1]
        assert np.array_equal(indeg[orig_nid], g.in_degrees().numpy())  # [2]
        assert np.array_equal(outdeg[orig_nid[nids]], g.out_degrees(nids).numpy())  # [3]
        assert np.array_equal(outdeg[orig_nid], g.out_degrees().numpy())  # [4]


def test_partition_book_and_features(cora: dict[str, Any]) -> None:
    """test_partition.py's partition-book and feature checks on a served graph: 9 assertions."""
    srv: Servers = cora["srv"]
    data, orig_nid = cora["data"], cora["orig_nid"]
    gpb, name, ntypes, etypes = dd.load_partition_book(srv.manifest_url, 1)
    # [1]: DGL 2.1 keys edge types by canonical tuple (bench/dgl_differential.py)
    assert (name, ntypes, etypes) == ("test_sampling", {"_N": 0}, {("_N", "_E", "_N"): 0})
    assert gpb.num_partitions() == 2 and gpb.partid == 1  # [2]
    md = gpb.metadata()
    assert sum(m["num_nodes"] for m in md) == len(data["feat"])  # [3]
    assert sum(m["num_edges"] for m in md) == len(data["src"])  # [4]
    for p in range(2):
        assert torch.all(gpb.nid2partid(gpb.partid2nids(p)) == p)  # [5]
        assert torch.all(gpb.eid2partid(gpb.partid2eids(p)) == p)  # [6]
    part, nfeat, _efeat, gpb0, _, _, _ = dd.load_partition(srv.manifest_url, 0)
    own = gpb0.partid2nids(0)
    assert part.num_owned_nodes == md[0]["num_nodes"]  # [7]
    np.testing.assert_array_equal(nfeat["_N/feat"].numpy(), data["feat"][orig_nid[own]])  # [8]
    with dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        ids = torch.arange(len(data["feat"]))
        np.testing.assert_array_equal(
            g.ndata["label"][ids].numpy(), data["label"][orig_nid]
        )  # [9] fmt: skip


def test_rpc_hetero_find_edges_and_sampling_shuffle(tmp_path: Path) -> None:
    """check_rpc_hetero_find_edges_shuffle (5) and check_rpc_hetero_sampling_shuffle
    (3 feature checks, then 3 per edge type): 11 assertions."""
    arrays = _hetero()
    (nmap, emap), servers = _serve_hetero(tmp_path, arrays, "test_find_edges")
    with servers as srv, dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_find_edges")
        c = g.to_canonical_etype("r12")
        eids = torch.from_numpy(np.random.randint(g.num_edges(c), size=100))
        with pytest.raises(ConfigError):
            g.find_edges(eids, etype=("n1", "r12"))  # type: ignore[arg-type]  # [1]
        u, v = g.find_edges(eids, etype="r12")
        u1, v1 = g.find_edges(eids, etype=("n1", "r12", "n2"))
        assert torch.equal(u, u1)  # [2]
        assert torch.equal(v, v1)  # [3]
        oe = emap[c][eids].numpy()
        assert np.array_equal(arrays["edges/n1:r12:n2/src"][oe], nmap["n1"][u].numpy())  # [4]
        assert np.array_equal(arrays["edges/n1:r12:n2/dst"][oe], nmap["n2"][v].numpy())  # [5]
        assert "feat" in g.nodes["n1"].data  # [6]
        assert "feat" not in g.nodes["n2"].data  # [7]
        assert "feat" not in g.nodes["n3"].data  # [8]
        seeds = {"n3": torch.from_numpy(np.argsort(nmap["n3"].numpy())[[0, 10, 99, 66, 124, 208]])}
        sg = dd.sample_neighbors(g, seeds, 3)
        for c_etype in sg.canonical_etypes:
            s_t, et, d_t = c_etype
            src, dst = sg.edges(etype=et)
            osrc, odst = nmap[s_t][src].numpy(), nmap[d_t][dst].numpy()
            pairs = _pairs(arrays[f"edges/{s_t}:{et}:{d_t}/src"],
                           arrays[f"edges/{s_t}:{et}:{d_t}/dst"])  # fmt: skip
            assert all((a, b) in pairs for a, b in zip(osrc, odst, strict=True))  # [9]
            if not len(src):
                continue
            oe = emap[c_etype][sg.edata[dd.EID][c_etype]].numpy()
            assert np.all(arrays[f"edges/{s_t}:{et}:{d_t}/src"][oe] == osrc)  # [10]
            assert np.all(arrays[f"edges/{s_t}:{et}:{d_t}/dst"][oe] == odst)  # [11]


def _in_degree_free(arrays: dict[str, np.ndarray], ntype: str, n: int) -> np.ndarray:
    deg = np.zeros(n, np.int64)
    for k, a in arrays.items():
        if k.startswith("edges/") and k.endswith("/dst") and k.split("/")[1].endswith(ntype):
            deg += np.bincount(a, minlength=n)
        if k.startswith("edges/") and k.endswith("/src") and k.split("/")[1].startswith(ntype):
            deg += np.bincount(a, minlength=n)
    return np.flatnonzero(deg == 0)


def test_rpc_hetero_sampling_empty_and_etype_sampling(tmp_path: Path) -> None:
    """check_rpc_hetero_sampling_empty_shuffle (2), check_rpc_hetero_etype_sampling_shuffle
    (2 counts + 3 per edge type), check_rpc_hetero_etype_sampling_empty_shuffle (2): 9."""
    empty = _hetero(empty=True)
    (nmap, _), servers = _serve_hetero(tmp_path / "e", empty, "test_sampling")
    with servers as srv, dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        free = _in_degree_free(empty, "n3", 1020)
        new = torch.from_numpy(np.argsort(nmap["n3"].numpy())[free])
        sg = dd.sample_neighbors(g, {"n3": new}, 3)
        assert sg.num_edges() == 0  # [1]
        assert len(sg.etypes) == len(g.etypes)  # [2]
        sg = dd.sample_etype_neighbors(g, {"n3": new}, 3)
        assert sg.num_edges() == 0  # [3]
        assert len(sg.etypes) == len(g.etypes)  # [4]
    dense = _hetero(dense=True)
    (nmap, emap), servers = _serve_hetero(tmp_path / "d", dense, "test_sampling")
    with servers as srv, dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        seeds = {"n3": torch.from_numpy(np.argsort(nmap["n3"].numpy())[[0, 10, 99, 66, 124, 208]])}
        sg = dd.sample_etype_neighbors(g, seeds, {c: 3 for c in g.canonical_etypes})
        src, _ = sg.edges(etype=("n1", "r13", "n3"))
        assert len(src) == 18  # [5]
        src, _ = sg.edges(etype=("n2", "r23", "n3"))
        assert len(src) == 18  # [6]
        for c_etype in sg.canonical_etypes:
            s_t, et, d_t = c_etype
            src, dst = sg.edges(etype=et)
            osrc, odst = nmap[s_t][src].numpy(), nmap[d_t][dst].numpy()
            pairs = _pairs(dense[f"edges/{s_t}:{et}:{d_t}/src"],
                           dense[f"edges/{s_t}:{et}:{d_t}/dst"])  # fmt: skip
            assert all((a, b) in pairs for a, b in zip(osrc, odst, strict=True))  # [7]
            if not len(src):
                continue
            oe = emap[c_etype][sg.edata[dd.EID][c_etype]].numpy()
            assert np.all(dense[f"edges/{s_t}:{et}:{d_t}/src"][oe] == osrc)  # [8]
            assert np.all(dense[f"edges/{s_t}:{et}:{d_t}/dst"][oe] == odst)  # [9]


def test_rpc_bipartite_sampling(tmp_path: Path) -> None:
    """check_rpc_bipartite_sampling_empty (2 + 2 feature checks) and _shuffle (3): 7."""
    rng = np.random.default_rng(0)
    flat = rng.choice(500 * 1000, 1000, replace=False)
    arrays = {
        "num_nodes/user": np.array(500),
        "num_nodes/game": np.array(1000),
        "edges/user:buys:game/src": flat // 1000,
        "edges/user:buys:game/dst": flat % 1000,
        "ndata/user/feat": np.ones((500, 10), np.float32),
        "ndata/game/feat": np.ones((1000, 10), np.float32),
    }
    (nmap, emap), servers = _serve_hetero(tmp_path, arrays, "test_sampling")
    with servers as srv, dd.initialize(servers=srv.addrs, token=srv.token):
        g = dd.DistGraph("test_sampling")
        assert "feat" in g.nodes["user"].data  # [1]
        assert "feat" in g.nodes["game"].data  # [2]
        order = np.argsort(nmap["game"].numpy())
        deg = np.bincount(arrays["edges/user:buys:game/dst"], minlength=1000)
        empty = {"game": torch.from_numpy(order[deg == 0]), "user": torch.tensor([1])}
        sg = dd.sample_neighbors(g, empty, 3)
        assert sg.num_edges() == 0  # [3]
        assert len(sg.etypes) == 1  # [4]
        full = {"game": torch.from_numpy(order[deg > 0]), "user": torch.tensor([0])}
        sg = dd.sample_neighbors(g, full, 3)
        src, dst = sg.edges(etype="buys")
        osrc, odst = nmap["user"][src].numpy(), nmap["game"][dst].numpy()
        pairs = _pairs(arrays["edges/user:buys:game/src"], arrays["edges/user:buys:game/dst"])
        assert all((a, b) in pairs for a, b in zip(osrc, odst, strict=True))  # [5]
        oe = emap[("user", "buys", "game")][sg.edata[dd.EID][("user", "buys", "game")]].numpy()
        assert np.all(arrays["edges/user:buys:game/src"][oe] == osrc)  # [6]
        assert np.all(arrays["edges/user:buys:game/dst"][oe] == odst)  # [7]
