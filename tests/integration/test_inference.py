"""The inference app on Cora: real servers, real trainer processes, a folder and real S3.

A checkpoint trained for 2 epochs in-process is the model; the reference is the same
checkpoint applied single-process to the whole graph in one full-neighbour block.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from servers import partition_cora, running_servers
from trainers import free_port, run_trainers

from distgnn import storage
from distgnn.contract import TrainerEnv
from distgnn.errors import StorageError
from distgnn.sampling import LocalGraph
from distgnn.sampling.blocks import to_block
from distgnn.sampling.source import LocalSource
from distgnn.train import checkpoint, node_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import init_ddp
from distgnn.train.graph import TrainGraph
from distgnn.train.infer_output import read_index, read_output
from distgnn.train.inference import model_from_state, resolve_checkpoint

pytestmark = pytest.mark.slow
INFER = ["distgnn.cli", "train", "inference", "--infer-batch-size", "512"]


@pytest.fixture(scope="module")
def ckpt_dir(cora_path: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A node-classification checkpoint of Cora (2 epochs, in-process)."""
    out = tmp_path_factory.mktemp("ckpt")
    lg = LocalGraph.from_npz(str(cora_path))
    cfg = TrainConfig(
        epochs=2, hidden=32, fanouts=[5, 5], batch_size=64, checkpoint_url=str(out)
    ).validate()
    node_classification.run(
        cfg, TrainGraph(lg, LocalSource(lg)), init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1))
    )
    return str(out)


@pytest.fixture(scope="module")
def reference(cora_path: Path, ckpt_dir: str) -> dict[str, Any]:
    """The checkpoint on the whole graph, single process, one full-neighbour block."""
    lg = LocalGraph.from_npz(str(cora_path))
    model = model_from_state(checkpoint.load(resolve_checkpoint(ckpt_dir)).model)
    n = lg.num_nodes()
    block = to_block(np.arange(n), lg.src, lg.dst, np.arange(lg.src.size))
    assert np.array_equal(block.src_nid, np.arange(n))
    with torch.no_grad():
        logits = model([block] * len(model.layers), lg.ndata["feat"].float())
    test = lg.ndata["test_mask"].numpy().astype(bool)
    label = lg.ndata["label"].numpy()
    pred = logits.argmax(1).numpy()
    return {
        "embedding": logits.numpy(),
        "pred": pred,
        "accuracy": float((pred[test] == label[test]).mean()),
        "test": test,
        "label": label,
    }


def sorted_output(url: str) -> dict[str, np.ndarray]:
    out = read_output(url)
    order = np.argsort(out["orig_id"])
    return {k: v[order] for k, v in out.items()}


def check_against_reference(out: dict[str, np.ndarray], ref: dict[str, Any]) -> None:
    assert np.array_equal(out["orig_id"], np.arange(ref["embedding"].shape[0]))
    np.testing.assert_allclose(out["embedding"], ref["embedding"], atol=1e-5, rtol=0)
    test, label = ref["test"], ref["label"]
    acc = float((out["pred"][test] == label[test]).mean())
    assert acc == pytest.approx(ref["accuracy"], abs=1e-9)
    probs = torch.softmax(torch.from_numpy(out["embedding"]), 1).max(1).values.numpy()
    np.testing.assert_allclose(out["prob"], probs, atol=1e-6)


def infer_on_servers(
    manifest: str, parts: int, trainers: int, ckpt: str, out: str, workdir: Path
) -> dict[str, Any]:
    with running_servers(manifest, num_parts=parts, workers=1) as srv:
        argv = [*INFER, "--checkpoint-url", ckpt, "--output-url", out]
        res = run_trainers(argv, trainers, srv.env(), workdir)
    assert res.returncodes == [0] * trainers, res.explain()
    assert res.metrics is not None
    lines = [json.loads(x) for x in res.stderr[0].splitlines() if x.startswith("{")]
    layers = [x for x in lines if x.get("msg") == "inference layer"]
    assert [x["layer"] for x in layers] == [0, 1]  # progress per layer
    assert any(x.get("msg") == "inference done" for x in lines)  # the summary
    return res.metrics


