"""``DistEmbedding``: a learnable embedding table on the servers, updated sparsely.

``emb(ids)`` pulls the rows and, while autograd is on, remembers ``(ids, rows)``;
after ``loss.backward()`` a sparse optimizer (:mod:`distgnn.distributed.optim`) sends the
row gradients to the servers, which apply the update and keep the optimizer state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distgnn.distributed.tensor import DistTensor, as_ids


class DistEmbedding:
    """DGL's ``DistEmbedding(num_embeddings, embedding_dim, name, init_func, part_policy)``."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        name: str | None = None,
        init_func: str | tuple[str, dict[str, Any]] | None = None,
        part_policy: str | None = None,
        *,
        ctx: Any,
        seed: int = 0,
    ) -> None:
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.tensor = DistTensor(
            (num_embeddings, embedding_dim),
            torch.float32,
            name,
            init_func or ("uniform", {"low": -1.0, "high": 1.0}),
            part_policy,
            persistent=name is not None,
            ctx=ctx,
            seed=seed,
        )
        self.name = self.tensor.name
        self.trace: list[tuple[np.ndarray, torch.Tensor]] = []

    def __call__(self, ids: Any) -> torch.Tensor:
        idx = as_ids(ids, self.num_embeddings)
        rows = self.tensor[idx]
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self.trace.append((idx, rows))
        return rows

    def reset_trace(self) -> None:
        self.trace.clear()
