"""Exit statuses of real ``distgnn train`` and ``distgnn serve`` processes: 2 (the operator
fails the job at once, ``distgnn run`` does not retry) only for what a restart cannot cure,
with one ``distgnn CMD: error: ...`` line; 1 for what a restart can. Storage cases run
against the real SeaweedFS server, which checks signatures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from servers import partition_cora
from tests.support.awsenv import isolated_env

from distgnn import contract

TIMEOUT_S = 180


def _env(**extra: str) -> dict[str, str]:
    """No AWS_* or DISTGNN_* variables of the caller, no AWS config files: only ``extra``."""
    base = {"AWS_MAX_ATTEMPTS": "1", "DISTGNN_PROGRESS_PORT": "0", "OMP_NUM_THREADS": "1"}
    return isolated_env(("AWS_", "DISTGNN_", "POD_NAME"), **{**base, **extra})


def _distgnn(*argv: str, env: dict[str, str]) -> tuple[int, str]:
    p = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", *argv],
        env=env, check=False, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    return p.returncode, p.stderr


def _error_line(err: str, command: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith(f"distgnn {command}: error: ")]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return lines[0]


def _serve(manifest: str, env: dict[str, str]) -> tuple[int, str]:
    return _distgnn(
        "serve", "--manifest", manifest, "--part-id", "0", "--insecure-no-token",
        "--port", "0", "--health-port", "0", env=env,
    )  # fmt: skip


def _train(tmp: Path, env: dict[str, str], *extra: str) -> tuple[int, str]:
    env = {**env, "RANK": "0", "WORLD_SIZE": "1"}
    env[contract.ENV_TERMINATION_LOG] = str(tmp / "termination.log")
    return _distgnn("train", "node-classification", "--epochs", "1", *extra, env=env)


# --- train: an output location it cannot write fails at start -----------------------


def test_train_refuses_an_unwritable_checkpoint_folder_before_training(
    tmp_path: Path, cora_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = _env(**{contract.ENV_MANIFEST: str(cora_path)})
    rc, err = _train(tmp_path, env, "--checkpoint-url", str(blocker / "ckpt"))
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    line = _error_line(err, "train")
    assert str(blocker / "ckpt") in line and "cannot be written" in line, line
    assert '"epoch"' not in err  # not one epoch trained
    root = json.loads((tmp_path / "termination.log").read_text())
    assert root["error"] == "ConfigError" and "cannot be written" in root["message"]


def test_train_refuses_a_metrics_file_it_cannot_write(tmp_path: Path, cora_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = _env(**{contract.ENV_MANIFEST: str(cora_path)})
    env[contract.ENV_METRICS_FILE] = str(blocker / "metrics.json")
    rc, err = _train(tmp_path, env)
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "cannot be written" in _error_line(err, "train")
    assert '"epoch"' not in err


# --- serve: a malformed partition is permanent -----------------------------------------


def test_serve_of_a_corrupt_partition_exits_2(
    tmp_path_factory: pytest.TempPathFactory, cora_path: Path
) -> None:
    src = Path(partition_cora(cora_path, tmp_path_factory.mktemp("cora1"), num_parts=1)).parent
    bad = tmp_path_factory.mktemp("corrupt") / "parts"
    shutil.copytree(src, bad)
    indptr = next(bad.rglob("indptr.npy"))
    indptr.write_bytes(indptr.read_bytes()[:-8])  # truncated: its size no longer matches
    rc, err = _serve(str(bad / "cora.json"), _env())
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "indptr.npy" in _error_line(err, "serve")


# --- object storage: permanent (2) or not (1) ------------------------------------------


@pytest.mark.s3
def test_serve_storage_errors(s3) -> None:  # type: ignore[no-untyped-def]
    url = s3.url("nothing-here", "g.json")
    rc, err = _serve(url, _env(AWS_ENDPOINT_URL_S3=s3.endpoint_url))
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "no S3 credentials" in _error_line(err, "serve")
    rc, err = _serve("s3://no-such-bucket-xyz/g.json", _env(**s3.env()))
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "not found" in _error_line(err, "serve")
    rc, err = _serve(url, _env(**{**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret-01234"}))
    assert rc == contract.EXIT_FAILURE, err[-3000:]  # a policy being applied: retried
    line = _error_line(err, "serve")
    assert "denied" in line and "wrong-secret" not in err


@pytest.mark.s3
def test_train_storage_errors(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = s3.url("nothing-here", "g.json")
    rc, err = _train(tmp_path, _env(AWS_ENDPOINT_URL_S3=s3.endpoint_url, DISTGNN_MANIFEST=url))
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "no S3 credentials" in _error_line(err, "train")
    rc, err = _train(tmp_path, _env(**s3.env(), DISTGNN_MANIFEST="s3://no-such-bucket-xyz/g.json"))
    assert rc == contract.EXIT_CONFIG_ERROR, err[-3000:]
    assert "not found" in _error_line(err, "train")
    wrong = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret-01234"}
    rc, err = _train(tmp_path, _env(**wrong, DISTGNN_MANIFEST=url))
    assert rc == contract.EXIT_FAILURE, err[-3000:]
    assert "denied" in _error_line(err, "train")
