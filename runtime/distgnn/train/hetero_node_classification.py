"""Node classification and regression on a heterogeneous graph (``--model rgcn
--target-ntype NTYPE``): the built-in :class:`~distgnn.nn.RGCN` trained on the target
node type's masks and labels (class IDs, or a float target: the
:class:`~distgnn.train.objective.Objective` of ``cfg.app``), with the library's typed
loader (:class:`~distgnn.dataloading.DistNodeDataLoader` seeded per node type: typed
blocks, inputs per node type). The training loop is the homogeneous app's
(:func:`distgnn.train.node_classification.train`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.dataloading.dist_loader import DistNodeDataLoader
from distgnn.dataloading.types import GraphTyping
from distgnn.errors import ConfigError
from distgnn.sampling import NeighborSampler
from distgnn.train.config import LABEL, TARGET_NTYPE, TrainConfig
from distgnn.train.ddp import DDPContext, all_reduce
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import eval_fanouts
from distgnn.train.objective import for_app
from distgnn.train.typed import (
    build_rgcn,
    check_feat,
    check_model,
    feature_reader,
    mask_ids,
    read_all,
    sparse_info,
)

TARGET = TARGET_NTYPE


def check_graph(cfg: TrainConfig, tg: TrainGraph) -> GraphTyping | None:
    """The graph's typing when the model is the typed one; ConfigError naming the field
    when the model, the target node type and the graph do not fit."""
    typing = check_model(cfg, tg, TARGET, "sage, gat")
    if typing is None:
        return None
    tt = cfg.target_ntype
    if not tt:
        raise ConfigError(f"{TARGET}: required on a graph with node types {typing.ntypes}")
    if tt not in typing.ntypes:
        raise ConfigError(f"{TARGET}: {tt!r} is not a node type of the graph {typing.ntypes}")
    data = tg.g.nodes[tt].data
    for flag, name in (
        ("--label", cfg.label),
        ("--train-mask", cfg.train_mask),
        ("--val-mask", cfg.val_mask),
        ("--test-mask", cfg.test_mask),
    ):
        if name not in data:
            raise ConfigError(
                f"{flag}: node type {tt!r} has no field {name!r} (it has {sorted(data)})"
            )
    check_feat(cfg, tg, typing)
    return typing


def typed_task(
    cfg: TrainConfig, tg: TrainGraph, ctx: DDPContext, train_ids: np.ndarray | None = None
) -> Any:
    """The R-GCN, its typed loader and evaluation on ``cfg.target_ntype`` (classes or a
    regression target: ``cfg.app``)."""
    from distgnn.distributed.split import node_split
    from distgnn.train.node_classification import Task

    typing = check_graph(cfg, tg)
    assert typing is not None and cfg.target_ntype
    g, tt = tg.g, cfg.target_ntype
    labels = g.nodes[tt].data[cfg.label]
    if train_ids is None:
        if ctx.world_size > 1:
            mask = torch.from_numpy(read_all(g, tt, cfg.train_mask).astype(bool))
            book = g.get_partition_book()
            split = node_split(mask, book, ntype=tt, rank=ctx.rank, world_size=ctx.world_size)
            train_ids = np.asarray(split, dtype=np.int64)
        else:
            train_ids = mask_ids(g, tt, cfg.train_mask)
    objective = for_app(cfg.app)
    labels_all = read_all(g, tt, cfg.label)
    objective.check_labels(LABEL, cfg.label, labels_all)
    out_feats = int(all_reduce(ctx, [float(objective.out_feats(labels_all))], op="max")[0])
    model, sparse = build_rgcn(cfg, tg, typing, out_feats)
    loader = DistNodeDataLoader(
        g,
        {tt: torch.from_numpy(train_ids)},
        NeighborSampler(cfg.fanouts),
        batch_size=cfg.batch_size,
        shuffle=True,
        num_samplers=cfg.num_samplers,
        seed=cfg.seed * 1000 + ctx.rank,
    )
    inputs = feature_reader(cfg, tg, typing)

    def load(batch: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor, Any]:
        input_nodes, seeds, blocks = batch
        return inputs(input_nodes), objective.target(labels[seeds[tt]]), blocks

    ids: dict[str, np.ndarray] = {}  # each mask read once

    def outputs(m: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        input_nodes, out_nodes, blocks = batch
        x = {t: v.to(ctx.device) for t, v in inputs(input_nodes).items()}
        return m(blocks, x)[tt], objective.target(labels[out_nodes[tt]]).to(ctx.device)

    def measure(model: nn.Module, mask: str) -> dict[str, float]:
        if mask not in ids:
            ids[mask] = mask_ids(g, tt, mask)
        if ids[mask].size == 0:
            return objective.measure((0.0, 0.0, 0.0))
        fanouts = eval_fanouts(cfg, int(tg.num_nodes()))
        seeds = {tt: torch.from_numpy(ids[mask])}
        sampler = NeighborSampler(fanouts)
        loader = DistNodeDataLoader(g, seeds, sampler, batch_size=4096, num_samplers=0, seed=0)
        with loader:
            return objective.over(model, loader, outputs)

    return Task(
        model=model,
        loader=loader,
        load=load,
        logits=lambda m, blocks, x: m(blocks, x)[tt],
        evaluate=measure,
        training={"train_nodes": int(train_ids.size)},
        info={"target_ntype": tt} | sparse_info(sparse),
        checkpoint={"rgcn": model.config(), "target_ntype": tt},
        sparse=sparse,
        objective=objective,
        baseline=lambda: objective.baseline(
            read_all(g, tt, cfg.label),
            mask_ids(g, tt, cfg.train_mask),
            mask_ids(g, tt, cfg.test_mask),
        ),
    )
