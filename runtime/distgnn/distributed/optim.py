"""Sparse optimizers whose state lives on the graph servers (DGL's names).

``step()`` collects the gradients of the rows each :class:`DistEmbedding` handed out
since the last step and sends one SPARSE_UPDATE per server (all in flight at once);
the server sums duplicate rows and applies the update under its row locks, so
concurrent trainers lose no update. Adagrad and Adam state are element-wise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.tensor import group
from distgnn.errors import ConfigError
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType


class SparseOptimizer:
    """Base: gather traced gradients and ship them to the servers."""

    opt = ""

    def __init__(self, params: Sequence[DistEmbedding], lr: float, **hyper: float) -> None:
        if not params or not all(isinstance(p, DistEmbedding) for p in params):
            raise ConfigError("sparse optimizers take a non-empty list of DistEmbedding")
        if lr <= 0:
            raise ConfigError(f"lr must be > 0, got {lr}")
        self.params = list(params)
        self.lr = lr
        self.hyper = hyper

    def zero_grad(self) -> None:
        for p in self.params:
            p.reset_trace()

    def step(self) -> None:
        for emb in self.params:
            ids, grads = [], []
            for idx, rows in emb.trace:
                if rows.grad is not None:
                    ids.append(idx)
                    grads.append(rows.grad.detach().cpu().numpy().astype(np.float32, copy=False))
            emb.reset_trace()
            if ids:
                self._apply(emb, np.concatenate(ids), np.concatenate(grads))

    def _apply(self, emb: DistEmbedding, ids: np.ndarray, grads: np.ndarray) -> None:
        t = emb.tensor
        parts, local = t.policy.locate(ids)
        order, b = group(parts, len(t.policy.offsets) - 1)
        meta: dict[str, Any] = {"name": t.key, "opt": self.opt, "lr": self.lr, **self.hyper}
        calls = {}
        for p in range(len(b) - 1):
            if b[p + 1] > b[p]:
                sel = order[b[p] : b[p + 1]]
                calls[p] = Call(MsgType.SPARSE_UPDATE, meta, [local[sel], grads[sel]])
        t.ctx.call_many(calls)


class SparseAdagrad(SparseOptimizer):
    """``SparseAdagrad(params, lr, eps=1e-10)``: state ``sum += g*g`` kept on the servers."""

    opt = "adagrad"

    def __init__(self, params: Sequence[DistEmbedding], lr: float, eps: float = 1e-10) -> None:
        super().__init__(params, lr, eps=eps)


class SparseAdam(SparseOptimizer):
    """``SparseAdam(params, lr, betas=(0.9, 0.999), eps=1e-08)`` with per-row step counts."""

    opt = "adam"

    def __init__(
        self,
        params: Sequence[DistEmbedding],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-08,
    ) -> None:
        super().__init__(params, lr, beta1=betas[0], beta2=betas[1], eps=eps)
