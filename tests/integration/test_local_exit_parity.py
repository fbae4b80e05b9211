"""``distgnn run`` treats exit statuses as the operator does: a graph server's exit 2 (a
configuration error: here a partition file missing after partitioning) ends the run at
once in one line naming the server, its partition and its error line, exit 2 (Kubernetes:
``ServerConfigError``); ``distgnn train`` exits 2 for a module missing from its
environment, which is not retried. Real servers, real trainers, real processes."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from servers import partition_cora
from test_local_run import assert_clean, run, write_manifest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Path:
    """Cora in 2 partitions; the manifest's path."""
    return Path(partition_cora(cora_path, tmp_path_factory.mktemp("parts")))


@pytest.fixture
def broken(parts: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the partitions whose partition 1 lost its node features: (manifest, file)."""
    copy = tmp_path / "broken"
    shutil.copytree(parts.parent, copy)
    feat = next((copy / "cora" / "part-00001").rglob("feat.npy"))
    feat.unlink()
    return copy / "cora.json", feat


def job(name: str, manifest: Path, **trainers: object) -> dict[str, object]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": name},
        "spec": {
            "graph": {"partitions": {"manifestURL": str(manifest)}},
            "trainers": {"replicas": 1, "app": {"name": "node-classification", "epochs": 1}},
            "runPolicy": {"backoffLimit": 2},
        },
    }


def test_a_servers_configuration_error_ends_the_job_in_one_line_exit_2(
    broken: tuple[Path, Path], tmp_path: Path
) -> None:
    manifest, feat = broken
    path = write_manifest(tmp_path / "job.yaml", job("srvcfg", manifest))
    res = run(path, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs", timeout=240)
    assert res.rc == 2, res.stderr[-3000:]
    assert res.stderr.splitlines()[-1] == (
        "distgnn run: job failed: graph server server-1 (partition 1) exited with a "
        "configuration error (exit code 2), not retried: distgnn serve: error: "
        f"{feat}: partition file is missing"
    )
    assert "starting trainers" not in res.stderr
    assert_clean(res)


def test_a_graphservers_configuration_error_exits_2(
    broken: tuple[Path, Path], tmp_path: Path
) -> None:
    manifest, feat = broken
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "GraphServer",
        "metadata": {"name": "gsbroken"},
        "spec": {"graph": {"partitions": {"manifestURL": str(manifest)}}},
    }
    path = write_manifest(tmp_path / "gs.yaml", obj)
    res = run(
        path,
        "--state-dir",
        str(tmp_path / "state"),
        "--workdir",
        str(tmp_path / "wd"),
        out_dir=tmp_path / "logs",
        timeout=240,
    )
    assert res.rc == 2, res.stderr[-3000:]
    assert res.stderr.splitlines()[-1] == (
        "distgnn run: GraphServer 'gsbroken' failed: graph server server-1 (partition 1) "
        "exited with a configuration error (exit code 2), not retried: distgnn serve: "
        f"error: {feat}: partition file is missing"
    )
    assert list((tmp_path / "state" / "graphservers").glob("*.json")) == []
    assert_clean(res)


def test_a_trainer_missing_a_module_is_not_retried(parts: Path, tmp_path: Path) -> None:
    """The trainers' environment lacks torch (an image built without it, say): ``distgnn
    train`` exits 2, so the job fails after one attempt whatever ``backoffLimit`` allows."""
    fake = tmp_path / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n", encoding="utf-8"
    )
    path = write_manifest(tmp_path / "job.yaml", job("notorch", parts))
    env = {"PYTHONPATH": os.pathsep.join([str(fake), *sys.path[1:]])}  # servers need no torch
    res = run(path, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs", env=env)
    assert res.rc == 2, res.stderr[-3000:]
    assert "not retried: a trainer exited with 2 (a configuration error)" in res.stderr
    assert "cause: ModuleNotFoundError: No module named 'torch'" in res.stderr
    assert res.stderr.count("starting trainers") == 1
    assert_clean(res)


def test_gpus_1_without_a_gpu_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path,
) -> None:
    """``trainers.gpus: 1`` on a machine where torch sees no CUDA device (here:
    ``CUDA_VISIBLE_DEVICES`` empty): ``distgnn run`` says so in one line and exits 2
    before it partitions or starts a server (the graph named does not even exist)."""
    obj = job("gpu", tmp_path / "no-such-graph.json")
    obj["spec"]["trainers"]["gpus"] = 1  # type: ignore[index]
    path = write_manifest(tmp_path / "job.yaml", obj)
    env = {"CUDA_VISIBLE_DEVICES": ""}
    res = run(path, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs", env=env)
    assert res.rc == 2, res.stderr[-3000:]
    assert res.stderr.splitlines()[-1] == (
        "distgnn run: error: spec.trainers.gpus: 1 asks for a GPU per trainer, but this "
        "machine has no CUDA device torch can use (CUDA_VISIBLE_DEVICES=''): set "
        "trainers.gpus to 0 to train on the CPU, or run where a GPU and a CUDA build of "
        "torch are"
    )
    assert "starting" not in res.stderr and "no-such-graph" not in res.stderr
