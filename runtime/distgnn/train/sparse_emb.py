"""The built-in R-GCN's embeddings of featureless node types as ``DistEmbedding`` tables
(``--sparse-embedding``, the default; DGL's distributed R-GCN with ``--sparse-embedding
--dgl-sparse``, GraphStorm's learnable node embeddings).

Each such type gets one table ``node_emb_NTYPE`` (DGL's example's name), partitioned like
the type's nodes and initialised on the servers uniform in [-1, 1] (as the example's
``init_emb``); every trainer attaches the same table. A step pulls only the rows its
batch touches; :class:`~distgnn.distributed.optim.SparseAdam` (``--sparse-lr``) updates
only those rows on the servers, beside the dense optimizer for the rest of the model.
Checkpoints carry the tables and the optimizer's per-row state (Adam's step counts and
moments): every trainer writes the rows it owns beside the checkpoint file
(``ckpt-epoch-NNNNN.sparse/``, :mod:`distgnn.distributed.rowshards`) and every trainer
writes them back on resume; the checkpoint's ``sparse`` part records where and how many
trainers wrote them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from distgnn import storage
from distgnn.distributed.embedding import DistEmbedding, load_tables, save_tables
from distgnn.distributed.optim import SparseAdam
from distgnn.distributed.tensor import DistTensor
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.train import checkpoint

log = logging.getLogger("distgnn.train")
EMBED_NAME = "node_emb"
INIT = ("uniform", {"low": -1.0, "high": 1.0})
CHUNK = 1 << 16
FORMAT = "rows"
TABLES, OPTIMIZER = "tables", "optimizer"


def sparse_dir(ckpt_url: str) -> str:
    """The folder beside checkpoint ``.../ckpt-epoch-NNNNN.pt`` that holds its rows."""
    return ckpt_url.rsplit(".", 1)[0] + ".sparse"


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

    def save(self, ckpt_url: str) -> dict[str, Any]:
        """Every trainer writes the table rows and optimizer state rows it owns to
        ``sparse_dir(ckpt_url)`` (all call it; the caller waits for all before the
        checkpoint file is written). Returns the checkpoint's ``sparse`` part."""
        base = sparse_dir(ckpt_url)
        embs = list(self.tables.values())
        save_tables(embs, storage.join(base, TABLES))
        if self.opt is not None:
            self.opt.save(storage.join(base, OPTIMIZER))
        return {
            "format": FORMAT,
            "path": base.rsplit("/", 1)[-1],
            "world_size": int(embs[0].tensor.ctx.world_size),
            "tables": {e.name: [e.num_embeddings, e.embedding_dim] for e in embs},
            "optimizer": None if self.opt is None else type(self.opt).__name__,
        }

    def check(self, state: dict[str, Any]) -> None:
        """ConfigError unless ``state`` (a checkpoint's ``sparse`` part) has every table
        at its shape (every trainer checks, before any restores)."""
        shapes = state.get("tables", {}) if state.get("format") == FORMAT else state
        for e in self.tables.values():
            table = shapes.get(e.name)
            want = (e.num_embeddings, e.embedding_dim)
            got = (
                None if table is None else tuple(table if isinstance(table, list) else table.shape)
            )
            if got != want:
                what = "none" if got is None else f"shape {got}"
                raise ConfigError(f"checkpoint: embedding table {e.name!r} {want}: it has {what}")

    def restore(
        self, state: dict[str, Any], ckpt_url: str, is_main: bool, optimizer: bool = True
    ) -> None:
        """Write a checkpoint's tables (and, with ``optimizer``, the sparse optimizer's
        state) back to the servers. Every trainer calls it and loads the rows the
        checkpoint's trainers ``rank, rank + world, ...`` saved; a checkpoint written
        before the rows were saved per trainer holds whole tables, written back by
        ``is_main`` (its optimizer state starts afresh)."""
        embs = list(self.tables.values())
        if state.get("format") != FORMAT:
            if is_main:
                checkpoint.restore_embeddings(embs, state, CHUNK)
            log.info("embedding tables restored", extra=kv(tables=sorted(self.tables)))
            return
        base = storage.join(storage.dirname(ckpt_url), str(state["path"]))
        world = int(state["world_size"])
        load_tables(embs, storage.join(base, TABLES), world)
        restored = False
        if optimizer and self.opt is not None:
            saved = state.get("optimizer")
            if saved != type(self.opt).__name__:
                raise ConfigError(
                    f"checkpoint: sparse optimizer {saved!r}, this run {type(self.opt).__name__}"
                )
            self.opt.load(storage.join(base, OPTIMIZER), saved_world=world)
            restored = True
        log.info(
            "embedding tables restored",
            extra=kv(tables=sorted(self.tables), optimizer_state=restored),
        )

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
