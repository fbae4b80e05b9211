"""The built-in link-prediction app: GraphSAGE embeddings, dot-product scores, uniform negatives.

A random 5% of the edges (by ``--seed``) are held out for testing; training
seed edges exclude them and their reverses. Rank 0 reports ROC AUC and MRR of
the held-out edges against uniform negatives (and MRR of random scores).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn.log import kv
from distgnn.nn import GraphSAGE
from distgnn.sampling import EdgeBatcher, NeighborSampler, PairGraph
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext, agree_steps, all_reduce, barrier, unwrap, wrap
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import autocast, epoch_batches, eval_fanouts, resume, save_epoch
from distgnn.train.metrics import mrr, random_mrr, roc_auc
from distgnn.train.proc import use_prefetch
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")
TEST_FRACTION = 0.05
EVAL_NEGS = 20
_CHUNK = 1 << 18


def score(h: torch.Tensor, pairs: PairGraph) -> torch.Tensor:
    return (
        h.index_select(0, pairs.src.to(h.device)) * h.index_select(0, pairs.dst.to(h.device))
    ).sum(1)


def split_edges(tg: TrainGraph, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train_eids, test_eids)``; a test edge's reverse is never a training edge."""
    m = tg.num_edges()
    rng = np.random.default_rng([seed, 7])
    test = np.sort(rng.choice(m, size=max(1, int(m * TEST_FRACTION)), replace=False))
    srcs, dsts = [], []
    for i in range(0, m, _CHUNK):
        s, d = tg.source.find_edges(np.arange(i, min(i + _CHUNK, m)))
        srcs.append(s)
        dsts.append(d)
    src, dst = np.concatenate(srcs), np.concatenate(dsts)
    n = tg.num_nodes()
    held = np.concatenate([src[test] * n + dst[test], dst[test] * n + src[test]])
    train = np.flatnonzero(~np.isin(src * n + dst, held))
    return train.astype(np.int64), test.astype(np.int64)


@torch.no_grad()
def evaluate(
    model: nn.Module, tg: TrainGraph, cfg: TrainConfig, eids: np.ndarray, device: torch.device
) -> dict[str, float]:
    m = unwrap(model)
    m.eval()
    sampler = NeighborSampler(eval_fanouts(cfg, tg.num_nodes()))
    batcher = EdgeBatcher(eids, sampler, 512, EVAL_NEGS, "reverse", shuffle=False, seed=cfg.seed)
    pos_all, neg_all = [], []
    for b in range(len(batcher)):
        inp, pos, neg, blocks = batcher.decode(batcher.make(tg.source, 0, b))
        h = m(blocks, tg.read(cfg.feat, inp).float().to(device))
        pos_all.append(score(h, pos).cpu().numpy())
        neg_all.append(score(h, neg).cpu().numpy())
    m.train()
    p, q = np.concatenate(pos_all), np.concatenate(neg_all)
    return {"test_auc": roc_auc(p, q), "test_mrr": mrr(p, q.reshape(p.size, EVAL_NEGS))}


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_eids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    tel = telemetry or Telemetry()
    torch.manual_seed(cfg.seed)
    all_train, test_eids = split_edges(tg, cfg.seed)
    if train_eids is None:
        train_eids = np.array_split(all_train, ctx.world_size)[ctx.rank]
    in_feats = int(tg.read(cfg.feat, torch.tensor([0])).shape[1])
    model = wrap(ctx, GraphSAGE(in_feats, cfg.hidden, cfg.hidden, cfg.num_layers, cfg.dropout))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = resume(cfg, ctx, model, opt)
    batcher = EdgeBatcher(
        train_eids,
        NeighborSampler(cfg.fanouts),
        cfg.batch_size,
        cfg.num_negs,
        cfg.exclude,
        seed=cfg.seed * 1000 + ctx.rank,
    )
    metrics: dict[str, Any] = {}
    t_train = 0.0
    with BatchLoader(tg.source, batcher, cfg.num_samplers) as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app="link-prediction",
                rank=ctx.rank,
                train_edges=int(train_eids.size),
                test_edges=int(test_eids.size),
                steps_per_epoch=steps,
                start_epoch=start,
            ),
        )
        tel.begin(cfg.epochs, start)
        prefetch = use_prefetch(torch.get_num_threads(), accelerator=ctx.device.type != "cpu")

        def load(batch: Any) -> tuple[torch.Tensor, PairGraph, PairGraph, Any]:
            inp, pos, neg, blocks = batch
            return tg.read(cfg.feat, inp).float(), pos, neg, blocks

        for epoch in range(start, cfg.epochs):
            t0 = time.monotonic()
            loader.set_epoch(epoch)
            tot_loss = tot_n = n_edges = 0.0
            with epoch_batches(loader, steps, load, tel, prefetch) as batches:
                for (x_cpu, pos, neg, blocks), w in batches:
                    with autocast(cfg, ctx.device):
                        h = model(blocks, x_cpu.to(ctx.device)).float()
                    ps, ns = score(h, pos), score(h, neg)
                    loss = (
                        F.binary_cross_entropy_with_logits(
                            torch.cat([ps, ns]),
                            torch.cat([torch.ones_like(ps), torch.zeros_like(ns)]),
                        )
                        * w
                    )
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    if w:
                        tot_loss += float(loss.item())
                        tot_n += 1
                        n_edges += pos.num_edges()
            local_edges = n_edges
            tot_loss, tot_n, n_edges = all_reduce(ctx, [tot_loss, tot_n, n_edges])
            dt = time.monotonic() - t0
            t_train += dt
            save_epoch(cfg, ctx, epoch, model, opt)
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
            ev = evaluate(model, tg, cfg, test_eids, ctx.device)
            metrics = {
                "app": "link-prediction",
                "model": "sage",
                "test_auc": round(ev["test_auc"], 4),
                "test_mrr": round(ev["test_mrr"], 4),
                "random_mrr": round(random_mrr(EVAL_NEGS), 4),
                "epochs": cfg.epochs,
                "start_epoch": start,
                "train_seconds": round(t_train, 3),
                "world_size": ctx.world_size,
                "test_edges": int(test_eids.size),
            }
        barrier(ctx)
    return metrics
