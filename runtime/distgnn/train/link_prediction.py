"""The built-in link-prediction app: GraphSAGE embeddings, dot-product scores, uniform
negatives (the R-GCN on a heterogeneous graph's target edge type, see
:mod:`distgnn.train.hetero_link_prediction`; the loop is shared).

A random 5% of the edges (by ``--seed``) are held out for testing; training
seed edges exclude them and their reverses. Rank 0 reports ROC AUC and MRR of
the held-out edges against uniform negatives (and MRR of random scores).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn.log import kv
from distgnn.nn import GraphSAGE
from distgnn.sampling import EdgeBatcher, NeighborSampler, PairGraph
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import FEAT, TrainConfig
from distgnn.train.ddp import DDPContext, agree_steps, all_reduce, barrier, unwrap, wrap
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import (
    autocast,
    deferred_sync,
    epoch_batches,
    eval_fanouts,
    resume,
    save_epoch,
    to_device,
)
from distgnn.train.metrics import mrr, random_mrr, roc_auc
from distgnn.train.proc import use_prefetch
from distgnn.train.sparse_emb import NodeEmbeddings
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")
TEST_FRACTION = 0.05
EVAL_NEGS = 20
EVAL_BATCH = 512
_CHUNK = 1 << 18

Scores = tuple[torch.Tensor, torch.Tensor]


@dataclass
class LinkTask:
    """What the homogeneous and the typed app do differently; the loop is shared."""

    model: nn.Module
    loader: Any
    """the training batches: a context manager with ``len``, ``set_epoch`` and ``iter``"""
    load: Callable[[Any], tuple[Any, Any, Any, Any]]
    """a batch -> ``(inputs, positive pairs, negative pairs, blocks)`` on the CPU"""
    scores: Callable[[Any, Any, Any], Scores]
    """``(embeddings, positive pairs, negative pairs)`` -> their scores (float32)"""
    test_scores: Callable[[nn.Module], tuple[np.ndarray, np.ndarray]]
    """rank 0: the held-out edges' scores ``(P,)`` and their negatives' ``(P, EVAL_NEGS)``"""
    train_edges: int
    test_edges: int
    info: dict[str, Any] = field(default_factory=dict)
    """for the log and the metrics"""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """saved in every checkpoint's ``extra`` (what inference rebuilds the model from)"""
    sparse: NodeEmbeddings | None = None
    """the R-GCN's embedding tables on the servers and their sparse optimizer"""


def pair_score(
    hs: torch.Tensor, hd: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
) -> torch.Tensor:
    """Dot products of rows ``hs[src]`` and ``hd[dst]`` (float32)."""
    a = hs.index_select(0, src.to(hs.device)).float()
    return (a * hd.index_select(0, dst.to(hd.device)).float()).sum(1)


def score(h: torch.Tensor, pairs: PairGraph) -> torch.Tensor:
    return pair_score(h, h, pairs.src, pairs.dst)


