"""The task apps' pieces without processes: the objectives' metrics and label checks,
the options they refuse, and the example manifests as a trainer's command."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from distgnn.api import parse_job
from distgnn.api.commands import trainer_command
from distgnn.errors import ConfigError
from distgnn.train import edge_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph
from distgnn.train.objective import CLASSIFICATION, REGRESSION, Objective, add, for_app

CTX = DDPContext(0, 1, torch.device("cpu"))


def test_regression_measures_rmse_and_mae_over_every_value() -> None:
    out = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    y = REGRESSION.target(torch.tensor([[1.0, 1.0], [3.0, 3.0]], dtype=torch.float64))
    sums = add(REGRESSION.sums(out[:1], y[:1]), REGRESSION.sums(out[1:], y[1:]))
    m = REGRESSION.measure(sums)
    assert m["rmse"] == pytest.approx(math.sqrt((1 + 4) / 4)) and m["mae"] == pytest.approx(0.75)
    assert REGRESSION.target(torch.tensor([0.5, 1.5])).shape == (2, 1)  # [N] -> [N, 1]
    assert REGRESSION.better(0.2, 0.3) and not REGRESSION.better(0.3, 0.2)
    assert CLASSIFICATION.better(0.3, 0.2) and CLASSIFICATION.better(0.0, None)
    acc = CLASSIFICATION.measure(CLASSIFICATION.sums(out, torch.tensor([1, 0])))
    assert acc == {"accuracy": 0.5}


def test_the_baseline_is_the_trivial_predictor_fitted_on_the_training_rows() -> None:
    classes = np.array([2, 2, 1, 0, 2, 1, 1, 1])
    train, test = np.array([0, 1, 2, 4]), np.array([5, 6, 7, 3])  # training majority: 2
    assert CLASSIFICATION.baseline(classes, train, test) == {"majority_test_accuracy": 0.0}
    assert CLASSIFICATION.baseline(classes, test, train) == {"majority_test_accuracy": 0.25}
    target = np.array([[0.0, 2.0], [2.0, 2.0], [1.0, 5.0], [1.0, 1.0]], dtype=np.float32)
    got = REGRESSION.baseline(target, np.array([0, 1]), np.array([2, 3]))  # mean (1, 2)
    assert got == {"mean_test_rmse": round(math.sqrt((0 + 9 + 0 + 1) / 4), 4)}
    for o in (CLASSIFICATION, REGRESSION):
        assert list(o.baseline(classes, train, np.array([], np.int64)).values()) == [0.0]


@pytest.mark.parametrize(
    ("objective", "labels", "message"),
    [
        (REGRESSION, np.array([1, 2]), "'y' is int64; node-regression needs a float target"),
        (CLASSIFICATION, np.array([0.5]), "'y' is float64; node-classification needs integer"),
        (CLASSIFICATION, np.zeros((2, 2), np.int64), "'y' has shape [2, 2]; class IDs are one"),
        (REGRESSION, np.zeros((2, 2, 2), np.float32), "a target is [N] or [N, k]"),
    ],
)
def test_a_label_that_does_not_fit_the_task_is_refused(
    objective: Objective, labels: np.ndarray, message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        objective.check_labels("--label (trainers.app.label)", "y", labels)
    assert str(e.value).startswith("--label (trainers.app.label): ") and message in str(e.value)


@pytest.mark.parametrize("app", ["edge-classification", "edge-regression"])
def test_the_typed_edge_apps_take_the_target_edge_type(app: str) -> None:
    required = rf"^--target-etype \(trainers.app.targetEtype\): required for {app} with --model"
    with pytest.raises(ConfigError, match=required):
        TrainConfig(app=app, model="rgcn").validate()
    with pytest.raises(ConfigError, match=rf"--target-ntype .*; {app} takes --target-etype"):
        TrainConfig(app=app, model="rgcn", target_ntype="paper").validate()
    typed = TrainConfig(app=app, model="rgcn", target_etype="paper:cites:paper").validate()
    assert typed.target_etype == "paper:cites:paper"
    assert TrainConfig(app=app, model="gat").validate().model == "gat"


@pytest.mark.parametrize("app", ["edge-classification", "edge-regression"])
def test_the_edge_apps_with_sage_refuse_a_typed_graph_naming_the_typed_model(
    typed_graph: TrainGraph, app: str
) -> None:
    cfg = TrainConfig(app=app).validate()
    with pytest.raises(ConfigError) as e:
        edge_classification.run(cfg, typed_graph, CTX)
    msg = str(e.value)
    assert msg.startswith("--model (trainers.app.model): sage is homogeneous, but the graph has")
    assert msg.endswith("use rgcn with --target-etype (trainers.app.targetEtype)"), msg


@pytest.mark.parametrize(
    ("app", "labels", "message"),
    [
        (
            "edge-classification",
            np.zeros(3, np.float32),
            "edge data 'y' is float32; edge-classification needs integer class IDs (for a "
            "float target use edge-regression)",
        ),
        ("edge-regression", np.zeros(3, np.int64), "edge data 'y' is int64; edge-regression"),
    ],
)
def test_edge_labels_name_edge_data(app: str, labels: np.ndarray, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        for_app(app).check_labels("--label", "y", labels)
    assert message in str(e.value)
    assert for_app(app).regression == (app == "edge-regression")


@pytest.mark.parametrize(
    ("example", "app", "expected"),
    [
        ("cora-node-regression.yaml", "node-regression", ["--label", "target"]),
        ("cora-edge-classification.yaml", "edge-classification", ["--label", "label"]),
        ("cora-edge-regression.yaml", "edge-regression", ["--label", "target"]),
        ("cora-hetero-node-regression.yaml", "node-regression", ["--target-ntype", "paper"]),
        (
            "cora-hetero-edge-classification.yaml",
            "edge-classification",
            ["--target-etype", "paper:cites:paper"],
        ),
    ],
)
def test_the_example_manifests_run_their_app(
    repo_root: Path, example: str, app: str, expected: list[str]
) -> None:
    obj = yaml.safe_load((repo_root / "examples" / example).read_text(encoding="utf-8"))
    job = parse_job(obj)
    cmd = trainer_command(job.spec)
    i = cmd.index("train")
    assert cmd[i + 1] == app
    pairs = list(itertools.pairwise(cmd))
    assert (expected[0], expected[1]) in pairs, cmd


def test_objective_over_sums_every_batch_in_eval_mode_and_restores_train_mode() -> None:
    """The one evaluation loop every supervised app uses: the metric of all batches
    together (not a mean of per-batch metrics), under eval mode and no_grad, and the
    model back in train mode after, also when a batch fails."""
    model = torch.nn.Dropout(0.5)
    seen: list[tuple[bool, bool]] = []

    def outputs(m: torch.nn.Module, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append((m.training, torch.is_grad_enabled()))
        y = torch.tensor([b, b])
        return torch.nn.functional.one_hot(torch.tensor([b, 0]), 3).float(), y

    got = CLASSIFICATION.over(model, [1, 2, 0], outputs)
    assert got == {"accuracy": 4 / 6} and seen == [(False, False)] * 3 and model.training
    reg = REGRESSION.over(model, [0], lambda m, b: (torch.tensor([1.0, 3.0]), torch.zeros(2)))
    assert reg == {"rmse": math.sqrt(5.0), "mae": 2.0}

    def broken(m: torch.nn.Module, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise RuntimeError("batch")

    with pytest.raises(RuntimeError):
        CLASSIFICATION.over(model, [0], broken)
    assert model.training
