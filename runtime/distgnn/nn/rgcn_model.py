"""The built-in app's R-GCN for heterogeneous graphs (``App.model: rgcn``).

Each layer is one :class:`~distgnn.nn.rgcn.RelGraphConv` over a typed block: the source
rows of every node type are placed in block order, each relation's messages are
averaged per destination (DGL's entity-classification R-GCN: ``norm="right"`` per
relation), summed over relations, plus a self-loop. The input layer turns each node
type's feature into the hidden width (a linear projection per type; a learnt embedding
for a type without the feature: a dense ``nn.Embedding`` in the model, or, given
``tables``, a table held elsewhere, e.g. a ``DistEmbedding`` on the graph servers that a
sparse optimizer updates row by row). Layers map ``(block, {ntype: h})`` to ``{ntype: h}``,
which is what :mod:`distgnn.train.hetero_layerwise` runs for inference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn.errors import ConfigError
from distgnn.nn.rgcn import RelGraphConv


def _block_types(block: Any) -> tuple[list[str], np.ndarray]:
    """A typed block's node types and each source node's type index."""
    if getattr(block, "src_type", None) is None or getattr(block, "types", None) is None:
        raise ConfigError("RGCN: the blocks must be typed (sampled from a heterogeneous graph)")
    return list(block.types.ntypes), np.asarray(block.src_type, dtype=np.int64)


def right_norm(dst: torch.Tensor, etypes: torch.Tensor, num_rels: int) -> torch.Tensor:
    """``1 / (edges of the same relation into the same destination)`` per edge."""
    key = dst * num_rels + etypes
    _, inv, counts = torch.unique(key, return_inverse=True, return_counts=True)
    return 1.0 / counts[inv].to(torch.float32)


class TypedRelLayer(nn.Module):
    """``(typed block, {ntype: source rows}) -> {ntype: destination rows}``."""

    def __init__(
        self,
        in_feat: int,
        out_feat: int,
        num_rels: int,
        activation: bool,
        dropout: float,
        num_bases: int | None = None,
    ) -> None:
        super().__init__()
        self.out_feat, self.num_rels = out_feat, num_rels
        self.conv = RelGraphConv(
            in_feat,
            out_feat,
            num_rels,
            regularizer=None if num_bases is None else "basis",
            num_bases=num_bases,
            activation=F.relu if activation else None,
            self_loop=True,
            dropout=dropout,
        )

    def forward(self, block: Any, h: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ntypes, st = _block_types(block)
        first = next(iter(h.values()))
        x = first.new_zeros((st.size, first.shape[1]))
        for i, t in enumerate(ntypes):
            pos = np.flatnonzero(st == i)
            if pos.size and t in h:
                x[torch.from_numpy(pos).to(x.device)] = h[t]
        _, dst = block.edges(x.device)
        et = block.etypes_tensor(x.device)
        y = self.conv(block, x, et, right_norm(dst, et, self.num_rels))
        nd = int(block.num_dst_nodes())
        out = {}
        for i, t in enumerate(ntypes):
            pos = np.flatnonzero(st[:nd] == i)
            out[t] = y.index_select(0, torch.from_numpy(pos).to(y.device))
        return out


Table = Callable[[torch.Tensor], torch.Tensor]
"""A featureless node type's embedding table held outside the model: type-wise IDs ->
rows (a ``DistEmbedding``: pulled from the servers, traced for its sparse optimizer)."""


class TypedInput(nn.Module):
    """Each node type's input at the hidden width: its feature projected, or (a type
    without the feature) a learnt embedding row looked up by type-wise ID: in a dense
    ``nn.Embedding`` of the model, or in ``tables[ntype]`` when given (the sparse path:
    no parameter here; see :meth:`set_tables`)."""

    def __init__(
        self,
        in_feats: Mapping[str, int],
        num_nodes: Mapping[str, int],
        hidden: int,
        tables: Mapping[str, Table] | None = None,
    ) -> None:
        super().__init__()
        self.proj = nn.ModuleDict({t: nn.Linear(d, hidden) for t, d in sorted(in_feats.items())})
        featureless = sorted(t for t in num_nodes if t not in in_feats)
        self.tables: dict[str, Table] = {}
        if tables is not None:
            self.set_tables(tables, featureless)
            featureless = []
        self.embed = nn.ModuleDict({t: nn.Embedding(num_nodes[t], hidden) for t in featureless})
        for e in self.embed.values():
            assert isinstance(e, nn.Embedding)
            nn.init.uniform_(e.weight, -1.0, 1.0)

    def set_tables(self, tables: Mapping[str, Table], want: Sequence[str] | None = None) -> None:
        """Use ``tables`` (one per featureless type) for the embedding rows, e.g. a
        snapshot's for evaluating a selected model."""
        want = sorted(self.tables) if want is None else list(want)
        if sorted(tables) != sorted(want):
            raise ConfigError(f"RGCN: embedding tables for {sorted(tables)}, the model has {want}")
        self.tables = dict(tables)

    def forward(self, block: Any, x: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ntypes, st = _block_types(block)
        tid = np.asarray(block.src_tid, dtype=np.int64)
        dev = next(self.parameters()).device
        out: dict[str, torch.Tensor] = {}
        # every parameter takes part in every step (an absent type with no rows), as DDP needs
        for t, lin in self.proj.items():
            assert isinstance(lin, nn.Linear)
            i = ntypes.index(t)
            rows = x.get(t)
            if rows is None:
                rows = torch.zeros((0, lin.in_features), device=dev)
            want = int((st == i).sum())
            if rows.shape[0] != want:
                raise ConfigError(
                    f"RGCN: {rows.shape[0]} input rows of {t!r}, the block has {want}"
                )
            out[t] = lin(rows.float())
        for t, emb in self.embed.items():
            ids = torch.from_numpy(tid[st == ntypes.index(t)]).to(dev)
            out[t] = emb(ids)
        for t, table in self.tables.items():
            rows = table(torch.from_numpy(tid[st == ntypes.index(t)]))
            out[t] = rows.to(dev)
        return out


def _unattached(ntype: str) -> Table:
    def table(ids: torch.Tensor) -> torch.Tensor:
        raise ConfigError(f"RGCN: the embedding table of {ntype!r} is not attached (set_tables)")

    return table


class RGCN(nn.Module):
    """``RGCN(ntypes, canonical_etypes, in_feats, num_nodes, hidden, out_feats,
    num_layers, dropout, num_bases=None, tables=None)``: ``forward(blocks, {ntype:
    features}) -> {ntype: logits}``.

    ``in_feats``: the feature width of each node type that has the feature;
    ``num_nodes``: node counts (types without a feature get a learnt embedding: a dense
    ``nn.Embedding`` each, or the ``tables`` given, one per such type, held outside the
    model (``sparse_embedding`` in the configuration; :meth:`set_tables` attaches them
    to a model rebuilt from a checkpoint); ``num_bases``: the basis decomposition of
    each layer's relation weights (None: one weight per relation; at most the number of
    relations, as DGL's R-GCN, which uses full weights when it equals it).
    :meth:`config` / :meth:`from_config` rebuild it from a checkpoint (plain values).
    """

    def __init__(
        self,
        ntypes: Sequence[str],
        canonical_etypes: Sequence[Sequence[str]],
        in_feats: Mapping[str, int],
        num_nodes: Mapping[str, int],
        hidden: int,
        out_feats: int,
        num_layers: int,
        dropout: float = 0.0,
        num_bases: int | None = None,
        tables: Mapping[str, Table] | None = None,
        sparse_embedding: bool | None = None,
    ) -> None:
        super().__init__()
        unknown = sorted(set(in_feats) - set(ntypes))
        if unknown:
            raise ConfigError(f"RGCN: in_feats names unknown node types {unknown}")
        rels = len(canonical_etypes)
        if num_bases is not None and not 1 <= int(num_bases) <= rels:
            raise ConfigError(f"RGCN: num_bases {num_bases} must be in [1, {rels}] (the relations)")
        sparse = tables is not None if sparse_embedding is None else bool(sparse_embedding)
        self._config: dict[str, Any] = {
            "ntypes": list(ntypes),
            "canonical_etypes": [list(c) for c in canonical_etypes],
            "in_feats": {t: int(d) for t, d in in_feats.items()},
            "num_nodes": {t: int(num_nodes[t]) for t in ntypes if t not in in_feats},
            "hidden": int(hidden),
            "out_feats": int(out_feats),
            "num_layers": int(num_layers),
            "dropout": float(dropout),
            "num_bases": None if num_bases is None else int(num_bases),
            "sparse_embedding": sparse,
        }
        num = self._config["num_nodes"]
        if sparse and tables is None:  # rebuilt from a checkpoint: tables attached later
            tables = {t: _unattached(t) for t in num}
        self.inputs = TypedInput(in_feats, num, hidden, tables if sparse else None)
        dims = [hidden] * num_layers + [out_feats]
        self.layers = nn.ModuleList(
            TypedRelLayer(dims[i], dims[i + 1], rels, i < num_layers - 1, dropout, num_bases)
            for i in range(num_layers)
        )
        self.dims = dims[1:]

    @property
    def sparse_types(self) -> list[str]:
        """The featureless node types whose tables are held outside the model."""
        return sorted(self.inputs.tables)

    def set_tables(self, tables: Mapping[str, Table]) -> None:
        """Attach the featureless types' tables (a model built with ``sparse_embedding``)."""
        self.inputs.set_tables(tables)

    def config(self) -> dict[str, Any]:
        """The constructor's arguments (for checkpoints)."""
        return dict(self._config)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> RGCN:
        return cls(**dict(cfg))

    def forward(
        self, blocks: Sequence[Any], x: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        h = self.inputs(blocks[0], x)
        for layer, block in zip(self.layers, blocks, strict=True):
            h = layer(block, h)
        return h

    def layerwise(self) -> Any:
        """Layer-wise inference steps: the input projection runs inside the first layer."""
        from distgnn.train.layerwise import LayerWise

        def first(block: Any, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            out: dict[str, torch.Tensor] = self.layers[0](block, self.inputs(block, x))
            return out

        steps: list[Any] = [first, *list(self.layers)[1:]]
        return LayerWise(steps, list(self.dims))
