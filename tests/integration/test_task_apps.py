"""The GraphStorm-style task apps as real trainer processes on Cora's derived targets
(``examples/dgl/prepare_data.py``'s ``cora-tasks.npz``): node regression learns (its RMSE
beats predicting the training mean) and writes its predictions; edge classification
learns on 2 partitions with 2 trainers (its accuracy beats the majority class), edge
regression too (its RMSE beats predicting the training edges' mean), and both write
every node's embedding and their test edges' predictions, whose metric is the one
reported; a label of the wrong dtype or a missing edge field is a one-line error with
exit 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from servers import running_servers
from trainers import TrainResult, run_trainers

from distgnn.partition.partitioner import partition_graph
from distgnn.train.infer_output import read_edge_output, read_output

TRAIN = ["distgnn.cli", "train"]


def _prepare_data(repo_root: Path) -> Any:
    path = repo_root / "examples" / "dgl" / "prepare_data.py"
    spec = importlib.util.spec_from_file_location("prepare_data", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory, cora_path: Path, repo_root: Path) -> Path:
    """``cora-tasks.npz``, written by the example's own data preparation."""
    with np.load(cora_path, allow_pickle=False) as z:
        cora = {k: z[k] for k in z.files}
    out = tmp_path_factory.mktemp("tasks") / "cora-tasks.npz"
    np.savez(out, **_prepare_data(repo_root).tasks(cora))
    return out


@pytest.fixture(scope="module")
def tasks_parts(tmp_path_factory: pytest.TempPathFactory, tasks: Path) -> Path:
    out = tmp_path_factory.mktemp("tasks-parts")
    partition_graph(str(tasks), 2, str(out), "cora-tasks", progress=False)
    return out / "cora-tasks.json"


def test_node_regression_beats_the_mean_and_writes_predictions(tasks: Path, tmp_path: Path) -> None:
    argv = [
        *TRAIN, "node-regression", "--label", "target", "--epochs", "4", "--hidden", "64",
        "--fanouts", "10,10", "--batch-size", "64", "--lr", "0.005", "--dropout", "0.2",
        "--checkpoint-url", str(tmp_path / "ckpt"), "--infer-after-training",
        "--output-url", str(tmp_path / "out"),
    ]  # fmt: skip
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": str(tasks)}, tmp_path)
    assert res.returncodes == [0], res.explain()
    m = res.metrics
    assert m is not None and m["app"] == "node-regression", m
    with np.load(tasks, allow_pickle=False) as z:
        target, train, test = z["target"], z["train_mask"], z["test_mask"]
    mean = target[train].mean(0)
    baseline = float(np.sqrt(((target[test] - mean) ** 2).mean()))
    assert m["mean_test_rmse"] == pytest.approx(baseline, abs=1e-4), (m, baseline)
    assert m["test_rmse"] < 0.75 * baseline, (m, baseline)
    assert 0 < m["test_mae"] < m["test_rmse"] + 1e-6 and m["val_rmse"] > 0, m
    assert m["best_epoch"] is not None and "test_accuracy" not in m
    # the written predictions are the last checkpoint's: their RMSE is the final one
    out = read_output(str(tmp_path / "out"))
    assert out["pred"].dtype == np.float32 and out["pred"].shape == target.shape
    assert "prob" not in out
    pred = out["pred"][np.argsort(out["orig_id"])]
    rmse = float(np.sqrt(((pred[test] - target[test]) ** 2).mean()))
    assert rmse == pytest.approx(m["inference_test_rmse"], abs=1e-4)
    assert rmse == pytest.approx(m["final_test_rmse"], abs=1e-3)
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["app"] == "node-regression"
    assert index["arrays"]["pred"] == {"dtype": "float32", "shape": [7]}


