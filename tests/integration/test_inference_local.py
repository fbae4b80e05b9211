"""Inference as a DistGNNJob in local mode (`distgnn run`), attached to a local GraphServer.

One GraphServer keeps Cora loaded; a training job with ``inferAfterTraining`` writes
the output after training, then an ``inference`` job reads that job's checkpoint and
writes it again, without loading the graph again. Both must agree, and the servers
must hold no intermediate layer afterwards.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_local_run import Running, run, run_cmd, wait_for, write_manifest

from distgnn.distributed import initialize
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType
from distgnn.train.infer_output import read_index, read_output

pytestmark = pytest.mark.slow


def job(name: str, app: dict[str, Any], checkpoint: str) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": name},
        "spec": {
            "graph": {"graphServer": {"name": "infer-cora"}},
            "trainers": {"replicas": 2, "app": app, "checkpoint": {"url": checkpoint}},
            "runPolicy": {"backoffLimit": 0},
        },
    }


def sorted_output(url: str) -> dict[str, np.ndarray]:
    out = read_output(url)
    order = np.argsort(out["orig_id"])
    return {k: v[order] for k, v in out.items()}


def test_train_then_infer_on_a_local_graphserver(tmp_path: Path, cora_path: Path) -> None:
    state = tmp_path / "state"
    env = {"DISTGNN_STATE_DIR": str(state)}
    gs = write_manifest(
        tmp_path / "gs.yaml",
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "GraphServer",
            "metadata": {"name": "infer-cora"},
            "spec": {"graph": {"source": {"url": str(cora_path)}}, "partitioning": {"numParts": 2}},
        },
    )
    train = job(
        "train-infer",
        {
            "name": "node-classification",
            "epochs": 2,
            "hidden": 16,
            "fanouts": [5, 5],
            "batchSize": 64,
            "inferAfterTraining": True,
            "outputURL": "out-train",  # relative: beside the manifest
        },
        "ckpt",
    )
    infer = job(
        "infer-only",
        {"name": "inference", "outputURL": "out-infer", "embeddingLayer": "last"},
        "ckpt",
    )
    entry = state / "graphservers" / "infer-cora.json"
    server = Running(run_cmd(gs, "--workdir", str(tmp_path / "wd")), tmp_path / "gs", env)
    try:
        wait_for(entry.exists, 240, "the GraphServer to register", server)
        results = []
        for m in (train, infer):
            path = write_manifest(tmp_path / f"{m['metadata']['name']}.yaml", m)
            res = run(path, "--workdir", str(tmp_path / "wd-j"), out_dir=tmp_path / "j", env=env)
            assert res.rc == 0, res.stderr[-5000:]
            assert "attaching to local GraphServer" in res.stderr
            assert "server-0 |" not in res.stderr  # the graph was not loaded again
            results.append(json.loads(res.stdout.strip().splitlines()[-1]))
        reg = json.loads(entry.read_text(encoding="utf-8"))
        token = Path(reg["token_file"]).read_text(encoding="utf-8").strip()
        with initialize(servers=",".join(reg["servers"]), token=token) as ctx:
            names = list(ctx.call(0, Call(MsgType.LIST_TENSORS, {})).meta["tensors"])
        server.signal(signal.SIGTERM)
        server.wait(120)
    finally:
        if server.popen.poll() is None:
            server.kill()
    trained, inferred = results
    assert trained["output_url"] == str(tmp_path / "out-train")
    assert inferred["output_url"] == str(tmp_path / "out-infer")
    # the last epoch's weights: what final_test_accuracy (full neighbours on Cora) measured
    assert trained["inference_test_accuracy"] == pytest.approx(
        trained["final_test_accuracy"], abs=1e-4
    )
    assert inferred["checkpoint_epoch"] == 1
    a, b = sorted_output(str(tmp_path / "out-train")), sorted_output(str(tmp_path / "out-infer"))
    assert np.array_equal(a["orig_id"], np.arange(2708))
    np.testing.assert_allclose(a["embedding"], b["embedding"], atol=1e-5, rtol=0)
    assert np.array_equal(a["pred"], b["pred"])
    assert read_index(str(tmp_path / "out-infer"))["graph_name"] == "infer-cora"
    assert not [n for n in names if "infer-" in n]  # intermediate layers were released
