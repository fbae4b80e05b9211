"""What the built-in apps on a heterogeneous graph share (``--model rgcn``): the graph's
typing, the model / graph checks that name the field, the R-GCN built for the graph, and
the per-type feature rows of a batch's input nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from distgnn.dataloading.types import GraphTyping, graph_typing
from distgnn.errors import ConfigError
from distgnn.nn import RGCN
from distgnn.sampling.local import LocalGraph
from distgnn.train.config import NUM_BASES, TrainConfig
from distgnn.train.graph import TrainGraph
from distgnn.train.sparse_emb import NodeEmbeddings

MODEL = "--model (trainers.app.model)"


def typing_of(tg: TrainGraph) -> GraphTyping | None:
    """The node and edge types of the graph (None: homogeneous)."""
    return None if isinstance(tg.g, LocalGraph) else graph_typing(tg.g)


def check_model(
    cfg: TrainConfig, tg: TrainGraph, target: str, homogeneous_models: str
) -> GraphTyping | None:
    """The graph's typing when the model is the typed one (None: a homogeneous model on a
    homogeneous graph); ConfigError naming the field when model and graph do not fit.
    ``target``: the flag that names the typed app's target (for the message)."""
    typing = typing_of(tg)
    if cfg.model != "rgcn":
        if typing is not None:
            raise ConfigError(
                f"{MODEL}: {cfg.model} is homogeneous, but the graph has node types "
                f"{typing.ntypes}; use rgcn with {target}"
            )
        return None
    if typing is None:
        raise ConfigError(
            f"{MODEL}: rgcn needs a graph with node types; this one has one ({homogeneous_models})"
        )
    return typing


def check_feat(cfg: TrainConfig, tg: TrainGraph, typing: GraphTyping) -> list[str]:
    """The node types that have ``cfg.feat`` (ConfigError when none has it)."""
    have = [t for t in typing.ntypes if cfg.feat in tg.g.nodes[t].data]
    if not have:
        raise ConfigError(f"--feat: no node type has the field {cfg.feat!r}")
    return have


def build_rgcn(
    cfg: TrainConfig, tg: TrainGraph, typing: GraphTyping, out_feats: int
) -> tuple[RGCN, NodeEmbeddings | None]:
    """The built-in R-GCN over every node and edge type of the graph: each type's
    ``cfg.feat`` projected, ``out_feats`` wide; a type without the field gets a learnt
    embedding: with ``cfg.sparse_embedding`` a ``DistEmbedding`` on the servers (returned,
    with its sparse optimizer), else a dense ``nn.Embedding`` in the model."""
    g = tg.g
    in_feats = {
        t: int(g.nodes[t].data[cfg.feat].shape[1])
        for t in typing.ntypes
        if cfg.feat in g.nodes[t].data
    }
    rels = len(typing.types.canonical_etypes)
    if cfg.num_bases is not None and cfg.num_bases > rels:
        raise ConfigError(
            f"{NUM_BASES}: {cfg.num_bases} is more than the graph's {rels} relations "
            f"{[':'.join(c) for c in typing.types.canonical_etypes]}"
        )
    num_nodes = {t: int(g.num_nodes(t)) for t in typing.ntypes}
    embs = None
    if cfg.sparse_embedding:
        bare = {t: n for t, n in num_nodes.items() if t not in in_feats}
        embs = NodeEmbeddings(g, bare, cfg.hidden, cfg.embedding_lr) or None
    model = RGCN(
        typing.ntypes,
        typing.types.canonical_etypes,
        in_feats,
        num_nodes,
        cfg.hidden,
        out_feats,
        cfg.num_layers,
        cfg.dropout,
        num_bases=cfg.num_bases,
        tables=embs.lookups() if embs else None,
    )
    return model, embs


def sparse_info(sparse: NodeEmbeddings | None) -> dict[str, Any]:
    """For the log and the metrics: the node types trained as sparse embedding tables."""
    return {"sparse_embedding_types": sorted(sparse.tables)} if sparse else {}


def feature_reader(
    cfg: TrainConfig, tg: TrainGraph, typing: GraphTyping
) -> Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """``input_nodes`` (type-wise IDs per node type) -> their ``cfg.feat`` rows per type
    (the types that have the field)."""
    g = tg.g
    feat_types = [t for t in typing.ntypes if cfg.feat in g.nodes[t].data]

    def inputs(input_nodes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {t: g.nodes[t].data[cfg.feat][input_nodes[t]].float() for t in feat_types}

    return inputs


def read_all(g: Any, ntype: str, name: str) -> np.ndarray:
    """Every row of a (small) field of node type ``ntype``, read in chunks."""
    return _read_all(g.nodes[ntype].data[name], int(g.num_nodes(ntype)))


def read_all_edges(g: Any, etype: Any, name: str) -> np.ndarray:
    """Every row of a (small) field of edge type ``etype``, read in chunks."""
    return _read_all(g.edges[etype].data[name], int(g.num_edges(etype)))


def edge_mask_ids(g: Any, etype: Any, name: str) -> np.ndarray:
    """Type-wise IDs of the edges of ``etype`` in mask ``name``."""
    return np.flatnonzero(read_all_edges(g, etype, name).astype(bool)).astype(np.int64)


def _read_all(t: Any, n: int) -> np.ndarray:
    step = 1 << 18
    parts = [np.asarray(t[torch.arange(i, min(i + step, n))]) for i in range(0, n, step)]
    return np.concatenate(parts) if parts else np.zeros(0)


def mask_ids(g: Any, ntype: str, name: str) -> np.ndarray:
    """Type-wise IDs of the nodes of ``ntype`` in mask ``name``."""
    return np.flatnonzero(read_all(g, ntype, name).astype(bool)).astype(np.int64)