@pytest.mark.parametrize(
    ("app", "label", "message"),
    [
        ("node-regression", "label", "node data 'label' is int64; node-regression needs a float"),
        (
            "node-classification",
            "target",
            "node data 'target' is float32; node-classification needs integer class IDs (for "
            "a float target use node-regression)",
        ),
        ("edge-regression", "label", "edge data 'label' is int64; edge-regression needs a float"),
        (
            "edge-classification",
            "target",
            "edge data 'target' is float32; edge-classification needs integer class IDs (for "
            "a float target use edge-regression)",
        ),
    ],
)
def test_a_label_of_the_wrong_dtype_is_a_one_line_error(
    tasks: Path, tmp_path: Path, app: str, label: str, message: str
) -> None:
    argv = [*TRAIN, app, "--label", label, "--epochs", "1"]
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": str(tasks)}, tmp_path)
    assert res.returncodes == [2], res.explain()
    line = f"distgnn train: error: --label (trainers.app.label): {message}"
    assert line in res.stderr[0].splitlines()[-1], res.stderr[0][-500:]
    assert res.metrics is None


def test_edge_classification_beats_the_majority_class(
    tasks: Path, tasks_parts: Path, tmp_path: Path
) -> None:
    argv = [
        *TRAIN, "edge-classification", "--epochs", "4", "--hidden", "64", "--fanouts", "10,10",
        "--batch-size", "256", "--lr", "0.005", "--checkpoint-url", str(tmp_path / "ckpt"),
        "--infer-after-training", "--output-url", str(tmp_path / "out"),
    ]  # fmt: skip
    res = _on_servers(argv, tasks_parts, tmp_path)
    m = res.metrics
    assert m is not None and m["app"] == "edge-classification", m
    with np.load(tasks, allow_pickle=False) as z:
        y, train, test = z["edata/label"], z["edata/train_mask"], z["edata/test_mask"]
    majority = float((y[test] == np.bincount(y[train]).argmax()).mean())
    assert m["test_edges"] == int(test.sum()) and m["num_classes"] == 2, m
    assert m["test_accuracy"] > majority + 0.03, (m, majority)
    # each trainer trained on its edge_split share of the training edges
    lines = [json.loads(x) for e in res.stderr for x in e.splitlines() if x.startswith("{")]
    shares = [x["train_edges"] for x in lines if x.get("msg") == "training"]
    assert sorted(shares) == [int(train.sum()) // 2, (int(train.sum()) + 1) // 2], shares
    # inference: the encoder's embedding of every node, and the test edges' predictions
    out = read_output(str(tmp_path / "out"))
    assert sorted(out) == ["embedding", "orig_id"] and out["embedding"].shape == (2708, 64)
    edges = _test_edge_predictions(tasks, tmp_path / "out")
    assert sorted(edges) == ["dst_id", "edge_id", "pred", "prob", "src_id"]
    assert edges["pred"].dtype == np.int64 and edges["prob"].dtype == np.float32
    assert ((edges["prob"] >= 0.5) & (edges["prob"] <= 1)).all()
    acc = float((edges["pred"] == y[edges["edge_id"]]).mean())
    assert acc == pytest.approx(m["inference_test_accuracy"], abs=1e-5)
    # the written predictions are the last checkpoint's: their accuracy is the final one
    assert acc == pytest.approx(m["final_test_accuracy"], abs=2e-3), (acc, m)


def test_edge_classification_names_a_missing_edge_field(tasks: Path, tmp_path: Path) -> None:
    argv = [*TRAIN, "edge-classification", "--label", "weight", "--epochs", "1"]
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": str(tasks)}, tmp_path)
    assert res.returncodes == [2], res.explain()
    assert res.stderr[0].splitlines()[-1] == (
        "distgnn train: error: --label (trainers.app.label): edge data 'weight' not found in "
        "the graph (it has: label, target, test_mask, train_mask, val_mask)"
    )


def test_edge_regression_beats_the_mean(tasks: Path, tasks_parts: Path, tmp_path: Path) -> None:
    argv = [
        *TRAIN, "edge-regression", "--label", "target", "--epochs", "4", "--hidden", "64",
        "--fanouts", "10,10", "--batch-size", "256", "--lr", "0.005", "--dropout", "0.2",
        "--checkpoint-url", str(tmp_path / "ckpt"), "--infer-after-training",
        "--output-url", str(tmp_path / "out"),
    ]  # fmt: skip
    res = _on_servers(argv, tasks_parts, tmp_path)
    m = res.metrics
    assert m is not None and m["app"] == "edge-regression", m
    with np.load(tasks, allow_pickle=False) as z:
        y, train, test = z["edata/target"], z["edata/train_mask"], z["edata/test_mask"]
    baseline = float(np.sqrt(((y[test] - y[train].mean()) ** 2).mean()))
    assert m["test_edges"] == int(test.sum()) and m["num_targets"] == 1, m
    assert m["mean_test_rmse"] == pytest.approx(baseline, abs=1e-4), (m, baseline)
    assert m["test_rmse"] < 0.7 * baseline, (m, baseline)
    assert 0 < m["test_mae"] < m["test_rmse"] + 1e-6 and m["val_rmse"] > 0, m
    assert m["best_epoch"] is not None and "test_accuracy" not in m, m
    # progress and the epoch log name the regression metric
    lines = [json.loads(x) for e in res.stderr for x in e.splitlines() if x.startswith("{")]
    epochs = [x for x in lines if x.get("msg") == "epoch"]
    assert epochs and all("val_rmse" in x and "train_rmse" in x for x in epochs), epochs
    out = read_output(str(tmp_path / "out"))
    assert sorted(out) == ["embedding", "orig_id"] and out["embedding"].shape == (2708, 64)
    edges = _test_edge_predictions(tasks, tmp_path / "out")
    assert sorted(edges) == ["dst_id", "edge_id", "pred", "src_id"]
    assert edges["pred"].dtype == np.float32 and edges["pred"].shape == (int(test.sum()),)
    d = edges["pred"] - y[edges["edge_id"]]
    rmse = float(np.sqrt((d * d).mean()))
    assert rmse == pytest.approx(m["inference_test_rmse"], abs=1e-5)
    assert float(np.abs(d).mean()) == pytest.approx(m["inference_test_mae"], abs=1e-5)
    assert rmse == pytest.approx(m["final_test_rmse"], abs=1e-3), (rmse, m)
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["app"] == "edge-regression" and index["edge_types"]["_E"]["edges"] == "test_mask"
    assert index["edge_types"]["_E"]["arrays"]["pred"] == {"dtype": "float32", "shape": []}


def _on_servers(argv: list[str], manifest: Path, tmp_path: Path) -> TrainResult:
    """2 trainers on 2 graph servers (inference's layers live on the servers: trainers
    of a standalone graph would each hold their own)."""
    with running_servers(str(manifest), num_parts=2) as srv:
        res = run_trainers(argv, 2, srv.env(), tmp_path)
    assert res.returncodes == [0, 0], res.explain()
    return res


def _test_edge_predictions(tasks: Path, out: Path) -> dict[str, np.ndarray]:
    """The written per-edge predictions, checked against the graph: one row per test
    edge (both partitions' shards), with the edge's original source and destination."""
    edges = read_edge_output(str(out))
    with np.load(tasks, allow_pickle=False) as z:
        src, dst, test = z["src"], z["dst"], z["edata/test_mask"]
    e = edges["edge_id"]
    assert np.array_equal(np.sort(e), np.flatnonzero(test))
    assert np.array_equal(edges["src_id"], src[e]) and np.array_equal(edges["dst_id"], dst[e])
    index = json.loads((out / "index.json").read_text())
    assert [s["part"] for s in index["edge_types"]["_E"]["shards"]] == [0, 1]
    return edges


def test_inference_by_several_trainers_without_servers_is_refused_before_training(
    tasks_parts: Path, tmp_path: Path
) -> None:
    argv = [
        *TRAIN, "edge-classification", "--epochs", "1", "--checkpoint-url", str(tmp_path / "c"),
        "--infer-after-training", "--output-url", str(tmp_path / "out"),
    ]  # fmt: skip
    res = run_trainers(argv, 2, {"DISTGNN_MANIFEST": str(tasks_parts)}, tmp_path)
    assert res.returncodes == [2, 2], res.explain()
    assert res.stderr[0].splitlines()[-1] == (
        "distgnn train: error: layer-wise inference: 2 trainers without graph servers would "
        "each hold their own layers (the others' nodes' rows missing); run one trainer on "
        "DISTGNN_MANIFEST, or with the job's servers (DISTGNN_SERVERS)"
    )
    assert not (tmp_path / "c").exists()  # nothing trained
