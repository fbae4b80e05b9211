"""DGL's distributed graph-store and tensor tests, ported onto real ``distgnn serve``
processes (``tests/distributed/test_dist_graph_store.py`` and ``test_dist_tensor.py`` of
dmlc/dgl: the behavioural assertions of ``check_dist_graph``, ``check_dist_graph_empty``,
``check_dist_graph_hetero``, ``check_dist_emb``, ``check_dist_optim_store``,
``check_server_client_hierarchy`` and ``test_op``), plus two-trainer checks of what DGL
shares between trainers (unnamed tensors, one combined sparse update per step).

Each ``# [n]`` marks one ported DGL assertion (the counts are in docs/servers.md).
"""

from __future__ import annotations

import json
import operator
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import Servers, running_servers
from trainers import run_trainers

import distgnn.distributed as dd
from distgnn.errors import ConfigError, DistGNNError
from distgnn.graph.io import graph_from_arrays
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType

N = 10000


def rand_init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(np.random.normal(size=shape), dtype=torch.float32)


def rand_mask(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape) > 0


def emb_init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


def _random_graph(n: int) -> dict[str, np.ndarray]:
    """DGL's create_random_graph: density 0.001, with ``features`` = the ID.

    Edges are generated in destination order: DistGNN numbers a partition's edges by
    destination (CSC), so with one partition the IDs stay those of the input, as the
    DGL test expects of its one-partition graph."""
    rng = np.random.default_rng(100)
    m = int(n * n * 0.001)
    src, dst = rng.integers(0, n, m), np.sort(rng.integers(0, n, m))
    tid = (np.arange(n) % 2).astype(np.int64)
    return {
        "src": src,
        "dst": dst,
        "num_nodes": np.array(n),
        "features": np.arange(n, dtype=np.int64).reshape(n, 1),
        "trainer_id": tid,
        "edata/features": np.arange(m, dtype=np.int64).reshape(m, 1),
        "edata/trainer_id": (np.arange(m) % 2).astype(np.int64),
    }


def _random_hetero() -> dict[str, np.ndarray]:
    """DGL's create_random_hetero of the graph-store test (feature fields named like types)."""
    rng = np.random.default_rng(100)
    nn = {"n1": 10000, "n2": 10010, "n3": 10020}
    out: dict[str, np.ndarray] = {f"num_nodes/{t}": np.array(c) for t, c in nn.items()}
    for s, e, d in [("n1", "r1", "n2"), ("n1", "r2", "n3"), ("n2", "r3", "n3")]:
        m = int(nn[s] * nn[d] * 0.001)
        out[f"edges/{s}:{e}:{d}/src"] = rng.integers(0, nn[s], m)
        out[f"edges/{s}:{e}:{d}/dst"] = np.sort(rng.integers(0, nn[d], m))  # see above
    for name in ("feat", "n1"):
        out[f"ndata/n1/{name}"] = np.arange(nn["n1"], dtype=np.int64).reshape(-1, 1)
    m1 = len(out["edges/n1:r1:n2/src"])
    for name in ("feat", "r1"):
        out[f"edata/n1:r1:n2/{name}"] = np.arange(m1, dtype=np.int64).reshape(-1, 1)
    return out


@pytest.fixture(scope="module")
def homo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    out = tmp_path_factory.mktemp("dgl_store")
    dd.partition_graph(graph_from_arrays(_random_graph(N)), "dist_graph_test_1", 1, str(out),
                       part_method="random")  # fmt: skip
    with running_servers(str(out / "dist_graph_test_1.json"), num_parts=1) as s:
        yield s
    assert s.returncodes == [0]


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    out = tmp_path_factory.mktemp("dgl_store_het")
    dd.partition_graph(graph_from_arrays(_random_hetero()), "dist_graph_test_3", 1, str(out),
                       part_method="random")  # fmt: skip
    with running_servers(str(out / "dist_graph_test_3.json"), num_parts=1) as s:
        yield s
    assert s.returncodes == [0]


def _names(g: dd.DistGraph) -> set[str]:
    return set(g.ctx.call(0, Call(MsgType.LIST_TENSORS, {})).meta["tensors"])


