"""The built-in apps as real trainer processes: link prediction, resume, uneven
batches across DDP trainers, and a failing trainer's termination log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from servers import partition_cora
from trainers import run_trainers

TRAIN = ["distgnn.cli", "train"]


def test_link_prediction_beats_random(
    cora_path: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    url = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    argv = [
        *TRAIN, "link-prediction", "--epochs", "2", "--batch-size", "256", "--hidden", "64",
        "--fanouts", "5,10", "--num-negs", "1", "--exclude", "reverse",
    ]  # fmt: skip
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": url}, tmp_path)
    assert res.returncodes == [0], res.explain()
    m = res.metrics
    assert m is not None and m["app"] == "link-prediction"
    assert m["test_auc"] > 0.75, m
    assert m["test_mrr"] > m["random_mrr"] + 0.1, m


def test_resume_continues_epoch_count(cora_path: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    base = [*TRAIN, "node-classification", "--hidden", "16", "--fanouts", "5,5",
            "--checkpoint-url", f"file://{ckpt}"]  # fmt: skip
    env = {"DISTGNN_MANIFEST": str(cora_path)}
    first = run_trainers([*base, "--epochs", "2"], 1, env, tmp_path / "a")
    assert first.returncodes == [0], first.explain()
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "ckpt-epoch-00000.pt",
        "ckpt-epoch-00001.pt",
    ]
    second = run_trainers([*base, "--epochs", "4"], 1, env, tmp_path / "b")
    assert second.returncodes == [0], second.explain()
    assert second.metrics is not None and second.metrics["start_epoch"] == 2
    epochs = [
        json.loads(x)["epoch"]
        for x in second.stderr[0].splitlines()
        if x.startswith("{") and json.loads(x).get("msg") == "epoch"
    ]
    assert epochs == [2, 3]
    assert (ckpt / "ckpt-epoch-00003.pt").exists()
    # resumed at the last epoch: nothing to train, the checkpoint's model is evaluated
    third = run_trainers([*base, "--epochs", "4"], 1, env, tmp_path / "c")
    assert third.returncodes == [0], third.explain()
    m = third.metrics
    assert m is not None and m["start_epoch"] == 4 and m["best_epoch"] is None, m
    assert m["val_accuracy"] == m["final_val_accuracy"] > 0.3, m
    assert m["test_accuracy"] == m["final_test_accuracy"] > 0.3, m


UNEVEN = """
import json, sys, numpy as np
from distgnn.train import node_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import init_ddp, shutdown
from distgnn.train.graph import open_train_graph
ctx = init_ddp(timeout_s=120)
tg = open_train_graph()
ids = tg.mask_ids("train_mask")[: 100 if ctx.rank == 0 else 10]
cfg = TrainConfig(epochs=2, hidden=16, fanouts=[5, 5], batch_size=10).validate()
m = node_classification.run(cfg, tg, ctx, train_ids=ids)
tg.close()
shutdown(ctx)
if ctx.rank == 0:
    print(json.dumps(m))
"""


def test_uneven_batches_do_not_deadlock(cora_path: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", UNEVEN]
    res = run_trainers(
        [], 2, {"DISTGNN_MANIFEST": str(cora_path)}, tmp_path, timeout=240,
        per_rank_argv=[cmd, cmd],
    )  # fmt: skip
    assert res.returncodes == [0, 0], res.explain()
    m = json.loads(res.stdout[0].strip().splitlines()[-1])
    assert m["steps_per_epoch"] == 10  # rank 1 (1 batch) padded to rank 0's 10 steps
    assert 0.0 <= m["test_accuracy"] <= 1.0


def test_failing_trainer_writes_root_cause(cora_path: Path, tmp_path: Path) -> None:
    argv = [*TRAIN, "node-classification", "--feat", "no_such_field", "--epochs", "1"]
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": str(cora_path)}, tmp_path)
    assert res.returncodes == [2], res.explain()
    assert "no_such_field" in res.stderr[0]
    root = json.loads((tmp_path / "termination-0.log").read_text())
    assert root["error"] == "ConfigError" and "no_such_field" in root["message"]
    assert res.metrics is None


def test_user_script_example_trains(
    cora_path: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, repo_root: Path
) -> None:
    url = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    cmd = [sys.executable, str(repo_root / "examples" / "train_custom.py"), "--epochs", "3"]
    env = {"DISTGNN_MANIFEST": url, "DISTGNN_NUM_SAMPLERS": "1"}
    res = run_trainers([], 1, env, tmp_path, per_rank_argv=[cmd])
    assert res.returncodes == [0], res.explain()
    m = json.loads(res.stdout[0].strip().splitlines()[-1])
    assert m["epochs"] == 3 and m["test_accuracy"] > 0.6


APP_ARGS = {
    "node-classification": ["--epochs", "3", "--hidden", "32", "--fanouts", "5,5",
                            "--batch-size", "48", "--dropout", "0.5"],
    "link-prediction": ["--epochs", "2", "--batch-size", "256", "--hidden", "32",
                        "--fanouts", "5,10", "--num-negs", "1", "--exclude", "reverse"],
}  # fmt: skip


@pytest.mark.parametrize("app", sorted(APP_ARGS))
def test_the_deferred_all_reduce_trains_the_same_model_as_ddps(
    cora_path: Path, tmp_path: Path, app: str
) -> None:
    """``DISTGNN_DEFER_ALLREDUCE=on`` (the next batch made while the gradients' all-reduce
    waits) and ``off`` (DDP's all-reduce inside the backward): the same losses, accuracies
    and metrics, 2 trainers with batches of different counts (padded steps included)."""
    argv = [*TRAIN, app, *APP_ARGS[app]]
    n_epochs = int(APP_ARGS[app][APP_ARGS[app].index("--epochs") + 1])
    got = {}
    for mode in ("off", "on"):
        work = tmp_path / mode
        work.mkdir()
        env = {"DISTGNN_MANIFEST": str(cora_path), "DISTGNN_DEFER_ALLREDUCE": mode}
        res = run_trainers(argv, 2, env, work, timeout=240)
        assert res.returncodes == [0, 0], res.explain()
        assert res.metrics is not None, res.explain()
        epochs = [
            {k: v for k, v in e.items() if k in ("epoch", "loss", "train_acc", "val_acc")}
            for e in (json.loads(line) for line in res.stderr[0].splitlines() if line[:1] == "{")
            if e.get("msg") == "epoch"
        ]
        assert len(epochs) == n_epochs, res.explain()
        said = [json.loads(line) for line in res.stderr[0].splitlines() if line[:1] == "{"]
        assert [e["deferred"] for e in said if e.get("msg") == "gradient all-reduce"] == [
            mode == "on"
        ]
        metrics = {k: v for k, v in res.metrics.items() if "second" not in k and "time" not in k}
        got[mode] = (epochs, metrics)
    assert got["on"] == got["off"]
