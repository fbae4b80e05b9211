"""``distgnn.dataloading`` on a heterogeneous graph (standalone DistGraph): dict seeds,
typed blocks, per-type fanouts, the job's sampler processes, DGL-style edge loaders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import distgnn as dgl
from distgnn.dataloading import (
    DistEdgeDataLoader,
    DistNodeDataLoader,
    MultiLayerFullNeighborSampler,
    MultiLayerNeighborSampler,
    NeighborSampler,
    as_edge_prediction_sampler,
    negative_sampler,
)
from distgnn.distributed import DistDataLoader, DistGraph
from distgnn.errors import ConfigError
from distgnn.graph.io import graph_from_arrays
from distgnn.nn import HeteroGraphConv, SAGEConv
from distgnn.partition.partitioner import partition_graph


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    bs, bd = rng.integers(0, 30, 80), rng.integers(0, 20, 80)
    fs, fd = rng.integers(0, 30, 120), rng.integers(0, 30, 120)
    return {
        "num_nodes/user": np.array(30),
        "num_nodes/item": np.array(20),
        "edges/user:buys:item/src": bs,
        "edges/user:buys:item/dst": bd,
        "edges/item:bought-by:user/src": bd,
        "edges/item:bought-by:user/dst": bs,
        "edges/user:follows:user/src": fs,
        "edges/user:follows:user/dst": fd,
        "ndata/user/x": rng.random((30, 3)).astype(np.float32),
        "ndata/item/x": rng.random((20, 3)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def hetero(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("hetero-dl")
    partition_graph(graph_from_arrays(_arrays(), "t"), 2, str(out), "het", progress=False)
    return str(out / "het.json")


def _homo_edges(g: DistGraph) -> set[tuple[int, int, int]]:
    """(src, dst, homogeneous eid) of every edge."""
    eids = np.arange(g.num_edges())
    s, d = g._find_homo(eids)
    return set(zip(s.tolist(), d.tolist(), eids.tolist(), strict=True))


def test_dict_seeds_give_typed_blocks(hetero: str) -> None:
    with DistGraph.standalone(hetero) as g:
        book = g.get_partition_book()
        edges = _homo_edges(g)
        seeds = torch.arange(0, 30, 2)
        fan = {"follows": 2, "bought-by": 1, ("user", "buys", "item"): 3}
        loader = DistNodeDataLoader(
            g, {"user": seeds}, NeighborSampler([fan, fan]), batch_size=4, shuffle=True
        )
        got = []
        for inp, out, blocks in loader:
            assert set(out) == {"user"}  # DGL's: the seeds' types only
            assert blocks[-1].num_dst_nodes("item") == 0
            got.append(out["user"])
            assert torch.equal(blocks[-1].dstdata[dgl.NID]["user"], out["user"])
            for k in ("item", "user"):
                assert torch.equal(blocks[0].srcdata[dgl.NID][k], inp[k])
            assert blocks[0].srctypes == ["item", "user"]
            for b in blocks:
                for cet in b.canonical_etypes:
                    rel = b[cet]
                    s_typed = rel.src_nid[rel.edge_src]
                    d_typed = rel.dst_nid[rel.edge_dst]
                    homo_e = book.map_to_homo_eid(rel.eid, cet).numpy()
                    s_h = book.map_to_homo_nid(s_typed, cet[0]).numpy()
                    d_h = book.map_to_homo_nid(d_typed, cet[2]).numpy()
                    for trip in zip(s_h.tolist(), d_h.tolist(), homo_e.tolist(), strict=True):
                        assert trip in edges  # typed indices point at real edges
                    k = {"follows": 2, "bought-by": 1, "buys": 3}[cet[1]]
                    if rel.num_edges():
                        assert np.bincount(rel.edge_dst).max() <= k  # per-type fanout
                assert b.num_dst_nodes("user") + b.num_dst_nodes("item") == b.num_dst_nodes()
        assert sorted(torch.cat(got).tolist()) == seeds.tolist()


def test_typed_blocks_feed_heterographconv(hetero: str) -> None:
    torch.manual_seed(0)
    with DistGraph.standalone(hetero) as g:
        rels = ["bought-by", "buys", "follows"]
        layers = [
            HeteroGraphConv({r: SAGEConv(3, 4, "mean") for r in rels}),
            HeteroGraphConv({r: SAGEConv(4, 2, "mean") for r in rels}),
        ]
        loader = DistNodeDataLoader(
            g, {"user": np.arange(30)}, MultiLayerFullNeighborSampler(2), batch_size=30
        )
        inp, _out, blocks = next(iter(loader))
        h = {t: g.nodes[t].data["x"][inp[t]] for t in inp}
        for layer, b in zip(layers, blocks, strict=True):
            h = layer(b, h)
        assert set(h) == {"user"} and h["user"].shape == (30, 2)
        h["user"].sum().backward()
        assert layers[0].mods["follows"].fc_neigh.weight.grad is not None


def test_tensor_seeds_on_typed_graph_need_a_dict(hetero: str) -> None:
    with DistGraph.standalone(hetero) as g, pytest.raises(ConfigError, match="dict"):
        DistNodeDataLoader(g, torch.arange(5), NeighborSampler([2]))


def test_job_num_samplers_is_honoured(hetero: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DISTGNN_NUM_SAMPLERS (the job's numSamplers) starts sampler processes for a
    user's own loader, with the batches the trainer would have sampled itself."""
    monkeypatch.setenv("DISTGNN_MANIFEST", hetero)
    monkeypatch.setenv("DISTGNN_NUM_SAMPLERS", "2")
    with DistGraph.standalone(hetero) as g:
        sampler = MultiLayerNeighborSampler([2, 2])
        seeds = {"user": np.arange(30)}
        with DistNodeDataLoader(g, seeds, sampler, batch_size=7, seed=1) as par:
            assert par.num_samplers == 2 and len(par._engine._procs) == 2
            got = [(o["user"], [b.eid for b in bl]) for _, o, bl in par]
        ref_loader = DistNodeDataLoader(g, seeds, sampler, batch_size=7, seed=1, num_samplers=0)
        ref = [(o["user"], [b.eid for b in bl]) for _, o, bl in ref_loader]
        assert len(got) == len(ref) == 5
        for (o1, e1), (o2, e2) in zip(got, ref, strict=True):
            assert torch.equal(o1, o2)
            assert all(np.array_equal(a, b) for a, b in zip(e1, e2, strict=True))
    monkeypatch.setenv("DISTGNN_NUM_SAMPLERS", "many")
    with DistGraph.standalone(hetero) as g, pytest.raises(ConfigError, match="NUM_SAMPLERS"):
        DistNodeDataLoader(g, seeds, sampler)


