"""The GraphStorm-style task apps as real trainer processes on Cora's derived targets
(``examples/dgl/prepare_data.py``'s ``cora-tasks.npz``): node regression learns (its RMSE
beats predicting the training mean) and writes its predictions; a label of the wrong
dtype is a one-line error with exit 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainers import run_trainers

from distgnn.train.infer_output import read_output

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