def endpoints(
    find: Callable[[np.ndarray], tuple[Any, Any]], m: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of edges ``0 .. m-1``, found in chunks."""
    srcs, dsts = [], []
    for i in range(0, m, _CHUNK):
        s, d = find(np.arange(i, min(i + _CHUNK, m)))
        srcs.append(np.asarray(s, dtype=np.int64))
        dsts.append(np.asarray(d, dtype=np.int64))
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def hold_out(
    src: np.ndarray, dst: np.ndarray, seed: int, reverse: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` positions of the edges ``src -> dst``: a random ``TEST_FRACTION``
    held out; an edge with a test edge's endpoints (and, with ``reverse``, its reverse
    pair's) is never a training edge."""
    m = src.size
    rng = np.random.default_rng([seed, 7])
    test = np.sort(rng.choice(m, size=max(1, int(m * TEST_FRACTION)), replace=False))
    n = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    held = [src[test] * n + dst[test]]
    if reverse:
        held.append(dst[test] * n + src[test])
    train = np.flatnonzero(~np.isin(src * n + dst, np.concatenate(held)))
    return train.astype(np.int64), test.astype(np.int64)


def split_edges(tg: TrainGraph, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train_eids, test_eids)``; a test edge's reverse is never a training edge."""
    src, dst = endpoints(tg.source.find_edges, tg.num_edges())
    return hold_out(src, dst, seed)


def ranking_metrics(pos: np.ndarray, neg: np.ndarray) -> dict[str, float]:
    """``test_auc`` and ``test_mrr`` of positive scores ``(P,)`` against ``(P, K)`` negatives."""
    return {"test_auc": roc_auc(pos, neg.reshape(-1)), "test_mrr": mrr(pos, neg)}


@torch.no_grad()
def test_scores(
    model: nn.Module, tg: TrainGraph, cfg: TrainConfig, eids: np.ndarray, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of edges ``eids`` and of ``EVAL_NEGS`` uniform negatives each, with
    evaluation blocks (see ``eval_fanouts``) that exclude the edges and their reverses."""
    m = unwrap(model)
    m.eval()
    sampler = NeighborSampler(eval_fanouts(cfg, tg.num_nodes()))
    batcher = EdgeBatcher(
        eids, sampler, EVAL_BATCH, EVAL_NEGS, "reverse", shuffle=False, seed=cfg.seed
    )
    pos_all, neg_all = [], []
    for b in range(len(batcher)):
        inp, pos, neg, blocks = batcher.decode(batcher.make(tg.source, 0, b))
        h = m(blocks, tg.read(cfg.feat, inp).float().to(device))
        pos_all.append(score(h, pos).cpu().numpy())
        neg_all.append(score(h, neg).cpu().numpy())
    m.train()
    p = np.concatenate(pos_all)
    return p, np.concatenate(neg_all).reshape(p.size, EVAL_NEGS)


def homogeneous_task(
    cfg: TrainConfig, tg: TrainGraph, ctx: DDPContext, train_eids: np.ndarray | None
) -> LinkTask:
    """GraphSAGE on the graph's edges."""
    tg.require({FEAT: cfg.feat})
    all_train, test_eids = split_edges(tg, cfg.seed)
    if train_eids is None:
        train_eids = np.array_split(all_train, ctx.world_size)[ctx.rank]
    in_feats = int(tg.read(cfg.feat, torch.tensor([0])).shape[1])
    model = GraphSAGE(in_feats, cfg.hidden, cfg.hidden, cfg.num_layers, cfg.dropout)
    batcher = EdgeBatcher(
        train_eids,
        NeighborSampler(cfg.fanouts),
        cfg.batch_size,
        cfg.num_negs,
        cfg.exclude,
        seed=cfg.seed * 1000 + ctx.rank,
    )

    def load(batch: Any) -> tuple[torch.Tensor, PairGraph, PairGraph, Any]:
        inp, pos, neg, blocks = batch
        return tg.read(cfg.feat, inp).float(), pos, neg, blocks

    return LinkTask(
        model=model,
        loader=BatchLoader(tg.source, batcher, cfg.num_samplers),
        load=load,
        scores=lambda h, pos, neg: (score(h, pos), score(h, neg)),
        test_scores=lambda m: test_scores(m, tg, cfg, test_eids, ctx.device),
        train_edges=int(train_eids.size),
        test_edges=int(test_eids.size),
    )


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_eids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """Train; returns the metrics (meaningful on rank 0). ``train_eids``: this trainer's
    training edges (type-wise IDs of the target edge type on a typed graph)."""
    from distgnn.train import hetero_link_prediction as hetero

    tel = telemetry or Telemetry()
    torch.manual_seed(cfg.seed)
    typed = hetero.check_graph(cfg, tg) is not None
    if typed:
        task = hetero.typed_task(cfg, tg, ctx, train_eids)
    else:
        task = homogeneous_task(cfg, tg, ctx, train_eids)
    model = wrap(ctx, task.model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sparse = task.sparse
    start = resume(cfg, ctx, model, opt, sparse)
    metrics: dict[str, Any] = {}
    t_train = 0.0
    with task.loader as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app="link-prediction",
                rank=ctx.rank,
                train_edges=task.train_edges,
                test_edges=task.test_edges,
                steps_per_epoch=steps,
                start_epoch=start,
                **cfg.log_fields(),
                **task.info,
            ),
        )
        tel.begin(cfg.epochs, start)
        prefetch = use_prefetch(torch.get_num_threads(), accelerator=ctx.device.type != "cpu")
        sync = deferred_sync(ctx, model, prefetch)
        log.info(
            "gradient all-reduce",
            extra=kv(deferred=sync is not None, prefetch_thread=prefetch),
        )

        for epoch in range(start, cfg.epochs):
            t0 = time.monotonic()
            loader.set_epoch(epoch)
            tot_loss = tot_n = n_edges = 0.0
            with epoch_batches(loader, steps, task.load, tel, prefetch, sync) as batches:
                for (x_cpu, pos, neg, blocks), w in batches:
                    with batches.no_sync():
                        with autocast(cfg, ctx.device):
                            h = model(blocks, to_device(x_cpu, ctx.device))
                        ps, ns = task.scores(h, pos, neg)
                        loss = (
                            F.binary_cross_entropy_with_logits(
                                torch.cat([ps, ns]),
                                torch.cat([torch.ones_like(ps), torch.zeros_like(ns)]),
                            )
                            * w
                        )
                        opt.zero_grad()
                        loss.backward()
                    batches.sync_gradients()  # deferred: the next batch during the all-reduce
                    opt.step()
                    if sparse:
                        sparse.step()  # the rows this step touched, on the servers
                    if w:
                        tot_loss += float(loss.item())
                        tot_n += 1
                        n_edges += pos.num_edges()
            local_edges = n_edges
            tot_loss, tot_n, n_edges = all_reduce(ctx, [tot_loss, tot_n, n_edges])
            dt = time.monotonic() - t0
            t_train += dt
            save_epoch(cfg, ctx, epoch, model, opt, lambda: task.checkpoint, sparse)
            tel.epoch_end(
                epoch,
                cfg.epochs,
                tot_loss / max(tot_n, 1),
                dt,
                samples=local_edges,
                total_samples=n_edges,
            )
            if ctx.is_main:
                log.info(
                    "epoch",
                    extra=kv(
                        epoch=epoch, loss=round(tot_loss / max(tot_n, 1), 4), seconds=round(dt, 3)
                    ),
                )
            barrier(ctx)
        if ctx.is_main:
            ev = ranking_metrics(*task.test_scores(model))
            metrics = {
                "app": "link-prediction",
                "model": "rgcn" if typed else "sage",
                **task.info,
                "test_auc": round(ev["test_auc"], 4),
                "test_mrr": round(ev["test_mrr"], 4),
                "random_mrr": round(random_mrr(EVAL_NEGS), 4),
                "epochs": cfg.epochs,
                "start_epoch": start,
                "train_seconds": round(t_train, 3),
                "world_size": ctx.world_size,
                "test_edges": task.test_edges,
            }
        barrier(ctx)
    return metrics
