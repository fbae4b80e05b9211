"""The built-in node-classification app (GraphSAGE or GAT, DDP, sampled mini-batches; the
R-GCN on a heterogeneous graph's target node type, see
:mod:`distgnn.train.hetero_node_classification`)."""

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
from distgnn.sampling import NeighborSampler, NodeBatcher
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import TrainConfig, node_fields
from distgnn.train.ddp import DDPContext, agree_steps, all_reduce, barrier, unwrap, wrap
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import (
    autocast,
    build_model,
    deferred_sync,
    epoch_batches,
    eval_fanouts,
    resume,
    save_epoch,
    to_device,
)
from distgnn.train.proc import use_prefetch
from distgnn.train.sparse_emb import NodeEmbeddings, lookups
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")


@dataclass
class Task:
    """What the homogeneous and the typed app do differently; the loop is shared."""

    model: nn.Module
    loader: Any
    """the training batches: a context manager with ``len``, ``set_epoch`` and ``iter``"""
    load: Callable[[Any], tuple[Any, torch.Tensor, Any]]
    """a batch -> ``(inputs, labels, blocks)`` on the CPU"""
    logits: Callable[[nn.Module, Any, Any], torch.Tensor]
    """``(model, blocks, inputs on the device)`` -> the seeds' logits"""
    evaluate: Callable[[nn.Module, str], float]
    """rank 0: accuracy on the nodes of a mask (``cfg.val_mask`` or ``cfg.test_mask``)"""
    train_nodes: int
    info: dict[str, Any] = field(default_factory=dict)
    """for the log and the metrics"""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """saved in every checkpoint's ``extra`` (what inference rebuilds the model from)"""
    sparse: NodeEmbeddings | None = None
    """the R-GCN's embedding tables on the servers and their sparse optimizer"""


@torch.no_grad()
def evaluate(
    model: nn.Module,
    tg: TrainGraph,
    cfg: TrainConfig,
    ids: np.ndarray,
    device: torch.device,
    batch_size: int = 4096,
) -> float:
    """Accuracy on ``ids`` with evaluation blocks (see ``eval_fanouts``), sampled here."""
    if ids.size == 0:
        return 0.0
    m = unwrap(model)
    m.eval()
    sampler = NeighborSampler(eval_fanouts(cfg, tg.num_nodes()))
    batcher = NodeBatcher(ids, sampler, batch_size, shuffle=False, seed=cfg.seed)
    correct = 0
    for b in range(len(batcher)):
        inp, out, blocks = batcher.decode(batcher.make(tg.source, 0, b))
        x = tg.read(cfg.feat, inp).float().to(device)
        y = tg.read(cfg.label, out).long().to(device)
        correct += int((m(blocks, x).argmax(1) == y).sum().item())
    m.train()
    return correct / ids.size


