"""The built-in edge-classification and edge-regression apps (GraphStorm's edge
classification and regression): a GraphSAGE or GAT encoder over sampled blocks and an
MLP on the two endpoints' embeddings (concatenated) predicts each labelled edge's class
(``edge-classification``: integer edge data ``--label``, cross-entropy, accuracy) or
target (``edge-regression``: float edge data, ``[E]`` or ``[E, k]``, MSE, RMSE and MAE).
What differs between the two is the :class:`~distgnn.train.objective.Objective`.

Edges are split by the edge masks ``--train-mask`` / ``--val-mask`` / ``--test-mask``
(DGL's ``edge_split`` over the training mask); mini-batches are the link-prediction
app's edge batches (:class:`~distgnn.sampling.EdgeBatcher`) without negatives. Rank 0
measures the validation metric every epoch and keeps the best weights, as node
classification does. On a graph with node and edge types ``--model rgcn
--target-etype SRC:REL:DST`` trains the R-GCN with the same head on that edge type's
labelled edges (:mod:`distgnn.train.hetero_edge_classification`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.sampling import EdgeBatcher, NeighborSampler
from distgnn.sampling.batches import EID
from distgnn.sampling.loader import BatchLoader
from distgnn.train.config import FEAT, LABEL, TEST_MASK, TRAIN_MASK, VAL_MASK, TrainConfig
from distgnn.train.ddp import DDPContext, all_reduce
from distgnn.train.graph import TrainGraph
from distgnn.train.loop import build_model, eval_fanouts
from distgnn.train.node_classification import Task, train
from distgnn.train.objective import Objective, for_app
from distgnn.train.telemetry import Telemetry
from distgnn.train.typed import edge_mask_ids, read_all_edges

APPS = ("edge-classification", "edge-regression")
EVAL_BATCH = 1024


def edge_head(hidden: int, out_feats: int) -> nn.Sequential:
    """The MLP on ``[h_u, h_v]``: ``out_feats`` class logits or regression targets."""
    return nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_feats))


def pair_outputs(head: nn.Module, hu: torch.Tensor, hv: torch.Tensor) -> torch.Tensor:
    """The head's output for edges whose endpoints' embeddings are ``hu`` and ``hv``."""
    return head(torch.cat([hu, hv], dim=1))


class EdgeClassifier(nn.Module):
    """``encoder(blocks, x)`` node embeddings, then ``head([h_u, h_v])``: class logits
    (edge classification) or the predicted target (edge regression)."""

    def __init__(self, encoder: nn.Module, hidden: int, out_feats: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = edge_head(hidden, out_feats)

    def forward(
        self, blocks: Any, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        h = self.encoder(blocks, x)
        return pair_outputs(self.head, h.index_select(0, src), h.index_select(0, dst))


def encoder_state(state: dict[str, Any]) -> dict[str, Any]:
    """The encoder's weights of an edge app's checkpoint, as a built-in model's (what
    inference computes every node's embedding with)."""
    return _prefixed(state, "encoder.")


def head_from_state(state: dict[str, Any]) -> nn.Module:
    """The head of an edge app's checkpoint, weights loaded (ConfigError if absent)."""
    head = _prefixed(state, "head.")
    if "0.weight" not in head or "2.weight" not in head:
        raise ConfigError("checkpoint: no head.* weights (not an edge app's model)")
    hidden, out_feats = int(head["0.weight"].shape[0]), int(head["2.weight"].shape[0])
    model = edge_head(hidden, out_feats)
    try:
        model.load_state_dict(head)
    except RuntimeError as e:
        raise ConfigError(f"checkpoint: head weights do not fit the edge head ({e})") from e
    return model.eval()


