"""Scatter helpers shared by the layers (plain PyTorch, no extensions)."""

from __future__ import annotations

import torch


def scatter_sum(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    out = src.new_zeros((n, *src.shape[1:]))
    return out.index_add_(0, index, src)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the rows of ``src`` grouped by ``index``; empty groups give zeros."""
    total = scatter_sum(src, index, n)
    cnt = torch.bincount(index, minlength=n).clamp_(min=1).to(src.dtype)
    return total / cnt.view(-1, *([1] * (src.dim() - 1)))


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


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with a ``rand`` mask (about 2x faster on CPU than ``bernoulli_``)."""
    if not training or p <= 0.0:
        return x
    keep = torch.rand_like(x) >= p
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))