def test_edge_loader_dgl_style(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n, m = 60, 300
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    np.savez(tmp_path / "g.npz", src=s, dst=d, feat=rng.random((n, 2)).astype(np.float32))
    partition_graph(str(tmp_path / "g.npz"), 2, str(tmp_path / "p"), "g", progress=False)
    with DistGraph.standalone(str(tmp_path / "p" / "g.json")) as g:
        eids = torch.arange(0, g.num_edges(), 3)
        rev = torch.arange(g.num_edges()).roll(1)  # any reverse map: edge e -> e - 1
        sampler = as_edge_prediction_sampler(
            NeighborSampler([-1]),
            exclude="reverse_id",
            reverse_eids=rev,
            negative_sampler=negative_sampler.Uniform(2),
        )
        loader = DistEdgeDataLoader(g, eids, sampler, batch_size=16, shuffle=True)
        seen = []
        for _inp, pos, neg, blocks in loader:
            seed_e = pos.edata[dgl.EID]
            seen.append(seed_e)
            assert neg.num_edges() == 2 * pos.num_edges()
            banned = torch.cat([seed_e, rev[seed_e]])
            assert not torch.isin(blocks[0].edata[dgl.EID], banned).any()
            h = torch.randn(pos.num_nodes(), 4)
            with pos.local_scope():
                pos.ndata["h"] = h
                pos.apply_edges(dgl.function.u_dot_v("h", "h", "score"))
                score = pos.edata["score"]
            ps, pd = pos.edges()
            assert torch.allclose(score[:, 0], (h[ps] * h[pd]).sum(1))
            assert "score" not in pos.edata and "h" not in pos.ndata  # local scope
        assert sorted(torch.cat(seen).tolist()) == eids.tolist()
        plain = DistEdgeDataLoader(g, eids, NeighborSampler([2]), batch_size=50)
        assert all(len(batch) == 3 for batch in plain)  # no negative sampler: 3-tuples
        with pytest.raises(ConfigError, match="negative_sampler"):
            DistEdgeDataLoader(g, eids, NeighborSampler([2]), negative_sampler=lambda g, e: e)


def test_dist_data_loader_over_a_dataset() -> None:
    torch.manual_seed(0)
    data = list(range(10))
    loader = DistDataLoader(data, batch_size=4, shuffle=True, collate_fn=sum)
    assert len(loader) == 3
    assert sum(loader) == sum(data)
    batches = list(DistDataLoader(torch.arange(10), 4, drop_last=True))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ConfigError, match="batch_size"):
        DistDataLoader(data, 0)


