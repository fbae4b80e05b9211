"""The built-in node-classification app (GraphSAGE or GAT, DDP, sampled mini-batches)."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn.log import kv
from distgnn.sampling import NeighborSampler, NodeBatcher
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext, agree_steps, all_reduce, barrier, unwrap, wrap
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import (
    autocast,
    build_model,
    epoch_batches,
    eval_fanouts,
    resume,
    save_epoch,
)
from distgnn.train.proc import use_prefetch
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")


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


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_ids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """Train; returns the metrics (meaningful on rank 0)."""
    tel = telemetry or Telemetry()
    torch.manual_seed(cfg.seed)
    device = ctx.device
    if train_ids is None:
        train_ids = tg.split_nodes(cfg.train_mask, ctx)
    probe = tg.read(cfg.feat, torch.tensor([0]))
    in_feats = int(probe.shape[1])
    labels_all = tg.read_all(cfg.label).astype(np.int64)
    num_classes = int(all_reduce(ctx, [float(labels_all.max() + 1)], op="max")[0])
    model = wrap(ctx, build_model(cfg, in_feats, num_classes))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = resume(cfg, ctx, model, opt)
    val_ids = tg.mask_ids(cfg.val_mask) if ctx.is_main else np.zeros(0, np.int64)
    sampler = NeighborSampler(cfg.fanouts)
    batcher = NodeBatcher(train_ids, sampler, cfg.batch_size, seed=cfg.seed * 1000 + ctx.rank)
    metrics: dict[str, Any] = {}
    t_train = 0.0
    val_acc = best_val = 0.0
    best_epoch = -1
    best_state: dict[str, torch.Tensor] | None = None
    with BatchLoader(tg.source, batcher, cfg.num_samplers) as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app="node-classification",
                rank=ctx.rank,
                train_nodes=int(train_ids.size),
                steps_per_epoch=steps,
                start_epoch=start,
                **cfg.log_fields(),
            ),
        )
        tel.begin(cfg.epochs, start)
        prefetch = use_prefetch(torch.get_num_threads(), accelerator=device.type != "cpu")

        def load(batch: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
            inp, out, blocks = batch
            return tg.read(cfg.feat, inp).float(), tg.read(cfg.label, out).long(), blocks

        for epoch in range(start, cfg.epochs):
            t0 = time.monotonic()
            loader.set_epoch(epoch)
            tot_loss = tot_correct = tot_n = 0.0
            with epoch_batches(loader, steps, load, tel, prefetch) as batches:
                for (x_cpu, y_cpu, blocks), w in batches:
                    x, y = x_cpu.to(device), y_cpu.to(device)
                    with autocast(cfg, device):
                        logits = model(blocks, x).float()
                    loss = F.cross_entropy(logits, y) * w
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
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
                val_acc = evaluate(model, tg, cfg, val_ids, device)
                if val_acc > best_val:
                    best_val, best_epoch = val_acc, epoch
                    best_state = {
                        k: v.detach().clone() for k, v in unwrap(model).state_dict().items()
                    }
                fields["val_acc"] = round(val_acc, 4)
            save_epoch(cfg, ctx, epoch, model, opt)
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
            test_ids = tg.mask_ids(cfg.test_mask)
            final_test = evaluate(model, tg, cfg, test_ids, device)
            test_acc, sel_val = final_test, val_acc
            if best_state is not None:  # model selection on the validation set
                unwrap(model).load_state_dict(best_state)
                test_acc, sel_val = evaluate(model, tg, cfg, test_ids, device), best_val
            metrics = {
                "app": "node-classification",
                "model": cfg.model,
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
