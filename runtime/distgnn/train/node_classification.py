"""The built-in node-classification and node-regression apps (GraphSAGE or GAT, DDP,
sampled mini-batches; on a heterogeneous graph the R-GCN on its target node type, see
:mod:`distgnn.train.hetero_node_classification`). What differs between
the two is the :class:`~distgnn.train.objective.Objective` (loss, label dtype, metrics)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.log import kv
from distgnn.sampling import NeighborSampler, NodeBatcher
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import LABEL, TrainConfig, node_fields
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
from distgnn.train.objective import CLASSIFICATION, Objective, add, for_app
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
    evaluate: Callable[[nn.Module, str], dict[str, float]]
    """rank 0: the objective's metrics (:meth:`Objective.measure`) on the nodes of a mask
    (``cfg.val_mask`` or ``cfg.test_mask``)"""
    training: dict[str, Any]
    """the ``training`` log line's fields about the training set (``train_nodes``, ...)"""
    info: dict[str, Any] = field(default_factory=dict)
    """for the log and the metrics"""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    """saved in every checkpoint's ``extra`` (what inference rebuilds the model from)"""
    sparse: NodeEmbeddings | None = None
    """the R-GCN's embedding tables on the servers and their sparse optimizer"""
    objective: Objective = CLASSIFICATION
    app: str | None = None
    """its name in the log and the metrics (default: ``node-classification``, or the
    regression app's name)"""
    baseline: Callable[[], dict[str, float]] | None = None
    """rank 0, after training: the trivial predictor's test metric
    (:meth:`Objective.baseline`), added to the metrics"""