@pytest.fixture(scope="module")
def outputs(
    cora_path: Path, ckpt_dir: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Output from 2 partitions / 2 servers / 2 trainers and from 1 / 1 / 1."""
    base = tmp_path_factory.getbasetemp()
    res: dict[str, Any] = {}
    for parts in (2, 1):
        manifest = partition_cora(cora_path, base / f"cora{parts}", num_parts=parts)
        out = str(base / f"infer-{parts}")
        wd = tmp_path_factory.mktemp(f"w{parts}")
        res[parts] = (infer_on_servers(manifest, parts, parts, ckpt_dir, out, wd), out)
    return res


def test_predictions_and_embeddings_equal_single_process_full_graph(
    outputs: dict[str, Any], reference: dict[str, Any]
) -> None:
    metrics, url = outputs[2]
    check_against_reference(sorted_output(url), reference)
    assert metrics["inference_test_accuracy"] == pytest.approx(reference["accuracy"], abs=1e-6)
    assert metrics["output_url"] == url and metrics["inference_nodes"] == 2708
    idx = read_index(url)
    assert [s["part"] for s in idx["node_types"]["_N"]["shards"]] == [0, 1]
    assert idx["checkpoint_epoch"] == 1 and idx["app"] == "node-classification"


def test_two_partitions_two_trainers_equal_one_and_one(outputs: dict[str, Any]) -> None:
    two, one = sorted_output(outputs[2][1]), sorted_output(outputs[1][1])
    assert np.array_equal(two["orig_id"], one["orig_id"])
    np.testing.assert_allclose(two["embedding"], one["embedding"], atol=1e-5, rtol=0)
    assert np.array_equal(two["pred"], one["pred"])
    assert len(read_index(outputs[1][1])["node_types"]["_N"]["shards"]) == 1


def _trainer(rank: int, argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[str]:
    penv = dict(os.environ, **env)
    penv.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        DISTGNN_LOG_FORMAT="json",
        OMP_NUM_THREADS="1",
    )
    return subprocess.Popen(
        [sys.executable, "-m", *argv],
        env=penv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_trainer_killed_mid_inference_then_rerun(
    cora_path: Path,
    ckpt_dir: str,
    reference: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> None:
    manifest = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    out = str(tmp_path / "out")
    argv = [*INFER, "--checkpoint-url", ckpt_dir, "--output-url", out]
    with running_servers(manifest, num_parts=2, workers=1) as srv:
        (tmp_path / "w1").mkdir()
        first = run_trainers(argv, 2, srv.env(), tmp_path / "w1")
        assert first.returncodes == [0, 0], first.explain()
        run_a = read_index(out)["run"]
        # second run: SIGKILL rank 1 once its first layer is done (mid-inference)
        port = free_port()
        procs = [_trainer(r, argv, srv.env(), port) for r in (0, 1)]
        killed = threading.Event()

        def watch() -> None:
            assert procs[1].stderr is not None
            for line in procs[1].stderr:
                if '"inference layer"' in line and not killed.is_set():
                    procs[1].send_signal(signal.SIGKILL)
                    killed.set()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        try:
            assert killed.wait(240), "rank 1 never finished a layer"
            procs[1].wait(30)
            try:
                procs[0].communicate(timeout=120)  # rank 0 fails: its peer is gone
            except subprocess.TimeoutExpired:
                procs[0].kill()
                procs[0].communicate(timeout=30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
            t.join(30)
            for p in procs:
                if p.stderr is not None:
                    p.stderr.close()
        assert procs[1].returncode == -signal.SIGKILL and procs[0].returncode != 0
        # the complete output of the first run is still what the index names
        assert read_index(out)["run"] == run_a
        check_against_reference(sorted_output(out), reference)
        # a half-written run folder may be there; it is never taken as the output
        (tmp_path / "w3").mkdir()
        third = run_trainers(argv, 2, srv.env(), tmp_path / "w3")
    assert third.returncodes == [0, 0], third.explain()
    idx = read_index(out)
    assert idx["run"] != run_a
    check_against_reference(sorted_output(out), reference)
    runs = sorted(p.name for p in Path(out).iterdir() if p.name.startswith("run-"))
    assert runs == [f"run-{idx['run']}"]  # earlier runs' folders were removed


def test_inference_reads_and_writes_s3(
    s3: Any,
    cora_path: Path,
    ckpt_dir: str,
    reference: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checkpoint on S3, output to S3, a standalone graph (2 partitions in-process)."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    src = resolve_checkpoint(ckpt_dir)
    ck_url = s3.url("infer-ck", src.rsplit("/", 1)[1])
    storage.write_bytes(ck_url, Path(src).read_bytes())
    manifest = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    out = s3.url("infer-out")
    with pytest.raises(StorageError):
        read_index(out)
    argv = [*INFER, "--checkpoint-url", s3.url("infer-ck"), "--output-url", out]
    res = run_trainers(argv, 1, {"DISTGNN_MANIFEST": manifest, **s3.env()}, tmp_path)
    assert res.returncodes == [0], res.explain()
    check_against_reference(sorted_output(out), reference)
    assert read_index(out)["checkpoint"] == ck_url
