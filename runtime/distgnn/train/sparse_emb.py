"""The built-in R-GCN's embeddings of featureless node types as ``DistEmbedding`` tables
(``--sparse-embedding``, the default; DGL's distributed R-GCN with ``--sparse-embedding
--dgl-sparse``, GraphStorm's learnable node embeddings).

Each such type gets one table ``node_emb_NTYPE`` (DGL's example's name), partitioned like
the type's nodes and initialised on the servers uniform in [-1, 1] (as the example's
``init_emb``); every trainer attaches the same table. A step pulls only the rows its
batch touches; :class:`~distgnn.distributed.optim.SparseAdam` (``--sparse-lr``) updates
only those rows on the servers, beside the dense optimizer for the rest of the model.
Checkpoints carry the tables (``Checkpoint.sparse``, read by rank 0); the sparse
optimizer's per-row state stays on the servers (a resumed job with new servers starts
it afresh).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.optim import SparseAdam
from distgnn.distributed.tensor import DistTensor
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.train import checkpoint

log = logging.getLogger("distgnn.train")
EMBED_NAME = "node_emb"
INIT = ("uniform", {"low": -1.0, "high": 1.0})
CHUNK = 1 << 16


class NodeEmbeddings:
    """The featureless types' tables and their sparse optimizer (None: nothing to train,
    e.g. for inference)."""

    def __init__(
        self, g: Any, num_nodes: Mapping[str, int], dim: int, lr: float | None = None
    ) -> None:
        self.g = g
        self.tables: dict[str, DistEmbedding] = {
            t: DistEmbedding(
                int(n),
                dim,
                f"{EMBED_NAME}_{t}",
                INIT,
                g.get_node_partition_policy(t),
                ctx=g.ctx,
            )
            for t, n in sorted(num_nodes.items())
        }
        self.opt: SparseAdam | None = None
        if lr is not None and self.tables:
            self.opt = SparseAdam(list(self.tables.values()), lr=lr)

    def __bool__(self) -> bool:
        return bool(self.tables)

    def step(self) -> None:
        """Apply this step's row gradients (every trainer calls it, every step)."""
        if self.opt is not None:
            self.opt.step()

    def state(self) -> dict[str, torch.Tensor]:
        """Every table, for a checkpoint's ``sparse`` part."""
        return checkpoint.embedding_state(list(self.tables.values()), CHUNK)

    def check(self, state: dict[str, Any]) -> None:
        """ConfigError unless ``state`` has every table at its shape (every trainer
        checks, before one of them restores)."""
        for e in self.tables.values():
            table = state.get(e.name)
            want = (e.num_embeddings, e.embedding_dim)
            if table is None or tuple(table.shape) != want:
                got = "none" if table is None else f"shape {tuple(table.shape)}"
                raise ConfigError(f"checkpoint: embedding table {e.name!r} {want}: it has {got}")

    def restore(self, state: dict[str, Any]) -> None:
        """Write a checkpoint's tables back to the servers (one trainer calls it)."""
        checkpoint.restore_embeddings(list(self.tables.values()), state, CHUNK)
        log.info("embedding tables restored", extra=kv(tables=sorted(self.tables)))

    def snapshot(self, suffix: str = "best") -> dict[str, DistTensor]:
        """A copy of every table on the servers (``node_emb_NTYPE-SUFFIX``), e.g. the
        selected model's, read by :func:`lookups`."""
        out: dict[str, DistTensor] = {}
        for t, e in self.tables.items():
            n, d = e.num_embeddings, e.embedding_dim
            copy = DistTensor(
                (n, d), torch.float32, f"{e.name}-{suffix}", "zeros", e.part_policy, ctx=self.g
            )
            for i in range(0, n, CHUNK):
                idx = torch.arange(i, min(i + CHUNK, n))
                copy[idx] = e.tensor[idx]
            out[t] = copy
        return out

    def lookups(self) -> dict[str, Any]:
        """The tables as the model reads them (``ids -> rows``)."""
        return dict(self.tables)


def lookups(tables: Mapping[str, DistTensor]) -> dict[str, Any]:
    """Read-only ``ids -> rows`` of copies made by :meth:`NodeEmbeddings.snapshot`."""

    def reader(t: DistTensor) -> Any:
        return lambda ids: t[ids]

    return {k: reader(v) for k, v in tables.items()}
