"""The built-in apps in one process on a small synthetic graph (no process group)."""

from __future__ import annotations

import numpy as np
import pytest

from distgnn.contract import TrainerEnv
from distgnn.sampling import LocalGraph
from distgnn.sampling.source import LocalSource
from distgnn.train import link_prediction, node_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import init_ddp
from distgnn.train.graph import TrainGraph


def planted_graph(n: int = 300, seed: int = 0) -> TrainGraph:
    """Two communities; the label is the community and features are noisy labels."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    src = rng.integers(0, n, 6 * n)
    groups = [np.flatnonzero(label == c) for c in (0, 1)]
    dst = np.where(
        label[src] == 0,
        groups[0][rng.integers(0, groups[0].size, src.size)],
        groups[1][rng.integers(0, groups[1].size, src.size)],
    )
    feat = (np.eye(2)[label] + rng.normal(0, 1.5, (n, 2))).astype(np.float32)
    idx = rng.permutation(n)
    masks = {k: np.zeros(n, bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][idx[:60]] = True
    masks["val_mask"][idx[60:120]] = True
    masks["test_mask"][idx[120:]] = True
    g = LocalGraph(np.r_[src, dst], np.r_[dst, src], n, {"feat": feat, "label": label, **masks})
    return TrainGraph(g, LocalSource(g))


@pytest.mark.parametrize(
    ("model", "precision"), [("sage", "32"), ("gat", "32"), ("sage", "bf16-mixed")]
)
def test_node_classification_learns_from_neighbours(model: str, precision: str) -> None:
    tg = planted_graph()
    cfg = TrainConfig(
        model=model,
        epochs=4,
        hidden=16,
        batch_size=16,
        fanouts=[5, 5],
        dropout=0.0,
        lr=0.02,
        precision=precision,
    ).validate()
    m = node_classification.run(cfg, tg, init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1)))
    assert m["model"] == model and m["epochs"] == 4 and m["steps_per_epoch"] == 4
    # features alone are ~66% accurate; averaging same-community neighbours does much better
    assert m["test_accuracy"] > 0.8, m
    # the trivial predictor (the training nodes' most frequent class), from the same masks
    g = tg.g
    label, train, test = (np.asarray(g.ndata[k]) for k in ("label", "train_mask", "test_mask"))
    top = np.bincount(label[train.astype(bool)]).argmax()
    majority = float((label[test.astype(bool)] == top).mean())
    assert m["majority_test_accuracy"] == pytest.approx(majority, abs=1e-4), m


@pytest.mark.parametrize("precision", ["32", "bf16-mixed"])
def test_link_prediction_metrics(precision: str) -> None:
    tg = planted_graph()
    cfg = TrainConfig(
        app="link-prediction",
        epochs=2,
        hidden=8,
        batch_size=256,
        fanouts=[3, 3],
        precision=precision,
    ).validate()
    m = link_prediction.run(cfg, tg, init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1)))
    assert 0.0 <= m["test_auc"] <= 1.0 and m["test_edges"] == int(tg.num_edges() * 0.05)
    assert m["random_mrr"] == pytest.approx(np.mean(1 / np.arange(1, 22)), abs=1e-4)