def homogeneous_task(
    cfg: TrainConfig, tg: TrainGraph, ctx: DDPContext, train_ids: np.ndarray | None
) -> Task:
    """GraphSAGE or GAT on the graph's nodes."""
    tg.require(node_fields(cfg))
    if train_ids is None:
        train_ids = tg.split_nodes(cfg.train_mask, ctx)
    probe = tg.read(cfg.feat, torch.tensor([0]))
    in_feats = int(probe.shape[1])
    labels_all = tg.read_all(cfg.label).astype(np.int64)
    num_classes = int(all_reduce(ctx, [float(labels_all.max() + 1)], op="max")[0])
    model = build_model(cfg, in_feats, num_classes)
    sampler = NeighborSampler(cfg.fanouts)
    batcher = NodeBatcher(train_ids, sampler, cfg.batch_size, seed=cfg.seed * 1000 + ctx.rank)

    def load(batch: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        inp, out, blocks = batch
        return tg.read(cfg.feat, inp).float(), tg.read(cfg.label, out).long(), blocks

    ids: dict[str, np.ndarray] = {}  # each mask read once

    def accuracy(model: nn.Module, mask: str) -> float:
        if mask not in ids:
            ids[mask] = tg.mask_ids(mask)
        return evaluate(model, tg, cfg, ids[mask], ctx.device)

    return Task(
        model=model,
        loader=BatchLoader(tg.source, batcher, cfg.num_samplers),
        load=load,
        logits=lambda m, blocks, x: m(blocks, x),
        evaluate=accuracy,
        train_nodes=int(train_ids.size),
    )


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_ids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """Train; returns the metrics (meaningful on rank 0)."""
    from distgnn.train import hetero_node_classification as hetero

    tel = telemetry or Telemetry()
    torch.manual_seed(cfg.seed)
    device = ctx.device
    if hetero.check_graph(cfg, tg) is not None:
        task = hetero.typed_task(cfg, tg, ctx, train_ids)
    else:
        task = homogeneous_task(cfg, tg, ctx, train_ids)
    model = wrap(ctx, task.model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sparse = task.sparse
    start = resume(cfg, ctx, model, opt, sparse)
    info = task.info
    metrics: dict[str, Any] = {}
    t_train = 0.0
    val_acc = best_val = 0.0
    evaluated = False  # validation accuracy measured in this run
    best_epoch: int | None = None
    best_state: dict[str, torch.Tensor] | None = None
    best_tables: dict[str, Any] | None = None  # the selected model's embedding tables
    with task.loader as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app="node-classification",
                rank=ctx.rank,
                train_nodes=task.train_nodes,
                steps_per_epoch=steps,
                start_epoch=start,
                **cfg.log_fields(),
                **info,
            ),
        )
        tel.begin(cfg.epochs, start)
        prefetch = use_prefetch(torch.get_num_threads(), accelerator=device.type != "cpu")
        sync = deferred_sync(ctx, model, prefetch)
        log.info(
            "gradient all-reduce",
            extra=kv(deferred=sync is not None, prefetch_thread=prefetch),
        )

        for epoch in range(start, cfg.epochs):
            t0 = time.monotonic()
            loader.set_epoch(epoch)
            tot_loss = tot_correct = tot_n = 0.0
            with epoch_batches(loader, steps, task.load, tel, prefetch, sync) as batches:
                for (x_cpu, y_cpu, blocks), w in batches:
                    x, y = to_device(x_cpu, device), y_cpu.to(device)
                    with batches.no_sync():
                        with autocast(cfg, device):
                            logits = task.logits(model, blocks, x).float()
                        loss = F.cross_entropy(logits, y) * w
                        opt.zero_grad()
                        loss.backward()
                    batches.sync_gradients()  # deferred: the next batch during the all-reduce
                    opt.step()
                    if sparse:
                        sparse.step()  # the rows this step touched, on the servers
                    if w:
                        tot_loss += float(loss.item()) * y.numel()
                        tot_correct += float((logits.argmax(1) == y).sum().item())
                        tot_n += y.numel()
            local_n = tot_n
            tot_loss, tot_correct, tot_n = all_reduce(ctx, [tot_loss, tot_correct, tot_n])
            dt = time.monotonic() - t0
            t_train += dt
            fields: dict[str, Any] = {
                "epoch": epoch,
                "loss": round(tot_loss / max(tot_n, 1), 4),
                "train_acc": round(tot_correct / max(tot_n, 1), 4),
                "seconds": round(dt, 3),
            }
            if ctx.is_main and ((epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs):
                val_acc, evaluated = task.evaluate(model, cfg.val_mask), True
                if val_acc > best_val:
                    best_val, best_epoch = val_acc, epoch
                    best_state = {
                        k: v.detach().clone() for k, v in unwrap(model).state_dict().items()
                    }
                    if sparse:  # copied on the servers, not into this trainer
                        best_tables = sparse.snapshot("best")
                fields["val_acc"] = round(val_acc, 4)
            save_epoch(cfg, ctx, epoch, model, opt, lambda: task.checkpoint, sparse)
            tel.epoch_end(
                epoch,
                cfg.epochs,
                fields["loss"],
                dt,
                samples=local_n,
                total_samples=tot_n,
                validation=("valAccuracy", val_acc) if "val_acc" in fields else None,
            )
            if ctx.is_main:
                log.info("epoch", extra=kv(**fields))
            barrier(ctx)
        if ctx.is_main:
            if not evaluated:  # resumed at or past the last epoch: the checkpoint's model
                val_acc = task.evaluate(model, cfg.val_mask)
            final_test = task.evaluate(model, cfg.test_mask)
            test_acc, sel_val = final_test, val_acc
            if best_state is not None:  # model selection on the validation set
                unwrap(model).load_state_dict(best_state)
                if sparse and best_tables is not None:
                    unwrap(model).set_tables(lookups(best_tables))  # type: ignore[operator]
                test_acc, sel_val = task.evaluate(model, cfg.test_mask), best_val
                if sparse:  # the trained tables again (what inference and the checkpoint use)
                    unwrap(model).set_tables(sparse.lookups())  # type: ignore[operator]
                best_tables = None  # released on the servers
            metrics = {
                "app": "node-classification",
                "model": cfg.model,
                **info,
                # test and val accuracy of the same (selected) model
                "test_accuracy": round(test_acc, 4),
                "val_accuracy": round(sel_val, 4),
                "best_epoch": best_epoch,
                "final_test_accuracy": round(final_test, 4),
                "final_val_accuracy": round(val_acc, 4),
                "epochs": cfg.epochs,
                "start_epoch": start,
                "train_seconds": round(t_train, 3),
                "world_size": ctx.world_size,
                "num_samplers": cfg.num_samplers,
                "steps_per_epoch": steps,
            }
        barrier(ctx)
    return metrics
