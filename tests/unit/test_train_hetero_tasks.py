"""The GraphStorm-style task apps on a heterogeneous graph, in one process: the R-GCN
regresses the ``paper`` nodes' float target of the typed Cora (examples/dgl/
prepare_data.py: the class mix of a paper's authors' papers) better than predicting the
training mean, and the inference app writes every node type's float predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support.hetero import rgcn_config

from distgnn.train import infer_output as fmt
from distgnn.train import inference, node_classification
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph

CTX = DDPContext(0, 1, torch.device("cpu"))


def mean_rmse(y: np.ndarray, train: np.ndarray, test: np.ndarray) -> float:
    """The trivial predictor's test RMSE: always the training rows' mean."""
    d = y[test] - y[train].mean(0)
    return float(np.sqrt((d * d).mean()))


def test_rgcn_node_regression_beats_the_mean_and_infers_float_predictions(
    typed_graph: TrainGraph,
    typed_arrays: dict[str, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISTGNN_MANIFEST", str(typed_graph.owner))
    c = rgcn_config(
        app="node-regression", label="target", epochs=10, hidden=32,
        checkpoint_url=str(tmp_path / "ckpt"), output_url=str(tmp_path / "out"),
    )  # fmt: skip
    m = node_classification.run(c, typed_graph, CTX)
    assert m["app"] == "node-regression" and m["target_ntype"] == "paper", m
    y = typed_arrays["ndata/paper/target"]
    train, test = (
        typed_arrays[f"ndata/paper/{k}"].astype(bool) for k in ("train_mask", "test_mask")
    )
    baseline = mean_rmse(y, train, test)
    assert m["test_rmse"] < 0.75 * baseline, (m, baseline)
    assert 0 < m["test_mae"] < m["test_rmse"] + 1e-6 and "test_accuracy" not in m, m

    s = inference.run(c, typed_graph, CTX)
    assert s["inference_node_types"] == ["author", "paper"]
    # the layer-wise pass over all neighbours is the final model's full-neighbour evaluation
    assert s["inference_test_rmse"] == pytest.approx(m["final_test_rmse"], abs=0.01), (s, m)
    idx = fmt.read_index(c.output_url or "")
    assert idx["app"] == "node-regression" and idx["target_ntype"] == "paper"
    assert idx["arrays"]["pred"] == {"dtype": "float32", "shape": [7]}
    paper = fmt.read_output(c.output_url or "", "paper")
    assert paper["pred"].dtype == np.float32 and "prob" not in paper
    pred = np.empty_like(y)
    pred[paper["orig_id"]] = paper["pred"]
    rmse = float(np.sqrt(((pred[test] - y[test]) ** 2).mean()))
    assert rmse == pytest.approx(s["inference_test_rmse"], abs=1e-5)


def test_typed_node_regression_refuses_class_ids(typed_graph: TrainGraph) -> None:
    from distgnn.errors import ConfigError

    c = rgcn_config(app="node-regression", label="labels")
    with pytest.raises(ConfigError, match=r"node data 'labels' is int64; node-regression needs"):
        node_classification.run(c, typed_graph, CTX)
