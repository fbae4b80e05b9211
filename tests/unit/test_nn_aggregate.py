"""The fused sparse (CSR) mean aggregation and the dropout mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distgnn.nn import GraphSAGE
from distgnn.nn.ops import MeanAdjacency, dropout, mean_aggregate, relu_dropout, scatter_mean
from distgnn.sampling.blocks import to_block


def _edges(n_src: int, n_dst: int, n_e: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_src, n_e), rng.integers(0, n_dst, n_e)


@pytest.mark.parametrize("dim", [1, 7, 64])
def test_mean_aggregate_matches_scatter_mean_and_its_gradient(dim: int) -> None:
    src, dst = _edges(50, 20, 300)
    dst[dst == 3] = 4  # destination 3 has no in-edge: zeros, no NaN
    adj = MeanAdjacency(src, dst, 50, 20)
    h1 = torch.randn(50, dim, dtype=torch.float64, requires_grad=True)
    h2 = h1.detach().clone().requires_grad_(True)
    s, d = torch.from_numpy(src), torch.from_numpy(dst)
    out1 = mean_aggregate(adj, h1)
    out2 = scatter_mean(h2.index_select(0, s), d, 20)
    torch.testing.assert_close(out1, out2)
    assert torch.all(out1[3] == 0)
    g = torch.randn(20, dim, dtype=torch.float64)
    (out1 * g).sum().backward()
    (out2 * g).sum().backward()
    assert h1.grad is not None and h2.grad is not None
    torch.testing.assert_close(h1.grad, h2.grad)


def test_mean_aggregate_gradcheck() -> None:
    src, dst = _edges(9, 4, 30, seed=1)
    adj = MeanAdjacency(src, dst, 9, 4)
    h = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: mean_aggregate(adj, x), (h,))


def test_mean_aggregate_without_grad_and_empty_block() -> None:
    adj = MeanAdjacency(np.zeros(0, np.int64), np.zeros(0, np.int64), 5, 2)
    h = torch.randn(5, 4)
    out = mean_aggregate(adj, h)
    assert out.shape == (2, 4) and not out.requires_grad and torch.all(out == 0)


def test_graphsage_input_features_get_no_gradient() -> None:
    rng = np.random.default_rng(0)
    seeds = np.arange(10)
    src, dst = rng.integers(0, 200, 80), rng.integers(0, 10, 80)
    b1 = to_block(seeds, src, dst, np.arange(80))
    src0, dst0 = rng.integers(0, 500, 400), rng.integers(0, b1.num_src_nodes(), 400)
    b0 = to_block(b1.src_nid, src0, b1.src_nid[dst0], np.arange(400))
    model = GraphSAGE(6, 8, 3, num_layers=2, dropout=0.5)
    x = torch.randn(b0.num_src_nodes(), 6)
    model([b0, b1], x).sum().backward()
    assert x.grad is None
    assert all(p.grad is not None for p in model.parameters())


def test_dropout_keeps_about_1_minus_p_and_rescales() -> None:
    torch.manual_seed(0)
    x = torch.ones(200_000)
    for p in (0.1, 0.5, 0.7):
        y = dropout(x, p, True)
        kept = float((y != 0).float().mean())
        assert abs(kept - (1 - p)) < 0.01
        torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p)))
    assert dropout(x, 0.5, False) is x
    assert torch.all(dropout(x, 1.0, True) == 0)
    z = dropout(torch.ones(3, 5, 7), 0.5, True)
    assert z.shape == (3, 5, 7)


def test_relu_dropout_equals_relu_then_dropout() -> None:
    x = torch.randn(4000, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    torch.manual_seed(3)
    a = relu_dropout(x, 0.4, True)
    torch.manual_seed(3)
    b = dropout(torch.relu(x2), 0.4, True)
    torch.testing.assert_close(a, b)
    g = torch.randn_like(a)
    a.backward(g)
    b.backward(g)
    assert x.grad is not None and x2.grad is not None
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(relu_dropout(x, 0.4, False), torch.relu(x))
    assert torch.all(relu_dropout(x, 1.0, True) == 0)


def test_mean_aggregate_under_bf16_autocast_matches_float32() -> None:
    """CPU has no bfloat16 CSR kernel: the aggregation runs in float32 inside autocast."""
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 40, 200), rng.integers(0, 10, 200)
    adj = MeanAdjacency(src, dst, 40, 10)
    h = torch.randn(40, 8, requires_grad=True)
    ref = mean_aggregate(adj, h)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mean_aggregate(adj, h.bfloat16())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    out.sum().backward()
    assert h.grad is not None and h.grad.dtype == torch.float32


def _reference_csr(rows: np.ndarray, cols: np.ndarray, val: np.ndarray, n: int) -> tuple:
    order = np.argsort(rows, kind="stable")
    crow = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    return crow, cols[order], val[order]


@pytest.mark.parametrize("layout", ["random", "grouped", "sorted"])
def test_mean_adjacency_and_transpose_equal_the_stably_sorted_csr(layout: str) -> None:
    """Whichever way the rows are ordered (grouped per seed as sampled, sorted, random:
    no sort, run merging, radix sort), the CSR is the stable row sort of the edges."""
    rng = np.random.default_rng(5)
    n_src, n_dst = 3000, 400
    src, dst = _edges(n_src, n_dst, 20000, seed=6)
    if layout != "random":
        dst = np.sort(dst)
        if layout == "grouped":  # one run per destination, runs shuffled
            perm = rng.permutation(n_dst)
            starts = np.searchsorted(dst, perm)
            ends = np.searchsorted(dst, perm, side="right")
            idx = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)])
            src, dst = src[idx], dst[idx]
    adj = MeanAdjacency(src, dst, n_src, n_dst)
    val = (1.0 / np.maximum(np.bincount(dst, minlength=n_dst), 1)).astype(np.float32)[dst]
    for mat, rows, cols, n in ((adj.a, dst, src, n_dst), (adj.transpose(), src, dst, n_src)):
        crow, col, v = _reference_csr(rows, cols, val, n)
        np.testing.assert_array_equal(mat.crow_indices().numpy(), crow)
        np.testing.assert_array_equal(mat.col_indices().numpy(), col)
        np.testing.assert_array_equal(mat.values().numpy(), v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_keep_mask_is_the_boolean_draw(dtype: torch.dtype) -> None:
    """The float mask (clamped integer arithmetic) keeps exactly what ``r >= thr`` keeps,
    also in bfloat16, which cannot hold every 16-bit integer."""
    from distgnn.nn.ops import _keep_mask, _keep_scale

    x = torch.ones(70_000, dtype=dtype)
    for p in (0.1, 0.5, 0.7, 0.999):
        torch.manual_seed(7)
        keep = _keep_mask(x, p)
        torch.manual_seed(7)
        m = _keep_scale(x, p)
        assert m.dtype == dtype
        want = keep.to(torch.float32) * (1.0 / (1.0 - p))
        torch.testing.assert_close(m.float(), want.to(dtype).float(), rtol=0, atol=0)


def test_sage_prefix_path_equals_separate_self_and_mean() -> None:
    """A block's destinations are the first rows of its sources: the fused path (one
    gradient buffer for both uses) gives the same output and gradients as the
    self term on a copy of those rows plus the mean over all of them."""
    from distgnn.nn import SAGEConv

    rng = np.random.default_rng(8)
    seeds = np.arange(30)
    src, dst = rng.integers(0, 300, 500), rng.integers(0, 30, 500)
    block = to_block(seeds, src, dst, np.arange(500))
    conv = SAGEConv(16, 16, "mean").double()
    leaf = torch.randn(block.num_src_nodes(), 16, dtype=torch.float64, requires_grad=True)
    h = leaf * 1.0
    out = conv(block, h)
    g = torch.randn_like(out)
    out.backward(g)
    fused_grad, fused_w = leaf.grad, conv.fc_self.weight.grad
    assert fused_grad is not None and fused_w is not None
    leaf.grad, conv.fc_self.weight.grad, conv.fc_neigh.weight.grad = None, None, None
    h2 = leaf * 1.0
    ref = conv(block, (h2, h2[: block.num_dst_nodes()].clone()))
    ref.backward(g)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(fused_grad, leaf.grad)
    torch.testing.assert_close(fused_w, conv.fc_self.weight.grad)
    assert torch.autograd.gradcheck(
        lambda x: conv(block, x * 1.0), (leaf.detach().clone().requires_grad_(True),)
    )
