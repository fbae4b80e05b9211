"""The built-in edge-classification app (GraphStorm's edge classification): a GraphSAGE or
GAT encoder over sampled blocks and an MLP on the two endpoints' embeddings (concatenated)
predicts each labelled edge's class (``--label``: integer edge data).

Edges are split by the edge masks ``--train-mask`` / ``--val-mask`` / ``--test-mask``
(DGL's ``edge_split`` over the training mask); mini-batches are the link-prediction
app's edge batches (:class:`~distgnn.sampling.EdgeBatcher`) without negatives. Rank 0
measures validation accuracy every epoch and keeps the best weights, as node
classification does. Graphs with node or edge types are refused in this version.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.sampling import EdgeBatcher, NeighborSampler
from distgnn.sampling.batches import EID
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import FEAT, LABEL, TEST_MASK, TRAIN_MASK, VAL_MASK, TrainConfig
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
)
from distgnn.train.objective import Objective, add
from distgnn.train.proc import use_prefetch
from distgnn.train.telemetry import Telemetry
from distgnn.train.typed import typing_of

log = logging.getLogger("distgnn.train")
APP = "edge-classification"
OBJECTIVE = Objective(APP, where="edge data")
EVAL_BATCH = 1024


class EdgeClassifier(nn.Module):
    """``encoder(blocks, x)`` node embeddings, then ``head([h_u, h_v])`` class logits."""

    def __init__(self, encoder: nn.Module, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(
        self, blocks: Any, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        h = self.encoder(blocks, x)
        pair = torch.cat([h.index_select(0, src), h.index_select(0, dst)], dim=1)
        return self.head(pair)


def encoder_state(state: dict[str, Any]) -> dict[str, Any]:
    """The encoder's weights of an edge classifier's checkpoint, as a built-in model's
    (what inference writes every node's embedding with)."""
    return {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}


def check_graph(cfg: TrainConfig, tg: TrainGraph) -> None:
    """ConfigError naming the field when the graph does not fit the app."""
    typing = typing_of(tg)
    if typing is not None:
        raise ConfigError(
            f"--model (trainers.app.model): {APP} trains sage or gat on a graph with one node "
            f"and edge type in this version; this one has node types {typing.ntypes}"
        )
    tg.require({FEAT: cfg.feat})
    fields = {LABEL: cfg.label, TRAIN_MASK: cfg.train_mask, VAL_MASK: cfg.val_mask}
    tg.require_edges(fields | {TEST_MASK: cfg.test_mask})


def _batcher(eids: np.ndarray, fanouts: list[int], batch: int, shuffle: bool, seed: int) -> Any:
    # no negatives; the labelled edges stay in the sampled neighbourhoods
    return EdgeBatcher(eids, NeighborSampler(fanouts), batch, 0, "none", shuffle, seed=seed)


@torch.no_grad()
def evaluate(
    model: nn.Module, tg: TrainGraph, cfg: TrainConfig, eids: np.ndarray, device: torch.device
) -> float:
    """Accuracy on edges ``eids`` with evaluation blocks (see ``eval_fanouts``)."""
    if eids.size == 0:
        return 0.0
    m = unwrap(model)
    m.eval()
    batcher = _batcher(eids, eval_fanouts(cfg, tg.num_nodes()), EVAL_BATCH, False, cfg.seed)
    sums = (0.0, 0.0, 0.0)
    for b in range(len(batcher)):
        x, src, dst, y, blocks = _load(tg, cfg, batcher.decode(batcher.make(tg.source, 0, b)))
        out = m(blocks, x.to(device), src.to(device), dst.to(device))
        sums = add(sums, OBJECTIVE.sums(out, y.to(device)))
    m.train()
    return OBJECTIVE.measure(sums)["accuracy"]


def _load(
    tg: TrainGraph, cfg: TrainConfig, batch: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """A batch -> ``(input features, src, dst, labels, blocks)`` on the CPU."""
    inp, pairs, _neg, blocks = batch
    y = tg.read_edges(cfg.label, pairs.edata[EID]).long()
    return tg.read(cfg.feat, inp).float(), pairs.src, pairs.dst, y, blocks


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_eids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """Train; returns the metrics (meaningful on rank 0)."""
    tel = telemetry or Telemetry()
    torch.manual_seed(cfg.seed)
    device = ctx.device
    check_graph(cfg, tg)
    labels = tg.read_all_edges(cfg.label)
    OBJECTIVE.check_labels(LABEL, cfg.label, labels)
    if train_eids is None:
        train_eids = tg.split_edges(cfg.train_mask, ctx)
    num_classes = int(all_reduce(ctx, [float(OBJECTIVE.out_feats(labels))], op="max")[0])
    in_feats = int(tg.read(cfg.feat, torch.tensor([0])).shape[1])
    net = EdgeClassifier(build_model(cfg, in_feats, cfg.hidden), cfg.hidden, num_classes)
    model = wrap(ctx, net)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = resume(cfg, ctx, model, opt)
    batcher = _batcher(train_eids, cfg.fanouts, cfg.batch_size, True, cfg.seed * 1000 + ctx.rank)
    ids: dict[str, np.ndarray] = {}  # each edge mask read once (rank 0)

    def accuracy(mask: str) -> float:
        if mask not in ids:
            ids[mask] = np.flatnonzero(tg.read_all_edges(mask).astype(bool)).astype(np.int64)
        return evaluate(model, tg, cfg, ids[mask], device)

    metrics: dict[str, Any] = {}
    t_train, val, best_val = 0.0, 0.0, None
    evaluated, best_epoch = False, None
    best_state: dict[str, torch.Tensor] | None = None
    with BatchLoader(tg.source, batcher, cfg.num_samplers) as loader:
        steps = agree_steps(ctx, len(loader))
        log.info(
            "training",
            extra=kv(
                app=APP,
                rank=ctx.rank,
                train_edges=int(train_eids.size),
                classes=num_classes,
                steps_per_epoch=steps,
                start_epoch=start,
                **cfg.log_fields(),
            ),
        )
        tel.begin(cfg.epochs, start)
        prefetch = use_prefetch(torch.get_num_threads(), accelerator=device.type != "cpu")
        sync = deferred_sync(ctx, model, prefetch)
        log.info(
            "gradient all-reduce", extra=kv(deferred=sync is not None, prefetch_thread=prefetch)
        )
        load = lambda b: _load(tg, cfg, b)  # noqa: E731
        for epoch in range(start, cfg.epochs):
            t0 = time.monotonic()
            loader.set_epoch(epoch)
            tot_loss = tot_n = 0.0
            sums = (0.0, 0.0, 0.0)
            with epoch_batches(loader, steps, load, tel, prefetch, sync) as batches:
                for (x, src, dst, y_cpu, blocks), w in batches:
                    y = y_cpu.to(device)
                    with batches.no_sync():
                        with autocast(cfg, device):
                            out = model(blocks, x.to(device), src.to(device), dst.to(device))
                        loss = OBJECTIVE.loss(out.float(), y) * w
                        opt.zero_grad()
                        loss.backward()
                    batches.sync_gradients()  # deferred: the next batch during the all-reduce
                    opt.step()
                    if w:
                        tot_loss += float(loss.item()) * y.shape[0]
                        tot_n += y.shape[0]
                        sums = add(sums, OBJECTIVE.sums(out.float(), y))
            local_n = tot_n
            tot_loss, tot_n, correct = all_reduce(ctx, [tot_loss, tot_n, sums[0]])
            dt = time.monotonic() - t0
            t_train += dt
            fields: dict[str, Any] = {
                "epoch": epoch,
                "loss": round(tot_loss / max(tot_n, 1), 4),
                "train_acc": round(correct / max(tot_n, 1), 4),
                "seconds": round(dt, 3),
            }
            if ctx.is_main and ((epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs):
                val, evaluated = accuracy(cfg.val_mask), True
                if OBJECTIVE.better(val, best_val):
                    best_val, best_epoch = val, epoch
                    best_state = {
                        k: v.detach().clone() for k, v in unwrap(model).state_dict().items()
                    }
                fields["val_acc"] = round(val, 4)
            save_epoch(cfg, ctx, epoch, model, opt)
            tel.epoch_end(
                epoch,
                cfg.epochs,
                fields["loss"],
                dt,
                samples=local_n,
                total_samples=tot_n,
                validation=("valAccuracy", val) if "val_acc" in fields else None,
            )
            if ctx.is_main:
                log.info("epoch", extra=kv(**fields))
            barrier(ctx)
        if ctx.is_main:
            if not evaluated:  # resumed at or past the last epoch: the checkpoint's model
                val = accuracy(cfg.val_mask)
            final_test = accuracy(cfg.test_mask)
            test_acc, sel_val = final_test, val
            if best_state is not None:  # model selection on the validation set
                unwrap(model).load_state_dict(best_state)
                test_acc, sel_val = accuracy(cfg.test_mask), best_val or 0.0
            metrics = {
                "app": APP,
                "model": cfg.model,
                # test and val accuracy of the same (selected) model
                "test_accuracy": round(test_acc, 4),
                "val_accuracy": round(sel_val, 4),
                "best_epoch": best_epoch,
                "final_test_accuracy": round(final_test, 4),
                "final_val_accuracy": round(val, 4),
                "majority_test_accuracy": round(
                    _majority(labels, train_eids, ids[cfg.test_mask]), 4
                ),
                "num_classes": num_classes,
                "test_edges": int(ids[cfg.test_mask].size),
                "epochs": cfg.epochs,
                "start_epoch": start,
                "train_seconds": round(t_train, 3),
                "world_size": ctx.world_size,
                "num_samplers": cfg.num_samplers,
                "steps_per_epoch": steps,
            }
        barrier(ctx)
    return metrics


def _majority(labels: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    """Accuracy on the test edges of always predicting the most frequent class of this
    trainer's training edges (the trivial baseline)."""
    if test.size == 0 or train.size == 0:
        return 0.0
    top = int(np.bincount(labels[train].astype(np.int64)).argmax())
    return float((labels[test] == top).mean())
