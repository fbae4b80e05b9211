"""The GraphStorm-style task apps on a heterogeneous graph, in one process: the R-GCN
regresses the ``paper`` nodes' float target of the typed Cora (examples/dgl/
prepare_data.py: the class mix of a paper's authors' papers) better than predicting the
training mean, and the inference app writes every node type's float predictions; with
``--target-etype author:writes:paper`` the edge apps beat the majority class (is the
paper on the author's home topic) and the training mean (the author's share of papers
in the paper's class), and inference writes the test edges' predictions keyed by the
edge type with type-wise original IDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.hetero import rgcn_config, standalone_graph

from distgnn.errors import ConfigError
from distgnn.train import edge_classification, inference, node_classification
from distgnn.train import infer_output as fmt
from distgnn.train.config import TrainConfig
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
    assert m["mean_test_rmse"] == pytest.approx(baseline, abs=1e-4), (m, baseline)
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
    c = rgcn_config(app="node-regression", label="labels")
    with pytest.raises(ConfigError, match=r"node data 'labels' is int64; node-regression needs"):
        node_classification.run(c, typed_graph, CTX)


CITES, WRITES = "paper:cites:paper", "author:writes:paper"


def edge_config(app: str, label: str, tmp_path: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "app": app,
        "target_ntype": None,
        "target_etype": CITES,
        "label": label,
        "epochs": 6,
        "hidden": 32,
        "batch_size": 128,
        "lr": 0.01,
        "checkpoint_url": str(tmp_path / "ckpt"),
        "output_url": str(tmp_path / "out"),
    }
    return rgcn_config(**(base | kw))


@pytest.mark.parametrize(
    ("app", "label"), [("edge-classification", "label"), ("edge-regression", "target")]
)
def test_rgcn_edge_apps_beat_the_trivial_predictor_and_write_typed_edges(
    typed_graph: TrainGraph,
    typed_arrays: dict[str, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app: str,
    label: str,
) -> None:
    monkeypatch.setenv("DISTGNN_MANIFEST", str(typed_graph.owner))
    c = edge_config(app, label, tmp_path)
    m = edge_classification.run(c, typed_graph, CTX)
    assert m["app"] == app and m["target_etype"] == CITES, m
    e = f"edata/{CITES}"
    y = typed_arrays[f"{e}/{label}"]
    train, test = (typed_arrays[f"{e}/{k}"].astype(bool) for k in ("train_mask", "test_mask"))
    assert m["test_edges"] == int(test.sum()), m
    if app == "edge-classification":
        majority = float((y[test] == np.bincount(y[train]).argmax()).mean())
        assert m["majority_test_accuracy"] == pytest.approx(majority, abs=1e-4)
        assert m["test_accuracy"] > majority + 0.04, m
    else:
        assert m["mean_test_rmse"] == pytest.approx(mean_rmse(y, train, test), abs=1e-4)
        assert m["test_rmse"] < 0.8 * m["mean_test_rmse"], m

    s = inference.run(c, typed_graph, CTX)
    idx = fmt.read_index(c.output_url or "")
    assert idx["app"] == app and idx["target_etype"] == CITES
    assert list(idx["edge_types"]) == [CITES] and s["inference_edges"] == int(test.sum())
    assert s["inference_node_types"] == ["author", "paper"]
    got = fmt.read_edge_output(c.output_url or "", etype=CITES)
    eid = check_typed_ids(got, typed_arrays, CITES, test)
    if app == "edge-classification":
        acc = float((got["pred"] == y[eid]).mean())
        assert acc == pytest.approx(s["inference_test_accuracy"], abs=1e-5)
        assert acc == pytest.approx(m["final_test_accuracy"], abs=0.02), (acc, m)
    else:
        assert got["pred"].dtype == np.float32
        rmse = float(np.sqrt(((got["pred"] - y[eid]) ** 2).mean()))
        assert rmse == pytest.approx(s["inference_test_rmse"], abs=1e-5)
        assert rmse == pytest.approx(m["final_test_rmse"], abs=0.01), (rmse, m)


def check_typed_ids(
    got: dict[str, np.ndarray], arrays: dict[str, np.ndarray], etype: str, test: np.ndarray
) -> np.ndarray:
    """The written test edges are ``test``'s, with type-wise original IDs: the edge's row
    in the input arrays, its endpoints' IDs in their node types; returns the edge IDs."""
    eid = got["edge_id"]
    assert np.array_equal(np.sort(eid), np.flatnonzero(test))
    assert np.array_equal(got["src_id"], arrays[f"edges/{etype}/src"][eid])
    assert np.array_equal(got["dst_id"], arrays[f"edges/{etype}/dst"][eid])
    return eid


def test_edge_predictions_of_a_type_between_two_node_types_have_their_original_ids(
    typed_arrays: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authors -> papers: source and destination IDs in different node types, the edge
    type not the first (its original IDs offset in the input's edge numbering)."""
    e = f"edata/{WRITES}"
    arrays = {k: v for k, v in typed_arrays.items() if not k.startswith("edata/")}
    paper = typed_arrays[f"edges/{WRITES}/dst"]
    arrays[f"{e}/label"] = typed_arrays["ndata/paper/labels"][paper]  # the paper's class
    rng = np.random.default_rng(0).random(paper.size)
    for m, (lo, hi) in {
        "train_mask": (0, 0.6),
        "val_mask": (0.6, 0.8),
        "test_mask": (0.8, 1),
    }.items():
        arrays[f"{e}/{m}"] = (rng >= lo) & (rng < hi)
    with standalone_graph(arrays, tmp_path / "g") as tg:
        monkeypatch.setenv("DISTGNN_MANIFEST", str(tg.owner))
        c = edge_config("edge-classification", "label", tmp_path, target_etype=WRITES, epochs=1)
        m = edge_classification.run(c, tg, CTX)
        s = inference.run(c, tg, CTX)
    assert m["num_classes"] == 7 and s["inference_edges"] == int(arrays[f"{e}/test_mask"].sum())
    got = fmt.read_edge_output(c.output_url or "")
    eid = check_typed_ids(got, arrays, WRITES, arrays[f"{e}/test_mask"])
    acc = float((got["pred"] == arrays[f"{e}/label"][eid]).mean())
    assert acc == pytest.approx(s["inference_test_accuracy"], abs=1e-5)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"target_etype": WRITES}, r"--label \(trainers.app.label\): edge type "),
        ({"target_etype": "a:b:c"}, r"'a:b:c' is not an edge type of the graph"),
        ({"model": "sage", "target_etype": None}, r"sage is homogeneous.*--target-etype"),
    ],
)
def test_typed_edge_app_mistakes_name_the_field(
    typed_graph: TrainGraph, tmp_path: Path, kw: dict, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        edge_classification.run(edge_config("edge-classification", "label", tmp_path, **kw),
                                typed_graph, CTX)  # fmt: skip