def test_dgl_private_client_and_saving_a_dist_tensor(hetero: str, tmp_path: Path) -> None:
    """DGL's examples call ``g._client.barrier()`` and ``th.save(dist_tensor)``: the first
    works, the second says what to save instead (not 'cannot pickle socket')."""
    with DistGraph.standalone(hetero) as g:
        g._client.barrier()
        t = dgl.distributed.DistTensor((30, 2), torch.float32, "saved", part_policy="user", ctx=g)
        with pytest.raises(ConfigError, match=r"t\[ids\]"):
            torch.save(t, tmp_path / "t.pt")
        torch.save(t[np.arange(30)], tmp_path / "t.pt")
        assert torch.load(tmp_path / "t.pt").shape == (30, 2)


def test_seeds_of_two_types_keep_dgl_order(hetero: str) -> None:
    """Destination nodes of every type come first among that type's sources, in the
    order of ``output_nodes`` (what HeteroGraphConv's ``h[:num_dst_nodes(t)]`` relies on)."""
    with DistGraph.standalone(hetero) as g:
        seeds = {"user": torch.tensor([5, 1, 7]), "item": torch.tensor([3, 0])}
        loader = DistNodeDataLoader(
            g, seeds, NeighborSampler([-1, -1]), device="cpu", batch_size=5, shuffle=True
        )
        ((_inp, out, blocks),) = list(loader)
        assert sorted(out["user"].tolist()) == [1, 5, 7] and sorted(out["item"].tolist()) == [0, 3]
        for t in ("user", "item"):
            assert torch.equal(blocks[-1].dstdata[dgl.NID][t], out[t])
            for b in blocks:
                n = b.num_dst_nodes(t)
                assert torch.equal(b.srcdata[dgl.NID][t][:n], b.dstdata[dgl.NID][t])
            assert torch.equal(blocks[0].dstdata[dgl.NID][t], blocks[1].srcdata[dgl.NID][t])
        assert all(b.device == torch.device("cpu") for b in blocks)


def test_typed_output_nodes_hold_the_batch_seed_types_only(hetero: str) -> None:
    """DGL groups a batch's seeds by type: ``output_nodes`` has a key per type that has
    seeds in the batch (``input_nodes`` one per node type, as the first block's sources)."""
    with DistGraph.standalone(hetero) as g:
        seeds = {"user": torch.tensor([5, 1, 7]), "item": torch.tensor([3, 0])}
        loader = DistNodeDataLoader(g, seeds, NeighborSampler([2]), batch_size=3)
        batches = list(loader)
        assert [sorted(out) for _, out, _ in batches] == [["user"], ["item"]]
        for inp, out, (block,) in batches:
            assert sorted(inp) == sorted(g.ntypes)
            assert all(torch.equal(block.dstdata[dgl.NID][t], v) for t, v in out.items())
            assert all(block.num_dst_nodes(t) == 0 for t in g.ntypes if t not in out)