def test_check_dist_graph(homo: Servers) -> None:
    """check_dist_graph: 23 assertions."""
    with dd.initialize(servers=homo.addrs, token=homo.token):
        g = dd.DistGraph("dist_graph_test_1")
        num_edges = len(_random_graph(N)["src"])
        assert g.num_nodes() == N  # [1]
        assert g.num_edges() == num_edges  # [2]
        nids = torch.arange(0, int(g.num_nodes() / 2))
        feats = torch.squeeze(g.ndata["features"][nids], 1)
        assert np.all((feats == nids).numpy())  # [3]
        eids = torch.arange(0, int(g.num_edges() / 2))
        feats = torch.squeeze(g.edata["features"][eids], 1)
        assert np.all((feats == eids).numpy())  # [4]
        sg = g.edge_subgraph(eids)
        assert sg.num_edges() == len(eids)  # [5]
        assert torch.equal(sg.edata[dd.EID], eids)  # [6]
        new_shape = (g.num_nodes(), 2)
        test1 = dd.DistTensor(new_shape, torch.int32)
        g.ndata["test1"] = test1
        feats = g.ndata["test1"][nids]
        assert np.all(feats.numpy() == 0)  # [7]
        assert test1.count_nonzero() == 0  # [8]
        test2 = dd.DistTensor(new_shape, torch.float32, "test2", init_func=rand_init)
        test3 = dd.DistTensor(new_shape, torch.float32, "test2")
        assert np.all(test2[nids].numpy() == test3[nids].numpy())  # [9]
        test3 = dd.DistTensor(new_shape, torch.float32, "test3", init_func=rand_init)
        test3_name = test3.kvstore_key
        assert test3_name in _names(g)  # [10]
        assert "test3" in g.ndata  # [11] (DGL: gdata_name_list)
        del test3
        assert test3_name not in _names(g)  # [12]
        assert "test3" not in g.ndata  # [13]
        test3 = dd.DistTensor((g.num_nodes(), 3), torch.float32, "test3")
        del test3
        test3 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        data = test3[0:10]
        test4 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        del test3
        test5 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        assert np.sum((test5[0:10] != data).numpy()) > 0  # [14]
        test4 = dd.DistTensor(new_shape, torch.float32, "test4", init_func=rand_init,
                              persistent=True)  # fmt: skip
        del test4
        with pytest.raises(DistGNNError):
            dd.DistTensor((g.num_nodes(), 3), torch.float32, "test4")  # [15]
        new_feats = torch.ones((len(nids), 2), dtype=torch.int32)
        g.ndata["test1"][nids] = new_feats
        feats = g.ndata["test1"][nids]
        assert np.all(feats.numpy() == 1)  # [16]
        assert len(g.ndata["features"]) == g.num_nodes()  # [17]
        assert g.ndata["features"].shape == (g.num_nodes(), 1)  # [18]
        assert g.ndata["features"].dtype == torch.int64  # [19]
        assert g.node_attr_schemes()["features"].dtype == torch.int64  # [20]
        assert g.node_attr_schemes()["test1"].dtype == torch.int32  # [21]
        assert g.node_attr_schemes()["features"].shape == (1,)  # [22]
        selected_nodes = np.random.randint(0, 100, size=g.num_nodes()) > 30
        nodes = dd.node_split(selected_nodes, g.get_partition_book()).numpy()
        local_nids = np.arange(g.num_nodes())
        assert all(n in local_nids for n in nodes)  # [23]
        del test5


def test_check_dist_graph_empty(homo: Servers) -> None:
    """check_dist_graph_empty (partition book given, as DGL's client does): 5 assertions."""
    dd.initialize(servers=homo.addrs, token=homo.token)
    try:
        gpb, graph_name, _, _ = dd.load_partition_book(homo.manifest_url, 0)
        g = dd.DistGraph(graph_name, gpb=gpb)
        assert g.num_nodes() == N  # [1]
        assert g.num_edges() == len(_random_graph(N)["src"])  # [2]
        new_shape = (g.num_nodes(), 2)
        g.ndata["test1"] = dd.DistTensor(new_shape, torch.int32)
        nids = torch.arange(0, int(g.num_nodes() / 2))
        assert np.all(g.ndata["test1"][nids].numpy() == 0)  # [3]
        test3 = dd.DistTensor(new_shape, torch.float32, "test3", init_func=rand_init)
        del test3
        test3 = dd.DistTensor((g.num_nodes(), 3), torch.float32, "test3")
        del test3
        g.ndata["test1"][nids] = torch.ones((len(nids), 2), dtype=torch.int32)
        assert np.all(g.ndata["test1"][nids].numpy() == 1)  # [4]
        assert g.node_attr_schemes()["test1"].dtype == torch.int32  # [5]
    finally:
        dd.exit_client()


