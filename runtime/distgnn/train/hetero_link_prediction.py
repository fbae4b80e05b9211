"""Link prediction on a heterogeneous graph (``--model rgcn --target-etype SRC:REL:DST``):
the built-in :class:`~distgnn.nn.RGCN` as the encoder (every node type's embedding,
``--hidden`` wide), the dot product of the two endpoints' embeddings as the score,
trained on the target edge type's edges with the library's typed edge loader
(:class:`~distgnn.dataloading.DistEdgeDataLoader` seeded ``{etype: eids}``: typed blocks
and pair graphs; negatives pair each source with uniform nodes of the destination
type). The split, the loop and the metrics are the homogeneous app's
(:func:`distgnn.train.link_prediction.run`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.dataloading.dist_loader import DistEdgeDataLoader
from distgnn.dataloading.negative_sampler import Uniform
from distgnn.dataloading.pair_graph import HeteroPairGraph
from distgnn.dataloading.types import GraphTyping
from distgnn.errors import ConfigError
from distgnn.sampling import NeighborSampler
from distgnn.sampling.blocks import CanonicalEtype
from distgnn.train.config import TARGET_ETYPE, TrainConfig
from distgnn.train.ddp import DDPContext, unwrap
from distgnn.train.graph import TrainGraph
from distgnn.train.link_prediction import (
    EVAL_BATCH,
    EVAL_NEGS,
    LinkTask,
    Scores,
    endpoints,
    hold_out,
    pair_score,
)
from distgnn.train.loop import eval_fanouts, to_device
from distgnn.train.typed import build_rgcn, check_feat, check_model, feature_reader, sparse_info

EXCLUDE = {"none": None, "self": "self", "reverse": "reverse"}
"""``--exclude`` as the edge loader's ``exclude``: ``reverse`` drops every sampled edge
between a seed's two nodes, either direction, any edge type (so the reverse edge type's)."""


def check_graph(
    cfg: TrainConfig, tg: TrainGraph, homogeneous_models: str = "sage"
) -> tuple[GraphTyping, CanonicalEtype] | None:
    """The graph's typing and the target edge type when the model is the typed one;
    ConfigError naming the field when the model, the edge type and the graph do not fit
    (``homogeneous_models``: the app's other models, for the message)."""
    typing = check_model(cfg, tg, TARGET_ETYPE, homogeneous_models)
    if typing is None:
        return None
    known = [":".join(c) for c in typing.types.canonical_etypes]
    if not cfg.target_etype:
        raise ConfigError(f"{TARGET_ETYPE}: required on a graph with edge types {known}")
    if cfg.target_etype not in known:
        raise ConfigError(
            f"{TARGET_ETYPE}: {cfg.target_etype!r} is not an edge type of the graph {known}"
        )
    check_feat(cfg, tg, typing)
    cet = typing.types.canonical_etypes[known.index(cfg.target_etype)]
    return typing, cet


def split_edges(tg: TrainGraph, cet: CanonicalEtype, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` type-wise IDs of ``cet``'s edges (the homogeneous app's split; a
    test edge's reverse pair is dropped from training when source and destination types
    are the same)."""

    def find(ids: np.ndarray) -> tuple[Any, Any]:
        s, d = tg.g.find_edges(torch.from_numpy(ids), etype=cet)
        return s.numpy(), d.numpy()

    src, dst = endpoints(find, int(tg.g.num_edges(cet)))
    return hold_out(src, dst, seed, reverse=cet[0] == cet[2])


def typed_scores(h: dict[str, torch.Tensor], pairs: HeteroPairGraph, cet: CanonicalEtype) -> Any:
    """Dot products of the source and destination embeddings of ``pairs``' ``cet`` edges."""
    src, dst = pairs.edges(etype=cet)
    return pair_score(h[cet[0]], h[cet[2]], src, dst)


def typed_task(
    cfg: TrainConfig, tg: TrainGraph, ctx: DDPContext, train_eids: np.ndarray | None = None
) -> LinkTask:
    """The R-GCN encoder, its typed edge loader and the test scores on ``cfg.target_etype``."""
    checked = check_graph(cfg, tg)
    assert checked is not None
    typing, cet = checked
    g = tg.g
    all_train, test = split_edges(tg, cet, cfg.seed)
    if train_eids is None:
        train_eids = np.array_split(all_train, ctx.world_size)[ctx.rank]
    model, sparse = build_rgcn(cfg, tg, typing, cfg.hidden)
    loader = DistEdgeDataLoader(
        g,
        {cet: torch.from_numpy(train_eids)},
        NeighborSampler(cfg.fanouts),
        batch_size=cfg.batch_size,
        shuffle=True,
        negative_sampler=Uniform(cfg.num_negs),
        exclude=EXCLUDE[cfg.exclude],
        num_samplers=cfg.num_samplers,
        seed=cfg.seed * 1000 + ctx.rank,
    )
    inputs = feature_reader(cfg, tg, typing)

    def load(batch: Any) -> tuple[dict[str, torch.Tensor], Any, Any, Any]:
        input_nodes, pos, neg, blocks = batch
        return inputs(input_nodes), pos, neg, blocks

    def scores(h: Any, pos: Any, neg: Any) -> Scores:
        return typed_scores(h, pos, cet), typed_scores(h, neg, cet)

    @torch.no_grad()
    def test_scores(model: nn.Module) -> tuple[np.ndarray, np.ndarray]:
        m = unwrap(model)
        m.eval()
        ev = DistEdgeDataLoader(
            g,
            {cet: torch.from_numpy(test)},
            NeighborSampler(eval_fanouts(cfg, int(tg.num_nodes()))),
            batch_size=EVAL_BATCH,
            negative_sampler=Uniform(EVAL_NEGS),
            exclude="reverse",
            num_samplers=0,
            seed=cfg.seed,
        )
        pos_all, neg_all = [], []
        with ev:
            for input_nodes, pos, neg, blocks in ev:
                h = m(blocks, to_device(inputs(input_nodes), ctx.device))
                pos_all.append(typed_scores(h, pos, cet).cpu().numpy())
                neg_all.append(typed_scores(h, neg, cet).cpu().numpy())
        m.train()
        p = np.concatenate(pos_all)
        return p, np.concatenate(neg_all).reshape(p.size, EVAL_NEGS)

    return LinkTask(
        model=model,
        loader=loader,
        load=load,
        scores=scores,
        test_scores=test_scores,
        train_edges=int(train_eids.size),
        test_edges=int(test.size),
        info={"target_etype": cfg.target_etype} | sparse_info(sparse),
        checkpoint={"rgcn": model.config(), "target_etype": cfg.target_etype},
        sparse=sparse,
    )
