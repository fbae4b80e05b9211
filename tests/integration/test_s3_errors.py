"""A new user's first hour with S3: missing or wrong credentials, a missing bucket or an
unreachable endpoint end in one line naming the URL (exit 2), never a botocore traceback.
Against the real SeaweedFS server (which checks signatures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.awsenv import isolated_env

from distgnn.local.ports import free_port

pytestmark = pytest.mark.s3

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return isolated_env(**extra)


def _distgnn(*argv: str, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str]:
    p = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", *argv],
        env=env,
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return p.returncode, p.stderr


def _one_line(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1, err[-3000:]
    for n in needles:
        assert n in lines[0], lines[0]


def test_inspect_without_credentials(s3) -> None:  # type: ignore[no-untyped-def]
    rc, err = _distgnn(
        "inspect", s3.url("nothing", "g.json"), env=_env(AWS_ENDPOINT_URL_S3=s3.endpoint_url)
    )
    _one_line(rc, err, s3.url("nothing", "g.json"), "no S3 credentials", "AWS_ACCESS_KEY_ID")


def test_partition_to_s3_without_credentials(s3, cora_path: Path) -> None:  # type: ignore[no-untyped-def]
    rc, err = _distgnn(
        "partition", str(cora_path), "--num-parts", "2", "--out", s3.url("out"), "--name", "g",
        env=_env(AWS_ENDPOINT_URL_S3=s3.endpoint_url),
    )  # fmt: skip
    _one_line(rc, err, s3.url("out"), "no S3 credentials")


def test_run_of_the_kubernetes_example_without_credentials(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rc, err = _distgnn(
        "run",
        str(REPO / "examples" / "k8s" / "cora-graphsage.yaml"),
        "--workdir",
        str(tmp_path / "wd"),
        "--state-dir",
        str(tmp_path / "state"),
        env=_env(AWS_ENDPOINT_URL_S3=s3.endpoint_url),
    )
    _one_line(rc, err, "s3://", "no S3 credentials")


def test_wrong_secret_and_missing_bucket(s3) -> None:  # type: ignore[no-untyped-def]
    env = {**_env(), **s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-0123456789"}
    rc, err = _distgnn("inspect", s3.url("x", "g.json"), env=env)
    _one_line(rc, err, s3.url("x", "g.json"), "denied")
    assert "not-the-secret" not in err
    rc, err = _distgnn("inspect", "s3://no-such-bucket-xyz/g.json", env=dict(_env(), **s3.env()))
    _one_line(rc, err, "s3://no-such-bucket-xyz/g.json", "not found")


def test_unreachable_endpoint(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = _env(
        AWS_ENDPOINT_URL_S3=dead,
        AWS_ACCESS_KEY_ID="k",
        AWS_SECRET_ACCESS_KEY="s",
        AWS_MAX_ATTEMPTS="1",
    )
    rc, err = _distgnn("inspect", "s3://bucket/g.json", env=env)
    _one_line(rc, err, "s3://bucket/g.json", "cannot reach", dead)
