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

from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.sampling import EdgeBatcher, NeighborSampler
from distgnn.sampling.batches import EID
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import FEAT, LABEL, TEST_MASK, TRAIN_MASK, VAL_MASK, TrainConfig
from distgnn.train.ddp import DDPContext, all_reduce, unwrap
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import build_model, eval_fanouts
from distgnn.train.node_classification import Task, train
from distgnn.train.objective import Objective, add
from distgnn.train.telemetry import Telemetry
from distgnn.train.typed import typing_of

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
) -> dict[str, float]:
    """``{"accuracy"}`` on edges ``eids`` with evaluation blocks (see ``eval_fanouts``)."""
    if eids.size == 0:
        return OBJECTIVE.measure((0.0, 0.0, 0.0))
    m = unwrap(model)
    m.eval()
    batcher = _batcher(eids, eval_fanouts(cfg, tg.num_nodes()), EVAL_BATCH, False, cfg.seed)
    sums = (0.0, 0.0, 0.0)
    for b in range(len(batcher)):
        x, y, pairs = _load(tg, cfg, batcher.decode(batcher.make(tg.source, 0, b)))
        sums = add(sums, OBJECTIVE.sums(_logits(m, pairs, x.to(device), device), y.to(device)))
    m.train()
    return OBJECTIVE.measure(sums)


def _load(tg: TrainGraph, cfg: TrainConfig, batch: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """A batch -> ``(input features, labels, (blocks, src, dst))`` on the CPU."""
    inp, pairs, _neg, blocks = batch
    y = tg.read_edges(cfg.label, pairs.edata[EID]).long()
    return tg.read(cfg.feat, inp).float(), y, (blocks, pairs.src, pairs.dst)


def _logits(m: nn.Module, pairs: Any, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    blocks, src, dst = pairs
    return m(blocks, x, src.to(device), dst.to(device))


def run(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    train_eids: np.ndarray | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """Train (the supervised loop node classification runs, :func:`train`); returns the
    metrics (meaningful on rank 0)."""
    torch.manual_seed(cfg.seed)
    check_graph(cfg, tg)
    labels = tg.read_all_edges(cfg.label)
    OBJECTIVE.check_labels(LABEL, cfg.label, labels)
    if train_eids is None:
        train_eids = tg.split_edges(cfg.train_mask, ctx)
    num_classes = int(all_reduce(ctx, [float(OBJECTIVE.out_feats(labels))], op="max")[0])
    in_feats = int(tg.read(cfg.feat, torch.tensor([0])).shape[1])
    net = EdgeClassifier(build_model(cfg, in_feats, cfg.hidden), cfg.hidden, num_classes)
    batcher = _batcher(train_eids, cfg.fanouts, cfg.batch_size, True, cfg.seed * 1000 + ctx.rank)
    ids: dict[str, np.ndarray] = {}  # each edge mask read once (rank 0)

    def measure(model: nn.Module, mask: str) -> dict[str, float]:
        if mask not in ids:
            ids[mask] = tg.edge_mask_ids(mask)
        return evaluate(model, tg, cfg, ids[mask], ctx.device)

    task = Task(
        model=net,
        loader=BatchLoader(tg.source, batcher, cfg.num_samplers),
        load=lambda b: _load(tg, cfg, b),
        logits=lambda m, pairs, x: _logits(m, pairs, x, ctx.device),
        evaluate=measure,
        training={"train_edges": int(train_eids.size), "classes": num_classes},
        objective=OBJECTIVE,
        app=APP,
    )
    metrics = train(cfg, ctx, task, telemetry)
    if ctx.is_main:
        test = ids[cfg.test_mask]
        metrics |= {
            "majority_test_accuracy": round(_majority(labels, train_eids, test), 4),
            "num_classes": num_classes,
            "test_edges": int(test.size),
        }
    return metrics


def _majority(labels: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    """Accuracy on the test edges of always predicting the most frequent class of this
    trainer's training edges (the trivial baseline)."""
    if test.size == 0 or train.size == 0:
        return 0.0
    top = int(np.bincount(labels[train].astype(np.int64)).argmax())
    return float((labels[test] == top).mean())
