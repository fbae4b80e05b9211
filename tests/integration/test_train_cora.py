"""GraphSAGE through the full path: Cora, 2 partitions, 2 servers, 2 DDP trainers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servers import partition_cora, running_servers
from trainers import run_trainers

pytestmark = pytest.mark.slow


def test_graphsage_ddp_two_servers_two_trainers(
    cora_path: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    url = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    argv = [
        "distgnn.cli", "train", "node-classification",
        "--epochs", "25", "--hidden", "128", "--fanouts", "25,25", "--batch-size", "16",
        "--lr", "0.005", "--dropout", "0.7", "--weight-decay", "0.01", "--num-samplers", "1",
    ]  # fmt: skip
    with running_servers(url, num_parts=2, workers=1) as srv:
        res = run_trainers(argv, 2, srv.env(), tmp_path)
    assert res.returncodes == [0, 0], res.explain()
    m = res.metrics
    assert m is not None, res.explain()
    assert m["world_size"] == 2 and m["epochs"] == 25
    assert m["test_accuracy"] >= 0.79, m
    # rank 0 prints the metrics as its last stdout line and to its termination log
    assert json.loads(res.stdout[0].strip().splitlines()[-1]) == m
    assert json.loads((tmp_path / "termination-0.log").read_text()) == m
    assert res.stdout[1].strip() == ""
    epochs = [
        json.loads(line)
        for line in res.stderr[0].splitlines()
        if line.startswith("{") and json.loads(line).get("msg") == "epoch"
    ]
    assert [e["epoch"] for e in epochs] == list(range(25))
    assert all({"loss", "train_acc", "val_acc", "seconds"} <= set(e) for e in epochs)