def _prefixed(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def check_graph(cfg: TrainConfig, tg: TrainGraph) -> None:
    """ConfigError naming the field when the (homogeneous) graph does not fit the app."""
    tg.require({FEAT: cfg.feat})
    fields = {LABEL: cfg.label, TRAIN_MASK: cfg.train_mask, VAL_MASK: cfg.val_mask}
    tg.require_edges(fields | {TEST_MASK: cfg.test_mask})


def _batcher(eids: np.ndarray, fanouts: list[int], batch: int, shuffle: bool, seed: int) -> Any:
    # no negatives; the labelled edges stay in the sampled neighbourhoods
    return EdgeBatcher(eids, NeighborSampler(fanouts), batch, 0, "none", shuffle, seed=seed)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    tg: TrainGraph,
    cfg: TrainConfig,
    eids: np.ndarray,
    device: torch.device,
    objective: Objective,
) -> dict[str, float]:
    """The objective's metrics on edges ``eids`` with evaluation blocks (see
    ``eval_fanouts``)."""
    if eids.size == 0:
        return objective.measure((0.0, 0.0, 0.0))
    batcher = _batcher(eids, eval_fanouts(cfg, tg.num_nodes()), EVAL_BATCH, False, cfg.seed)

    def outputs(m: nn.Module, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, pairs = _load(tg, cfg, batcher.decode(batcher.make(tg.source, 0, b)), objective)
        return logits(m, pairs, x.to(device), device), y.to(device)

    return objective.over(model, range(len(batcher)), outputs)


def _load(
    tg: TrainGraph, cfg: TrainConfig, batch: Any, objective: Objective
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """A batch -> ``(input features, labels, (blocks, src, dst))`` on the CPU."""
    inp, pairs, _neg, blocks = batch
    y = objective.target(tg.read_edges(cfg.label, pairs.edata[EID]))
    return tg.read(cfg.feat, inp).float(), y, (blocks, pairs.src, pairs.dst)


def logits(m: nn.Module, pairs: Any, x: Any, device: torch.device) -> torch.Tensor:
    """The model's outputs for a batch's ``(blocks, src, dst)`` on the device's inputs."""
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
    from distgnn.train import hetero_edge_classification as hetero

    torch.manual_seed(cfg.seed)
    objective = for_app(cfg.app)
    checked = hetero.check_graph(cfg, tg)  # None: a homogeneous model and graph
    if checked is None:
        check_graph(cfg, tg)
        labels = tg.read_all_edges(cfg.label)
        mask_ids = functools.cache(tg.edge_mask_ids)  # the test mask: baseline and count
    else:
        cet = checked[1]
        labels = read_all_edges(tg.g, cet, cfg.label)
        mask_ids = functools.cache(functools.partial(edge_mask_ids, tg.g, cet))

    objective.check_labels(LABEL, cfg.label, labels)
    out_feats = int(all_reduce(ctx, [float(objective.out_feats(labels))], op="max")[0])
    if checked is not None:
        if train_eids is None:
            train_eids = hetero.split_train(tg, checked[1], cfg.train_mask, ctx)
        task = hetero.typed_task(cfg, tg, ctx, objective, out_feats, train_eids)
    else:
        if train_eids is None:
            train_eids = tg.split_edges(cfg.train_mask, ctx)
        task = homogeneous_task(cfg, tg, ctx, objective, out_feats, train_eids)
    task.baseline = lambda: objective.baseline(
        labels, mask_ids(cfg.train_mask), mask_ids(cfg.test_mask)
    )
    metrics = train(cfg, ctx, task, telemetry)
    if ctx.is_main:
        width = "targets" if objective.regression else "classes"
        metrics |= {f"num_{width}": out_feats, "test_edges": int(mask_ids(cfg.test_mask).size)}
    return metrics


def homogeneous_task(
    cfg: TrainConfig,
    tg: TrainGraph,
    ctx: DDPContext,
    objective: Objective,
    out_feats: int,
    train_eids: np.ndarray,
) -> Task:
    """GraphSAGE or GAT with the edge head, edge batches and evaluation on the edge masks."""
    in_feats = int(tg.read(cfg.feat, torch.tensor([0])).shape[1])
    net = EdgeClassifier(build_model(cfg, in_feats, cfg.hidden), cfg.hidden, out_feats)
    batcher = _batcher(train_eids, cfg.fanouts, cfg.batch_size, True, cfg.seed * 1000 + ctx.rank)
    ids: dict[str, np.ndarray] = {}  # each edge mask read once (rank 0)

    def measure(model: nn.Module, mask: str) -> dict[str, float]:
        if mask not in ids:
            ids[mask] = tg.edge_mask_ids(mask)
        return evaluate(model, tg, cfg, ids[mask], ctx.device, objective)

    width = "targets" if objective.regression else "classes"
    return Task(
        model=net,
        loader=BatchLoader(tg.source, batcher, cfg.num_samplers),
        load=lambda b: _load(tg, cfg, b, objective),
        logits=lambda m, pairs, x: logits(m, pairs, x, ctx.device),
        evaluate=measure,
        training={"train_edges": int(train_eids.size), width: out_feats},
        objective=objective,
        app=cfg.app,
    )
