"""Scatter helpers shared by the layers (plain PyTorch, no extensions)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from distgnn import native


def scatter_sum(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    out = src.new_zeros((n, *src.shape[1:]))
    return out.index_add_(0, index, src)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the rows of ``src`` grouped by ``index``; empty groups give zeros."""
    total = scatter_sum(src, index, n)
    cnt = torch.bincount(index, minlength=n).clamp_(min=1).to(src.dtype)
    return total / cnt.view(-1, *([1] * (src.dim() - 1)))


# a key array with fewer descents than 1/RUNS_FACTOR of its length is sorted by
# merging its runs (NumPy's timsort), else by a radix sort (torch, int32 keys)
RUNS_FACTOR = 8


def stable_order(keys: np.ndarray) -> np.ndarray | None:
    """The stable ascending order of the non-negative ``keys``; ``None`` when sorted.

    Sampled edges come grouped by destination (one run per seed): their runs are
    merged in O(edges) steps; keys in random order (the transpose's) take a radix
    sort, several times faster than a comparison sort there.
    """
    if keys.size < 2:
        return None
    descents = int(np.count_nonzero(keys[1:] < keys[:-1]))
    if descents == 0:
        return None
    if descents * RUNS_FACTOR < keys.size or int(keys.max()) >= 2**31 - 1:
        return np.argsort(keys, kind="stable")
    k32 = torch.from_numpy(keys.astype(np.int32))
    order: np.ndarray = torch.sort(k32, stable=True).indices.numpy()
    return order


def csr_tensor(
    counts: np.ndarray, cols: np.ndarray, val: np.ndarray, shape: tuple[int, int], device: Any
) -> torch.Tensor:
    """A sparse CSR matrix from per-row entry ``counts`` and the row-sorted ``cols``/``val``."""
    itype = np.int32 if max(shape[1], cols.size) < 2**31 - 1 else np.int64
    crow = np.zeros(shape[0] + 1, dtype=itype)
    np.cumsum(counts, out=crow[1:], dtype=itype)
    return _csr(crow, np.ascontiguousarray(cols, dtype=itype), val, shape, device)


def _csr(
    crow: np.ndarray, cols: np.ndarray, val: np.ndarray, shape: tuple[int, int], device: Any
) -> torch.Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings(
            "ignore", message=".*[Ss]parse CSR tensor support", category=UserWarning
        )
        a = torch.sparse_csr_tensor(
            torch.from_numpy(crow),
            torch.from_numpy(cols),
            torch.from_numpy(np.ascontiguousarray(val)),
            shape,
            check_invariants=False,  # rows sorted and counted by the caller
        )
    return a if device is None else a.to(device)


class MeanAdjacency:
    """The row-normalised adjacency ``A[v, u] = 1 / in_deg(v)`` of a bipartite graph
    (edges ``src -> dst``) as a sparse CSR matrix, and lazily its transpose (for the
    gradient; the input layer's features need none, so it is never built there).
    ``A @ h`` is the mean over in-edges (zeros for nodes without any). Each row's
    entries keep the edges' order (a stable grouping, no sort when already grouped).
    With the native kernels (:mod:`distgnn.native`) each CSR is one counting sort in C,
    the same matrix."""

    def __init__(
        self, src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int, device: Any = None
    ) -> None:
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        self.src, self.dst, self.num_src, self.num_dst = src, dst, num_src, num_dst
        self.device = device
        self._t: torch.Tensor | None = None
        self._k = native.kernels()
        if self._k is not None:
            crow, col, val, inv = native.mean_csr(self._k, dst, src, num_dst, num_src, None)
            assert inv is not None
            self.inv_deg = inv
            self.a = _csr(crow, col, val, (num_dst, num_src), device)
            return
        deg = np.bincount(dst, minlength=num_dst)
        self.inv_deg = (1.0 / np.maximum(deg, 1)).astype(np.float32)
        order = stable_order(dst)
        cols = src if order is None else np.take(src, order)
        self.a = csr_tensor(deg, cols, np.repeat(self.inv_deg, deg), (num_dst, num_src), device)

    def transpose(self) -> torch.Tensor:
        if self._t is None and self._k is not None:
            shape = (self.num_src, self.num_dst)
            crow, col, val, _ = native.mean_csr(
                self._k, self.src, self.dst, self.num_src, self.num_dst, self.inv_deg
            )
            self._t = _csr(crow, col, val, shape, self.device)
        elif self._t is None:
            order = stable_order(self.src)
            rows = self.dst if order is None else np.take(self.dst, order)
            self._t = csr_tensor(
                np.bincount(self.src, minlength=self.num_src),
                rows,
                np.take(self.inv_deg, rows),
                (self.num_src, self.num_dst),
                self.device,
            )
        return self._t