def test_edge_loader_on_a_typed_graph(hetero: str) -> None:
    """Dict edge seeds: typed blocks and pair graphs by edge type; negatives pair each
    source with nodes of the edge's destination type (DGL's Uniform)."""
    with DistGraph.standalone(hetero) as g:
        book = g.get_partition_book()
        buys = ("user", "buys", "item")
        seeds = torch.arange(0, g.num_edges(buys), 2)
        loader = DistEdgeDataLoader(
            g,
            {"buys": seeds},
            NeighborSampler([2, 2]),
            batch_size=10,
            shuffle=True,
            negative_sampler=negative_sampler.Uniform(3),
            exclude="self",
        )
        seen = []
        for inp, pos, neg, blocks in loader:
            assert set(inp) == {"item", "user"} and pos.canonical_etypes == [buys]
            e = pos.edata[dgl.EID][buys]
            seen.append(e)
            dst_ids = blocks[-1].dstdata[dgl.NID]
            ps, pd = pos.edges(etype="buys")
            real_s, real_d = g.find_edges(e, etype=buys)  # type-wise node IDs
            assert torch.equal(dst_ids["user"][ps], real_s)
            assert torch.equal(dst_ids["item"][pd], real_d)
            ns, nd = neg.edges(etype=buys)
            assert neg.num_edges() == 3 * pos.num_edges()
            assert torch.equal(dst_ids["user"][ns], real_s.repeat_interleave(3))
            assert int(nd.max()) < pos.num_nodes("item")  # items, never users
            homo_seed = book.map_to_homo_eid(e, buys)
            for b in blocks:  # exclude="self": seed edges are not among the sampled ones
                for cet in b.canonical_etypes:
                    if cet == buys:
                        rel_e = book.map_to_homo_eid(torch.from_numpy(b[cet].eid), cet)
                        assert not torch.isin(rel_e, homo_seed).any()
            h = {
                "user": torch.randn(pos.num_nodes("user"), 4),
                "item": torch.randn(pos.num_nodes("item"), 4),
            }
            with neg.local_scope():
                neg.ndata["h"] = h
                neg.apply_edges(dgl.function.u_dot_v("h", "h", "s"))
                s = neg.edata["s"][buys]
            assert torch.allclose(s[:, 0], (h["user"][ns] * h["item"][nd]).sum(1))
            assert "s" not in neg.edata
        assert sorted(torch.cat(seen).tolist()) == seeds.tolist()
        with pytest.raises(ConfigError, match="dict etype"):
            DistEdgeDataLoader(g, seeds, NeighborSampler([2]))


def test_dgl_dropped_loader_keywords_are_accepted_others_refused(
    hetero: str, caplog: pytest.LogCaptureFixture
) -> None:
    """DGL 2.1's distributed loaders drop ``num_workers`` and ``pin_memory`` and refuse
    other DataLoader keywords; a DGL script passing them runs unchanged, the same batches."""
    seeds = {"user": torch.arange(0, 12)}
    with DistGraph.standalone(hetero) as g, caplog.at_level("INFO", "distgnn.dataloading"):
        plain = DistNodeDataLoader(g, seeds, NeighborSampler([2]), batch_size=4, seed=3)
        kept = DistNodeDataLoader(
            g, seeds, NeighborSampler([2]), batch_size=4, seed=3, num_workers=2, pin_memory=True
        )
        assert kept.num_samplers == plain.num_samplers == 0
        assert [o["user"].tolist() for _i, o, _b in kept] == [
            o["user"].tolist() for _i, o, _b in plain
        ]
        with pytest.raises(TypeError, match="use_ddp"):
            DistNodeDataLoader(g, seeds, NeighborSampler([2]), use_ddp=True)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="persistent_workers"):
            DistEdgeDataLoader(g, {"follows": [0]}, NeighborSampler([2]), persistent_workers=True)  # type: ignore[call-arg]
    assert "num_workers=2 ignored" in caplog.text and "pin_memory ignored" in caplog.text