def test_check_dist_graph_hetero(hetero: Servers) -> None:
    """check_dist_graph_hetero: 28 assertions."""
    arrays = _random_hetero()
    num_nodes = {t: int(arrays[f"num_nodes/{t}"]) for t in ("n1", "n2", "n3")}
    num_edges = {e: len(arrays[f"edges/{k}/src"]) for e, k in
                 (("r1", "n1:r1:n2"), ("r2", "n1:r2:n3"), ("r3", "n2:r3:n3"))}  # fmt: skip
    with dd.initialize(servers=hetero.addrs, token=hetero.token):
        g = dd.DistGraph("dist_graph_test_3")
        assert all(t in g.ntypes for t in num_nodes)  # [1]
        assert all(num_nodes[t] == g.num_nodes(t) for t in num_nodes)  # [2]
        assert all(e in g.etypes for e in num_edges)  # [3]
        assert all(num_edges[e] == g.num_edges(e) for e in num_edges)  # [4]
        etypes = [("n1", "r1", "n2"), ("n1", "r2", "n3"), ("n2", "r3", "n3")]
        for i, etype in enumerate(g.canonical_etypes):
            assert etype[0] == etypes[i][0]  # [5]
            assert etype[1] == etypes[i][1]  # [6]
            assert etype[2] == etypes[i][2]  # [7]
        assert g.num_nodes() == sum(num_nodes.values())  # [8]
        assert g.num_edges() == sum(num_edges.values())  # [9]
        nids = torch.arange(0, g.num_nodes("n1") // 2)
        for name in ["feat", "n1"]:
            data = torch.squeeze(g.nodes["n1"].data[name][nids], 1)
            assert np.all((data == nids).numpy())  # [10]
        assert len(g.nodes["n2"].data) == 0  # [11]
        with pytest.raises(ConfigError):
            g.nodes["xxx"].data["x"]  # [12]
        eids = torch.arange(0, g.num_edges("r1") // 2)
        for name in ["feat", "r1"]:
            data = torch.squeeze(g.edges["r1"].data[name][eids], 1)
            assert np.all((data == eids).numpy())  # [13]
            c_etype = g.to_canonical_etype("r1")
            data = torch.squeeze(g.edges[c_etype].data[name][eids], 1)
            assert np.all((data == eids).numpy())  # [14]
        assert len(g.edges["r2"].data) == 0  # [15]
        with pytest.raises(ConfigError):
            g.edges["xxx"].data["x"]  # [16]
        sg = g.edge_subgraph({"r1": eids})
        assert sg.num_edges() == len(eids)  # [17]
        assert torch.equal(sg.edata[dd.EID][("n1", "r1", "n2")], eids)  # [18]
        sg = g.edge_subgraph({("n1", "r1", "n2"): eids})
        assert sg.num_edges() == len(eids)  # [19]
        assert torch.equal(sg.edata[dd.EID][("n1", "r1", "n2")], eids)  # [20]
        new_shape = (g.num_nodes("n1"), 2)
        g.nodes["n1"].data["test1"] = dd.DistTensor(new_shape, torch.int32)
        assert np.all(g.nodes["n1"].data["test1"][nids].numpy() == 0)  # [21]
        test3 = dd.DistTensor(new_shape, torch.float32, "test3", init_func=rand_init)
        del test3
        test3 = dd.DistTensor((g.num_nodes("n1"), 3), torch.float32, "test3")
        del test3
        test3 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        data = test3[0:10]
        test4 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        del test3
        test5 = dd.DistTensor(new_shape, torch.float32, init_func=rand_init)
        assert np.sum((test5[0:10] != data).numpy()) > 0  # [22]
        test4 = dd.DistTensor(new_shape, torch.float32, "test4", init_func=rand_init,
                              persistent=True)  # fmt: skip
        del test4
        with pytest.raises(DistGNNError):
            dd.DistTensor((g.num_nodes("n1"), 3), torch.float32, "test4")  # [23]
        g.nodes["n1"].data["test1"][nids] = torch.ones((len(nids), 2), dtype=torch.int32)
        assert np.all(g.nodes["n1"].data["test1"][nids].numpy() == 1)  # [24]
        assert len(g.nodes["n1"].data["feat"]) == g.num_nodes("n1")  # [25]
        assert g.nodes["n1"].data["feat"].shape == (g.num_nodes("n1"), 1)  # [26]
        assert g.nodes["n1"].data["feat"].dtype == torch.int64  # [27]
        selected = np.random.randint(0, 100, size=g.num_nodes("n1")) > 30
        nodes = dd.node_split(selected, g.get_partition_book(), ntype="n1").numpy()
        assert np.isin(nodes, np.arange(g.num_nodes("n1"))).all()  # [28]
        del test5


def test_check_dist_emb(homo: Servers) -> None:
    """check_dist_emb with one client: 9 assertions."""
    with dd.initialize(servers=homo.addrs, token=homo.token):
        g = dd.DistGraph("dist_graph_test_1")
        emb = dd.DistEmbedding(g.num_nodes(), 1, "emb1", emb_init)
        nids = torch.arange(0, int(g.num_nodes()))
        lr = 0.001
        optimizer = dd.SparseAdagrad([emb], lr=lr)
        feats = emb(nids)
        assert np.all(feats.detach().numpy() == np.zeros((len(nids), 1)))  # [1]
        loss = torch.sum(feats + 1, 0)
        loss.backward()
        optimizer.step()
        feats = emb(nids)
        np.testing.assert_almost_equal(feats.detach().numpy(), np.ones((len(nids), 1)) * -lr)  # [2]
        rest = np.setdiff1d(np.arange(g.num_nodes()), nids.numpy())
        assert np.all(emb(rest).detach().numpy() == 0)  # [3] (rest is empty, as in DGL)
        policy = dd.PartitionPolicy("node", g.get_partition_book())
        grad_sum = dd.DistTensor((g.num_nodes(), 1), torch.float32, "emb1_sum", part_policy=policy)
        assert np.all(grad_sum[nids].numpy() == np.ones((len(nids), 1)))  # [4]
        assert np.all(grad_sum[rest].numpy() == 0)  # [5]
        emb = dd.DistEmbedding(g.num_nodes(), 1, "emb2", emb_init)
        with torch.no_grad():
            feats1 = emb(nids)
        assert np.all(feats1.numpy() == 0)  # [6]
        optimizer = dd.SparseAdagrad([emb], lr=lr)
        feats1 = emb(nids)
        feats2 = emb(nids)
        feats = torch.cat([feats1, feats2], 0)
        assert np.all(feats.detach().numpy() == 0)  # [7]
        torch.sum(feats + 1, 0).backward()
        optimizer.step()
        with torch.no_grad():
            feats = emb(nids)
        np.testing.assert_almost_equal(feats.numpy(), np.ones((len(nids), 1)) * -lr)  # [8]
        assert np.all(emb(rest).detach().numpy() == 0)  # [9]


def test_check_server_client_hierarchy(homo: Servers) -> None:
    """check_server_client_hierarchy (trainer IDs, 2 trainers): 2 assertions."""
    with dd.initialize(servers=homo.addrs, token=homo.token):
        g = dd.DistGraph("dist_graph_test_1")
        rng = np.random.default_rng(7)
        node_mask = np.zeros(g.num_nodes(), np.int32)
        edge_mask = np.zeros(g.num_edges(), np.int32)
        nodes = np.sort(rng.choice(g.num_nodes(), g.num_nodes() // 10, replace=False))
        edges = np.sort(rng.choice(g.num_edges(), g.num_edges() // 10, replace=False))
        node_mask[nodes] = 1
        edge_mask[edges] = 1
        got_n, got_e = [], []
        for rank in range(2):
            got_n.append(dd.node_split(torch.from_numpy(node_mask), g.get_partition_book(),
                                       rank=rank, world_size=2,
                                       node_trainer_ids=g.ndata["trainer_id"]))  # fmt: skip
            got_e.append(dd.edge_split(torch.from_numpy(edge_mask), g.get_partition_book(),
                                       rank=rank, world_size=2,
                                       edge_trainer_ids=g.edata["trainer_id"]))  # fmt: skip
        assert np.all(torch.sort(torch.cat(got_n)).values.numpy() == nodes)  # [1]
        assert np.all(torch.sort(torch.cat(got_e)).values.numpy() == edges)  # [2]


def test_dist_tensor_op(homo: Servers) -> None:
    """test_dist_tensor.py::test_op (the int32-index rejection is not ported): 1 assertion."""
    with dd.initialize(servers=homo.addrs, token=homo.token):
        g = dd.DistGraph("dist_graph_test_1")
        g.edata["mask1"] = dd.DistTensor((g.num_edges(),), torch.bool, init_func=rand_mask)
        g.edata["mask2"] = dd.DistTensor((g.num_edges(),), torch.bool, init_func=rand_mask)
        g.edata["mask3"] = g.edata["mask1"] | g.edata["mask2"]
        for i in range(0, g.num_edges(), 20000):
            end = min(i + 20000, g.num_edges())
            want = operator.or_(g.edata["mask1"][i:end], g.edata["mask2"][i:end])
            assert torch.equal(g.edata["mask3"][i:end], want)  # [1]


TRAINER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import torch
    import distgnn.distributed as dd

    mode, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    res = {}
    dd.initialize()
    g = dd.DistGraph()
    n = g.num_nodes()
    if mode == "shared":
        # DGL's guide: every trainer creates the same unnamed tensor
        t = dd.DistTensor((n, 2), torch.float32,
                          init_func=lambda s, d: torch.randn(s, dtype=d))
        res["name"], res["key"] = t.name, t.kvstore_key
        res["init"] = t[np.arange(5)].tolist()
        g.barrier()
        if rank == 0:
            t[np.arange(10)] = torch.full((10, 2), 7.0)
        g.barrier()
        res["seen"] = t[np.arange(10)].tolist()
        del t
        g.barrier()
        from distgnn.rpc.client import Call
        from distgnn.rpc.protocol import MsgType
        names = g.ctx.call(0, Call(MsgType.LIST_TENSORS, {})).meta["tensors"]
        res["left"] = res["key"] in names
    else:
        torch.distributed.init_process_group("gloo")
        emb = dd.DistEmbedding(n, 1, "shared_emb")
        opt = dd.SparseAdagrad([emb], lr=0.1)
        row = torch.tensor([5])
        # step 1: both trainers use row 5 (grads 1 and 3): one update with the mean, 2
        (emb(row) * (1.0 if rank == 0 else 3.0)).sum().backward()
        opt.step()
        # step 2: trainer 0 uses row 5 (grad 2), trainer 1 only row 6 (grad 1)
        used = row if rank == 0 else torch.tensor([6])
        (emb(used) * (2.0 if rank == 0 else 1.0)).sum().backward()
        opt.step()
        res["rows"] = emb.weight[[5, 6]].flatten().tolist()
        res["state"] = opt._state["shared_emb"][[5, 6]].flatten().tolist()
        opt.save(out + ".opt")
        torch.distributed.destroy_process_group()
    dd.exit_client()
    with open(f"{out}.{rank}.json", "w") as f:
        json.dump(res, f)
    """
)


def _run(srv: Servers, tmp_path: Path, mode: str, world: int = 2) -> list[dict]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    out = tmp_path / mode
    argv = [[sys.executable, str(script), mode, str(out)]] * world
    r = run_trainers([], world, srv.env(), tmp_path, per_rank_argv=argv, timeout=240)
    assert r.returncodes == [0] * world, r.explain()
    return [json.loads((tmp_path / f"{mode}.{k}.json").read_text()) for k in range(world)]


def test_unnamed_tensor_is_shared_by_trainers_and_freed_on_del(homo: Servers,
                                                               tmp_path: Path) -> None:  # fmt: skip
    a, b = _run(homo, tmp_path, "shared")
    assert a["name"] == b["name"] and a["name"].startswith("anonymous-")
    assert a["init"] == b["init"]  # one tensor, initialised once
    assert b["seen"] == [[7.0, 7.0]] * 10  # trainer 1 reads what trainer 0 wrote
    assert a["left"] is False and b["left"] is False  # `del` on both trainers freed it


def test_sparse_update_combines_the_trainers_gradients(homo: Servers, tmp_path: Path) -> None:
    a, b = _run(homo, tmp_path, "optim")
    # row 5: mean(1, 3) = 2 -> s=4, x=-0.1; then 2 -> s=8, x=-0.1-0.2/sqrt(8) = -0.1707
    # row 6: 1 -> s=1, x=-0.1. (Separate per-trainer updates would give -0.2480 for row 5.)
    want = [-0.1 - 0.2 / np.sqrt(8.0), -0.1]
    np.testing.assert_allclose(a["rows"], want, rtol=1e-5)
    assert a["rows"] == b["rows"]
    np.testing.assert_allclose(a["state"], [8.0, 1.0])
    # save(f) wrote one file per trainer; one trainer now loads both (DGL's scale-in)
    with dd.initialize(servers=homo.addrs, token=homo.token):
        emb = dd.DistEmbedding(N, 1, "shared_emb")
        opt = dd.SparseAdagrad([emb], lr=0.5, eps=1e-3)
        opt.load(tmp_path / "optim.opt")
        np.testing.assert_allclose(opt._state["shared_emb"][[5, 6]].flatten().numpy(),
                                   [8.0, 1.0])  # fmt: skip
        assert opt._lr == 0.1 and opt._eps == 1e-10