def _spmm(a: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``a @ h`` for a CSR ``a``, as a weighted-sum embedding bag: one bag per row, its
    column indices the rows of ``h`` gathered, its values the weights. Same result as
    ``torch.sparse.mm`` (equal sums, same order) and on one CPU thread faster: the
    input layer's mean 16 vs 27 ms, a 47.9k-edge transpose (the gradient) 5.4 vs 13 ms
    (fbgemm's kernels, measured on the benchmark's blocks)."""
    if h.dtype in (torch.bfloat16, torch.float16):
        h = h.float()  # aggregate half-precision features in float32
    vals = a.values()
    vals = vals if vals.dtype == h.dtype else vals.to(h.dtype)
    with torch.autocast(h.device.type, enabled=False):  # keep autocast off the sum
        return F.embedding_bag(
            a.col_indices(),
            h,
            a.crow_indices(),
            mode="sum",
            per_sample_weights=vals,
            include_last_offset=True,
        )


class _MeanAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, adj: MeanAdjacency) -> torch.Tensor:
        ctx.adj = adj
        return _spmm(adj.a, h.contiguous())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        return _spmm(ctx.adj.transpose(), grad.contiguous()), None


class _MeanAggregateWithPrefix(torch.autograd.Function):
    """``(h[:n].clone(), adj.a @ h)`` with one gradient buffer for ``h``.

    A block's destinations are the first rows of its sources, so ``h`` reaches the
    layer twice (``h[:n]`` to the self term, all of it to the mean); autograd would
    give the slice's gradient a zero-filled full-size buffer and add the two, two
    extra passes over the ``(num_src, dim)`` gradient. Here the mean's gradient is
    made first and the destinations' rows are added into it in place.
    """

    @staticmethod
    def forward(
        ctx: Any, h: torch.Tensor, adj: MeanAdjacency, n: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.adj = adj
        ctx.n = n
        h = h.contiguous()
        return h[:n].clone(), _spmm(adj.a, h)

    @staticmethod
    def backward(
        ctx: Any, grad_prefix: torch.Tensor | None, grad: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        adj: MeanAdjacency = ctx.adj
        if grad is None:
            out = grad_prefix.new_zeros((adj.num_src, *grad_prefix.shape[1:]))  # type: ignore[union-attr]
        else:
            out = _spmm(adj.transpose(), grad.contiguous())
        if grad_prefix is not None:
            out[: ctx.n] += grad_prefix.to(out.dtype)
        return out, None, None


def mean_aggregate_with_prefix(
    adj: MeanAdjacency, h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h[:num_dst], mean_aggregate(adj, h))`` with the gradients of both summed into
    one buffer (see :class:`_MeanAggregateWithPrefix`)."""
    if h.dim() != 2:
        raise ValueError("mean_aggregate: h must be 2-D")
    out: tuple[torch.Tensor, torch.Tensor] = _MeanAggregateWithPrefix.apply(h, adj, adj.num_dst)
    return out


def mean_aggregate(adj: MeanAdjacency, h: torch.Tensor) -> torch.Tensor:
    """``adj.a @ h`` (fused sparse mean over in-edges), differentiable in ``h``.

    Equals ``scatter_mean(h.index_select(0, src), dst, num_dst)`` without
    materialising one row per edge; the gradient is ``adj.a.T @ grad``.
    """
    if h.dim() != 2:
        raise ValueError("mean_aggregate: h must be 2-D")
    out: torch.Tensor = _MeanAggregate.apply(h, adj)
    return out


def segment_softmax(scores: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Softmax of ``scores`` (E, ...) over the edges sharing a destination ``index``."""
    shape = (n, *scores.shape[1:])
    idx = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    mx = scores.new_full(shape, float("-inf")).scatter_reduce(
        0, idx, scores, reduce="amax", include_self=True
    )
    ex = torch.exp(scores - mx.index_select(0, index))
    den = scatter_sum(ex, index, n).index_select(0, index)
    return ex / den.clamp(min=1e-16)


def _keep_mask(x: torch.Tensor, p: float) -> torch.Tensor:
    """Boolean keep mask, ``P(keep) = 1 - p``: 16 random bits per element compared
    with ``p`` (resolution 2**-16), 4 elements per 64-bit draw: about 4x cheaper on
    CPU than a float ``rand`` and 2x cheaper than ``bernoulli_``. (The layers use
    :func:`_keep_scale`, the same draw as a float mask.)"""
    return _random16(x) >= _threshold(p)


def _random16(x: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device)
    return bits.view(torch.int16)[:n].view(x.shape)


def _threshold(p: float) -> int:
    return round(p * 65536) - 32768


def _keep_scale(x: torch.Tensor, p: float) -> torch.Tensor:
    """:func:`_keep_mask`'s draw as a float mask: ``1/(1-p)`` where kept, else 0.

    Built with float arithmetic only: on CPU, torch's comparison and bool kernels are
    several times slower than float ones (``x > 0`` on 44k x 256 floats: 18.6 ms, a
    float ``relu``: 5.3 ms). ``r`` and the threshold are integers, so ``r - thr + 1``
    clamped to ``[0, 1]`` is exactly 1 where ``r >= thr`` and 0 elsewhere (computed in
    float32 for half types, which cannot hold every 16-bit integer).
    """
    ftype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    r = _random16(x).to(ftype)
    m = r.sub_(_threshold(p) - 1).clamp_(0.0, 1.0).mul_(1.0 / (1.0 - p))
    return m if m.dtype == x.dtype else m.to(x.dtype)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout (see :func:`_keep_scale`); one float mask, one multiply."""
    if not training or p <= 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    return x * _keep_scale(x, p)


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(x))`` as one multiply by a mask that is ``1/(1-p)`` where ``x > 0``
    and the element is kept, else 0: forward and backward are one pass each over ``x``
    instead of three (the values and gradients are those of ``relu`` then ``dropout``).
    ``relu(x).sign()`` is the float form of ``x > 0`` (see :func:`_keep_scale`): on the
    benchmark's 44k x 256 hidden layer, forward + backward 36 vs 52 ms."""
    if not training or p <= 0.0:
        return torch.relu(x)
    if p >= 1.0:
        return torch.relu(x) * 0.0
    mask = _keep_scale(x, p).mul_(torch.relu(x.detach()).sign_())
    return x * mask