@torch.no_grad()
def evaluate(
    model: nn.Module,
    tg: TrainGraph,
    cfg: TrainConfig,
    ids: np.ndarray,
    device: torch.device,
    batch_size: int = 4096,
    objective: Objective = CLASSIFICATION,
) -> dict[str, float]:
    """The objective's metrics on ``ids`` with evaluation blocks (see ``eval_fanouts``),
    sampled here."""
    if ids.size == 0:
        return objective.measure((0.0, 0.0, 0.0))
    sampler = NeighborSampler(eval_fanouts(cfg, tg.num_nodes()))
    batcher = NodeBatcher(ids, sampler, batch_size, shuffle=False, seed=cfg.seed)

    def outputs(m: nn.Module, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        inp, out, blocks = batcher.decode(batcher.make(tg.source, 0, b))
        x = tg.read(cfg.feat, inp).float().to(device)
        return m(blocks, x), objective.target(tg.read(cfg.label, out)).to(device)

    return objective.over(model, range(len(batcher)), outputs)


def homogeneous_task(
    cfg: TrainConfig, tg: TrainGraph, ctx: DDPContext, train_ids: np.ndarray | None
) -> Task:
    """GraphSAGE or GAT on the graph's nodes (classification or regression: ``cfg.app``)."""
    objective = for_app(cfg.app)
    tg.require(node_fields(cfg))
    labels_all = tg.read_all(cfg.label)
    objective.check_labels(LABEL, cfg.label, labels_all)
    if train_ids is None:
        train_ids = tg.split_nodes(cfg.train_mask, ctx)
    probe = tg.read(cfg.feat, torch.tensor([0]))
    in_feats = int(probe.shape[1])
    out_feats = int(all_reduce(ctx, [float(objective.out_feats(labels_all))], op="max")[0])
    model = build_model(cfg, in_feats, out_feats)
    sampler = NeighborSampler(cfg.fanouts)
    batcher = NodeBatcher(train_ids, sampler, cfg.batch_size, seed=cfg.seed * 1000 + ctx.rank)

    def load(batch: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        inp, out, blocks = batch
        return tg.read(cfg.feat, inp).float(), objective.target(tg.read(cfg.label, out)), blocks

    ids: dict[str, np.ndarray] = {}  # each mask read once

    def measure(model: nn.Module, mask: str) -> dict[str, float]:
        if mask not in ids:
            ids[mask] = tg.mask_ids(mask)
        return evaluate(model, tg, cfg, ids[mask], ctx.device, objective=objective)

    return Task(
        model=model,
        loader=BatchLoader(tg.source, batcher, cfg.num_samplers),
        load=load,
        logits=lambda m, blocks, x: m(blocks, x),
        evaluate=measure,
        training={"train_nodes": int(train_ids.size)},
        objective=objective,
        baseline=lambda: objective.baseline(
            tg.read_all(cfg.label), tg.mask_ids(cfg.train_mask), tg.mask_ids(cfg.test_mask)
        ),
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

    torch.manual_seed(cfg.seed)
    if hetero.check_graph(cfg, tg) is not None:
        task = hetero.typed_task(cfg, tg, ctx, train_ids)
    else:
        task = homogeneous_task(cfg, tg, ctx, train_ids)
    return train(cfg, ctx, task, telemetry)


def train(
    cfg: TrainConfig, ctx: DDPContext, task: Task, telemetry: Telemetry | None = None
) -> dict[str, Any]:
    """The supervised loop every :class:`Task` shares (node classification and regression,
    the typed R-GCN, edge classification): train, validate on rank 0 and keep the best
    weights, then the selected model's test and validation metrics (meaningful on rank 0)."""
    tel = telemetry or Telemetry()
    device = ctx.device
    model = wrap(ctx, task.model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sparse = task.sparse
    start = resume(cfg, ctx, model, opt, sparse)
    info = task.info
    obj = task.objective
    metric = obj.metric
    app = task.app or (cfg.app if obj.regression else "node-classification")
    short = "acc" if metric == "accuracy" else metric  # the epoch log's train_acc, val_rmse
    vkey = f"val_{short}"
    metrics: dict[str, Any] = {}
    t_train = 0.0
    val = 0.0  # the last validation value of the objective's metric
    best_val: float | None = None
    evaluated = False  # validation measured in this run
    best_epoch: int | None = None
    best_state: dict[str, torch.Tensor] | None = None
    best_tables: dict[str, Any] | None = None  # the selected model's embedding tables
    with task.loader as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app=app,
                rank=ctx.rank,
                **task.training,
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
            tot_loss = tot_n = 0.0
            sums = (0.0, 0.0, 0.0)
            with epoch_batches(loader, steps, task.load, tel, prefetch, sync) as batches:
                for (x_cpu, y_cpu, blocks), w in batches:
                    x, y = to_device(x_cpu, device), y_cpu.to(device)
                    with batches.no_sync():
                        with autocast(cfg, device):
                            logits = task.logits(model, blocks, x).float()
                        loss = obj.loss(logits, y) * w
                        opt.zero_grad()
                        loss.backward()
                    batches.sync_gradients()  # deferred: the next batch during the all-reduce
                    opt.step()
                    if sparse:
                        sparse.step()  # the rows this step touched, on the servers
                    if w:
                        tot_loss += float(loss.item()) * y.shape[0]
                        tot_n += y.shape[0]
                        sums = add(sums, obj.sums(logits, y))
            local_n = tot_n
            tot_loss, tot_n, *summed = all_reduce(ctx, [tot_loss, tot_n, *sums])
            dt = time.monotonic() - t0
            t_train += dt
            train_m = obj.measure((summed[0], summed[1], summed[2]))[metric]
            fields: dict[str, Any] = {
                "epoch": epoch,
                "loss": round(tot_loss / max(tot_n, 1), 4),
                f"train_{short}": round(train_m, 4),
                "seconds": round(dt, 3),
            }
            if ctx.is_main and ((epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs):
                val, evaluated = task.evaluate(model, cfg.val_mask)[metric], True
                if obj.better(val, best_val):
                    best_val, best_epoch = val, epoch
                    best_state = {
                        k: v.detach().clone() for k, v in unwrap(model).state_dict().items()
                    }
                    if sparse:  # copied on the servers, not into this trainer
                        best_tables = sparse.snapshot("best")
                fields[vkey] = round(val, 4)
            save_epoch(cfg, ctx, epoch, model, opt, lambda: task.checkpoint, sparse)
            tel.epoch_end(
                epoch,
                cfg.epochs,
                fields["loss"],
                dt,
                samples=local_n,
                total_samples=tot_n,
                validation=(obj.progress_name, val) if vkey in fields else None,
            )
            if ctx.is_main:
                log.info("epoch", extra=kv(**fields))
            barrier(ctx)
        if ctx.is_main:
            if not evaluated:  # resumed at or past the last epoch: the checkpoint's model
                val = task.evaluate(model, cfg.val_mask)[metric]
            final_test = task.evaluate(model, cfg.test_mask)
            test_m, sel_val = final_test, {metric: val}
            if best_state is not None:  # model selection on the validation set
                unwrap(model).load_state_dict(best_state)
                if sparse and best_tables is not None:
                    unwrap(model).set_tables(lookups(best_tables))  # type: ignore[operator]
                test_m = task.evaluate(model, cfg.test_mask)
                sel_val = {metric: best_val if best_val is not None else val}
                if sparse:  # the trained tables again (what inference and the checkpoint use)
                    unwrap(model).set_tables(sparse.lookups())  # type: ignore[operator]
                best_tables = None  # released on the servers
            if obj.regression:  # the selected model's validation MAE too
                sel_val = task.evaluate(model, cfg.val_mask)
            # test and val metrics of the same (selected) model; final_*: the last epoch's
            metrics = {"app": app, "model": cfg.model, **info}
            metrics |= {f"test_{k}": round(v, 4) for k, v in test_m.items()}
            metrics |= {f"val_{k}": round(v, 4) for k, v in sel_val.items()}
            metrics["best_epoch"] = best_epoch
            metrics |= {f"final_test_{k}": round(v, 4) for k, v in final_test.items()}
            metrics[f"final_val_{metric}"] = round(val, 4)
            if task.baseline is not None:
                metrics |= task.baseline()
            metrics |= {
                "epochs": cfg.epochs,
                "start_epoch": start,
                "train_seconds": round(t_train, 3),
                "world_size": ctx.world_size,
                "num_samplers": cfg.num_samplers,
                "steps_per_epoch": steps,
            }
        barrier(ctx)
    return metrics
