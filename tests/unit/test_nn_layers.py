"""GNN layers on blocks: shapes, gradients and values against hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distgnn.errors import ConfigError
from distgnn.nn import (
    GAT,
    GATConv,
    GraphConv,
    GraphSAGE,
    HeteroGraphConv,
    RelGraphConv,
    SAGEConv,
    WeightBasis,
    to_pyg_edge_index,
)
from distgnn.sampling import BlockTypes, LocalGraph, NeighborSampler, to_block


def small_block() -> tuple:
    # dst nodes 10, 20; sources 10, 20, 30, 40
    return to_block(
        np.array([10, 20]),
        src=np.array([30, 40, 10, 30]),
        dst=np.array([10, 10, 20, 20]),
        eid=np.arange(4),
        etype=np.array([0, 1, 0, 0]),
    )


def test_sage_conv_is_self_plus_neighbour_mean() -> None:
    torch.manual_seed(0)
    b = small_block()
    h = torch.randn(4, 5)  # rows follow b.src_nid = [10, 20, 30, 40]
    conv = SAGEConv(5, 3, "mean")
    out = conv(b, h)
    mean0 = (h[2] + h[3]) / 2
    mean1 = (h[0] + h[2]) / 2
    want = conv.fc_self(h[:2]) + conv.fc_neigh(torch.stack([mean0, mean1]))
    assert torch.allclose(out, want, atol=1e-5)


def test_sage_conv_isolated_destination_gets_self_only() -> None:
    b = to_block(np.array([1, 2]), np.array([3]), np.array([1]), np.array([0]))
    conv = SAGEConv(4, 2, "mean")
    h = torch.randn(3, 4)
    out = conv(b, h)
    assert torch.allclose(out[1], conv.fc_self(h[1]), atol=1e-6)


def test_gat_single_neighbour_has_attention_one() -> None:
    torch.manual_seed(0)
    b = to_block(np.array([0, 1]), np.array([2, 3, 2]), np.array([0, 1, 1]), np.arange(3))
    conv = GATConv(6, 4, num_heads=2)
    h = torch.randn(4, 6)
    out = conv(b, h)
    assert out.shape == (2, 2, 4)
    feat = conv.fc(h).view(-1, 2, 4)
    assert torch.allclose(out[0], feat[2] + conv.bias.view(2, 4), atol=1e-5)
    # node 1 averages sources 3 and 2 with weights that sum to one: a convex combination
    lo = torch.minimum(feat[2], feat[3]) - 1e-5
    hi = torch.maximum(feat[2], feat[3]) + 1e-5
    o = out[1] - conv.bias.view(2, 4)
    assert torch.all(o >= lo) and torch.all(o <= hi)


def test_relgraphconv_sums_relation_messages_as_dgl() -> None:
    torch.manual_seed(0)
    b = small_block()
    conv = RelGraphConv(3, 2, num_rels=2, self_loop=False, bias=False)
    h = torch.randn(4, 3)
    out = conv(b, h, b.edata["_TYPE"])
    w = conv.rel_weights()
    want0 = h[2] @ w[0] + h[3] @ w[1]
    want1 = h[0] @ w[0] + h[2] @ w[0]  # summed (DGL), not averaged
    assert torch.allclose(out, torch.stack([want0, want1]), atol=1e-5)
    norm = torch.tensor([[1.0], [1.0], [0.5], [0.5]])
    assert torch.allclose(conv(b, h, b.edata["_TYPE"], norm)[1], want1 / 2, atol=1e-5)
    looped = RelGraphConv(3, 2, num_rels=2, self_loop=True, bias=False)
    base = looped(b, h, b.edata["_TYPE"]) - h[:2] @ looped.loop_weight
    assert torch.allclose(
        base[0], h[2] @ looped.rel_weights()[0] + h[3] @ looped.rel_weights()[1], atol=1e-5
    )
    basis = RelGraphConv(3, 2, num_rels=4, regularizer="basis", num_bases=2)
    assert basis.rel_weights().shape == (4, 3, 2) and basis.coeff is not None
    bdd = RelGraphConv(4, 4, num_rels=3, regularizer="bdd", num_bases=2)
    w = bdd.rel_weights()
    assert w.shape == (3, 4, 4) and torch.all(w[:, :2, 2:] == 0)  # block-diagonal
    with pytest.raises(ConfigError, match="regularizer"):
        RelGraphConv(3, 2, 2, regularizer="bases")


def test_sage_aggregators_are_each_real() -> None:
    """pool is a max over projected neighbours, gcn includes the node itself, lstm is
    order-aware: each differs from mean (a silent 'pool -> mean' would fail here)."""
    torch.manual_seed(0)
    b = small_block()
    h = torch.randn(4, 3)
    pool = SAGEConv(3, 2, "pool")
    p = torch.relu(pool.fc_pool(h))
    neigh = torch.stack([torch.maximum(p[2], p[3]), torch.maximum(p[0], p[2])])
    want = pool.fc_self(h[:2]) + pool.fc_neigh(neigh) + pool.bias
    assert torch.allclose(pool(b, h), want, atol=1e-5)
    gcn = SAGEConv(3, 2, "gcn")
    agg = torch.stack([(h[2] + h[3] + h[0]) / 3, (h[0] + h[2] + h[1]) / 3])
    assert torch.allclose(gcn(b, h), gcn.fc_neigh(agg) + gcn.bias, atol=1e-5)
    assert not hasattr(gcn, "fc_self")
    lstm = SAGEConv(3, 2, "lstm")
    _, (hn, _) = lstm.lstm(torch.stack([h[2], h[3]]).unsqueeze(0))
    out = lstm(b, h)
    assert torch.allclose(
        out[0], lstm.fc_self(h[0]) + lstm.fc_neigh(hn[-1, 0]) + lstm.bias, atol=1e-5
    )
    mean = SAGEConv(3, 2, "mean")
    for other in (pool, gcn, lstm):
        assert type(other.fc_neigh) is type(mean.fc_neigh)
    with pytest.raises(ConfigError, match="aggregator_type"):
        SAGEConv(3, 2, "sum")
    with pytest.raises(TypeError):
        SAGEConv(3, 2)  # type: ignore[call-arg]  # DGL: the aggregator is required


def test_layers_take_src_dst_pairs() -> None:
    torch.manual_seed(0)
    b = small_block()
    h = torch.randn(4, 3)
    for conv in (SAGEConv(3, 2, "mean"), GraphConv(3, 2), GATConv(3, 2, num_heads=2)):
        whole = conv(b, h)
        paired = conv(b, (h, h[: b.number_of_dst_nodes()]))
        assert torch.allclose(whole, paired, atol=1e-6)
    bip = SAGEConv((3, 5), 2, "mean")
    assert bip(b, (h, torch.randn(2, 5))).shape == (2, 2)


def test_graphconv_norms_and_external_weight() -> None:
    b = small_block()
    h = torch.randn(4, 3)
    right = GraphConv(3, 2, norm="right", weight=False, bias=False)
    w = torch.randn(3, 2)
    out = right(b, h, weight=w)
    assert torch.allclose(out[1], ((h[0] + h[2]) / 2) @ w, atol=1e-5)
    none = GraphConv(3, 3, norm="none", weight=False, bias=False)
    assert torch.allclose(none(b, h)[0], h[2] + h[3], atol=1e-6)
    both = GraphConv(3, 3, norm="both", weight=False, bias=False)
    # out-degrees inside the block: node 2 (h[2]) sends 2 edges, node 3 one
    assert torch.allclose(both(b, h)[0], (h[2] / 2**0.5 + h[3]) / 2**0.5, atol=1e-5)
    with pytest.raises(ConfigError, match="external weight"):
        GraphConv(3, 2)(b, h, weight=w)
    iso = to_block(np.array([1, 2]), np.array([3]), np.array([1]), np.array([0]))
    with pytest.raises(ConfigError, match="0-in-degree"):
        GraphConv(3, 2)(iso, torch.randn(3, 3))
    assert GraphConv(3, 2, allow_zero_in_degree=True)(iso, torch.randn(3, 3)).shape == (2, 2)


def typed_block() -> object:
    """Paper/author block: dst papers 0, 1 (homogeneous 0, 1); sources add author 10."""
    b = to_block(
        np.array([0, 1]),
        src=np.array([1, 10, 10, 0]),
        dst=np.array([0, 0, 1, 1]),
        eid=np.arange(4),
        etype=np.array([0, 1, 1, 0]),
    )
    b.types = BlockTypes(
        ("author", "paper"), (("paper", "cites", "paper"), ("author", "writes", "paper"))
    )
    b.src_type = np.array([1, 1, 0])  # src_nid = [0, 1, 10]
    b.src_tid = np.array([0, 1, 0])
    b.etid = np.array([0, 0, 1, 1])
    return b


def test_typed_block_views_and_heterographconv() -> None:
    torch.manual_seed(0)
    b = typed_block()
    assert b.num_dst_nodes("paper") == 2 and b.num_dst_nodes("author") == 0
    assert b.num_src_nodes("author") == 1
    assert b.srcdata["_ID"]["author"].tolist() == [0]
    assert b.dstdata["_ID"]["paper"].tolist() == [0, 1]
    rel = b["writes"]
    assert rel.num_src_nodes() == 1 and rel.num_dst_nodes() == 2 and rel.num_edges() == 2
    assert rel.edata["_ID"].tolist() == [0, 1]
    conv = HeteroGraphConv(
        {r: GraphConv(3, 2, norm="right", weight=False, bias=False) for r in ("cites", "writes")}
    )
    x = {"paper": torch.randn(2, 3), "author": torch.randn(1, 3)}
    w = {"cites": torch.eye(3)[:, :2], "writes": 2 * torch.eye(3)[:, :2]}
    out = conv(b, x, mod_kwargs={k: {"weight": v} for k, v in w.items()})
    assert set(out) == {"paper"}  # no author destinations: no author output
    p, a = x["paper"][:, :2], x["author"][:, :2]
    assert torch.allclose(out["paper"][0], p[1] + 2 * a[0], atol=1e-5)
    assert torch.allclose(out["paper"][1], p[0] + 2 * a[0], atol=1e-5)
    stacked = HeteroGraphConv({"cites": GraphConv(3, 2), "writes": GraphConv(3, 2)}, "stack")
    assert stacked(b, x)["paper"].shape == (2, 2, 2)


def test_weight_basis() -> None:
    wb = WeightBasis((3, 2), 2, 5)
    w = wb()
    assert w.shape == (5, 3, 2)
    assert torch.allclose(w[4], wb.w_comp[4, 0] * wb.weight[0] + wb.w_comp[4, 1] * wb.weight[1])


@pytest.mark.parametrize("model_cls", [GraphSAGE, GAT])
def test_models_on_sampled_blocks_train(model_cls: type) -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    g = LocalGraph(rng.integers(0, 50, 300), rng.integers(0, 50, 300), 50)
    x_all = torch.randn(50, 8)
    y_all = (x_all[:, 0] > 0).long()
    model = model_cls(8, 16, 2, num_layers=2, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    sampler = NeighborSampler([4, 4])
    losses = []
    for step in range(30):
        inp, out, blocks = sampler.sample_blocks(
            g.one_hop(np.random.default_rng(step)), np.arange(50)
        )
        logits = model(blocks, x_all[inp])
        assert logits.shape == (50, 2)
        loss = torch.nn.functional.cross_entropy(logits, y_all[out])
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.7


def test_to_pyg_edge_index() -> None:
    b = small_block()
    ei, size = to_pyg_edge_index(b)
    assert size == (4, 2)
    assert ei.shape == (2, 4) and ei.dtype == torch.int64
    assert np.array_equal(b.src_nid[ei[0].numpy()], [30, 40, 10, 30])
    assert np.array_equal(b.dst_nid[ei[1].numpy()], [10, 10, 20, 20])
