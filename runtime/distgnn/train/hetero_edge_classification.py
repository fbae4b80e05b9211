"""Edge classification and regression on a heterogeneous graph (``--model rgcn
--target-etype SRC:REL:DST``, GraphStorm's ``target_etype``): the built-in
:class:`~distgnn.nn.RGCN` embeds every node type (``--hidden`` wide) over typed blocks and
the edge apps' head (:func:`~distgnn.train.edge_classification.edge_head`) predicts each
labelled edge of the target type from its two endpoints' embeddings. The edges are that
type's edge masks' (type-wise IDs, ``edge_split`` over the training mask), the batches
the library's typed edge loader's (:class:`~distgnn.dataloading.DistEdgeDataLoader`
seeded ``{etype: eids}``, no negatives, the labelled edges kept in the neighbourhoods as
the homogeneous app keeps them); the loop is the supervised one
(:func:`distgnn.train.node_classification.train`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.dataloading.dist_loader import DistEdgeDataLoader
from distgnn.dataloading.types import GraphTyping
from distgnn.errors import ConfigError
from distgnn.nn import RGCN
from distgnn.sampling import NeighborSampler
from distgnn.sampling.blocks import EID, CanonicalEtype
from distgnn.train.config import LABEL, TEST_MASK, TRAIN_MASK, VAL_MASK, TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.edge_classification import EVAL_BATCH, edge_head, logits, pair_outputs
from distgnn.train.graph import TrainGraph
from distgnn.train.hetero_link_prediction import check_graph as check_etype
from distgnn.train.loop import eval_fanouts, to_device
from distgnn.train.node_classification import Task
from distgnn.train.objective import Objective
from distgnn.train.typed import (
    build_rgcn,
    edge_mask_ids,
    feature_reader,
    read_all_edges,
    sparse_info,
)


class TypedEdgeClassifier(nn.Module):
    """The R-GCN's embeddings of every node type, then ``head([h_src, h_dst])`` for the
    target edge type's edges (``src``, ``dst``: the pair graph's type-wise local rows)."""

    def __init__(self, encoder: RGCN, hidden: int, out_feats: int, etype: CanonicalEtype):
        super().__init__()
        self.encoder = encoder
        self.head = edge_head(hidden, out_feats)
        self.etype = etype

    def forward(
        self, blocks: Any, x: dict[str, torch.Tensor], src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        h = self.encoder(blocks, x)
        hu, hv = h[self.etype[0]].index_select(0, src), h[self.etype[2]].index_select(0, dst)
        return pair_outputs(self.head, hu, hv)

    def set_tables(self, tables: Any) -> None:
        """The encoder's sparse embedding tables (the loop swaps in the best epoch's)."""
        self.encoder.set_tables(tables)


def check_graph(cfg: TrainConfig, tg: TrainGraph) -> tuple[GraphTyping, CanonicalEtype] | None:
    """The graph's typing and target edge type when the model is the typed one;
    ConfigError naming the field when the model, the edge type, its edge data and the
    graph do not fit."""
    checked = check_etype(cfg, tg, "sage, gat")
    if checked is None:
        return None
    cet = checked[1]
    data = tg.g.edges[cet].data
    for flag, name in (
        (LABEL, cfg.label),
        (TRAIN_MASK, cfg.train_mask),
        (VAL_MASK, cfg.val_mask),
        (TEST_MASK, cfg.test_mask),
    ):
        if name not in data:
            raise ConfigError(
                f"{flag}: edge type {cfg.target_etype!r} has no field {name!r} "
                f"(it has {sorted(data)})"
            )
    return checked


def split_train(tg: TrainGraph, cet: CanonicalEtype, mask: str, ctx: DDPContext) -> np.ndarray:
    """This trainer's share of ``cet``'s training edges (type-wise IDs, ``edge_split``)."""
    from distgnn.distributed.split import edge_split

    m = read_all_edges(tg.g, cet, mask).astype(bool)
    if ctx.world_size == 1:
        return np.flatnonzero(m).astype(np.int64)
    book = tg.g.get_partition_book()
    split = edge_split(
        torch.from_numpy(m), book, etype=cet, rank=ctx.rank, world_size=ctx.world_size
    )
    return np.asarray(split, dtype=np.int64)


def typed_task(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    objective: Objective,
    out_feats: int,
    train_eids: np.ndarray,
) -> Task:
    """The R-GCN encoder with the edge head, the typed edge loader and evaluation on
    ``cfg.target_etype``'s edges (``out_feats``: classes or targets)."""
    checked = check_graph(cfg, tg)
    assert checked is not None
    typing, cet = checked
    g = tg.g
    encoder, sparse = build_rgcn(cfg, tg, typing, cfg.hidden)
    net = TypedEdgeClassifier(encoder, cfg.hidden, out_feats, cet)
    labels = g.edges[cet].data[cfg.label]
    inputs = feature_reader(cfg, tg, typing)

    def loader(eids: np.ndarray, fanouts: list[int], batch: int, train: bool) -> Any:
        return DistEdgeDataLoader(
            g,
            {cet: torch.from_numpy(eids)},
            NeighborSampler(fanouts),
            batch_size=batch,
            shuffle=train,
            num_samplers=cfg.num_samplers if train else 0,
            seed=cfg.seed * 1000 + ctx.rank if train else cfg.seed,
        )

    def load(batch: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor, Any]:
        input_nodes, pairs, blocks = batch
        src, dst = pairs.edges(etype=cet)
        y = objective.target(torch.as_tensor(labels[pairs.edata[EID][cet]]))
        return inputs(input_nodes), y, (blocks, src, dst)

    ids: dict[str, np.ndarray] = {}  # each edge mask read once (rank 0)

    def outputs(m: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, pairs = load(batch)
        return logits(m, pairs, to_device(x, ctx.device), ctx.device), y.to(ctx.device)

    def measure(model: nn.Module, mask: str) -> dict[str, float]:
        if mask not in ids:
            ids[mask] = edge_mask_ids(g, cet, mask)
        if ids[mask].size == 0:
            return objective.measure((0.0, 0.0, 0.0))
        fanouts = eval_fanouts(cfg, int(tg.num_nodes()))
        with loader(ids[mask], fanouts, EVAL_BATCH, False) as ev:
            return objective.over(model, ev, outputs)

    width = "targets" if objective.regression else "classes"
    return Task(
        model=net,
        loader=loader(train_eids, cfg.fanouts, cfg.batch_size, True),
        load=load,
        logits=lambda m, pairs, x: logits(m, pairs, x, ctx.device),
        evaluate=measure,
        training={"train_edges": int(train_eids.size), width: out_feats},
        info={"target_etype": cfg.target_etype} | sparse_info(sparse),
        checkpoint={"rgcn": encoder.config(), "target_etype": cfg.target_etype},
        sparse=sparse,
        objective=objective,
        app=cfg.app,
    )
