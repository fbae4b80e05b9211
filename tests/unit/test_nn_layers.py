"""GNN layers on blocks: shapes, gradients and values against hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distgnn.nn import GAT, GATConv, GraphSAGE, RelGraphConv, SAGEConv, to_pyg_edge_index
from distgnn.sampling import LocalGraph, NeighborSampler, to_block


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
    conv = SAGEConv(5, 3)
    out = conv(b, h)
    mean0 = (h[2] + h[3]) / 2
    mean1 = (h[0] + h[2]) / 2
    want = conv.fc_self(h[:2]) + conv.fc_neigh(torch.stack([mean0, mean1]))
    assert torch.allclose(out, want, atol=1e-5)


def test_sage_conv_isolated_destination_gets_self_only() -> None:
    b = to_block(np.array([1, 2]), np.array([3]), np.array([1]), np.array([0]))
    conv = SAGEConv(4, 2)
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


def test_relgraphconv_normalises_per_relation() -> None:
    torch.manual_seed(0)
    b = small_block()
    conv = RelGraphConv(3, 2, num_rels=2, self_loop=False, bias=False)
    h = torch.randn(4, 3)
    out = conv(b, h)
    w = conv.rel_weights()
    want0 = h[2] @ w[0] + h[3] @ w[1]  # one edge of each relation: norm 1 each
    want1 = (h[0] @ w[0] + h[2] @ w[0]) / 2
    assert torch.allclose(out, torch.stack([want0, want1]), atol=1e-5)
    basis = RelGraphConv(3, 2, num_rels=4, num_bases=2)
    assert basis.rel_weights().shape == (4, 3, 2)


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
