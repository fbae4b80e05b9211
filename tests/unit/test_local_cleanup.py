"""Cleanup after ``distgnn run`` was killed: its run folder (with the token) and stale
GraphServer registry entries are removed at the next start."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from distgnn.local.plan import plan_from_manifest
from distgnn.local.registry import GraphServerEntry, Registry, process_create_time
from distgnn.local.runner import RunContext, run_job

SLEEPER = "import time; print('up', flush=True); time.sleep(600)"


def _job(code: str) -> dict[str, object]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "killed"},
        "spec": {
            "graph": {"graphServer": {"name": "gs"}},
            "trainers": {"replicas": 1, "command": [sys.executable, "-c", code]},
            "runPolicy": {"backoffLimit": 0},
        },
    }


def _register(state: Path, tmp_path: Path) -> Registry:
    reg = Registry(state / "graphservers")
    token = tmp_path / "gs.token"
    token.write_text("secret", encoding="utf-8")
    reg.register(
        GraphServerEntry(
            name="gs",
            servers=["127.0.0.1:4100"],
            token_file=str(token),
            manifest_url=str(tmp_path / "g.json"),
            pid=os.getpid(),
            create_time=process_create_time(os.getpid()),
        )
    )
    return reg


def _wait(pred: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_run_folder_of_a_sigkilled_run_is_removed_at_the_next_start(tmp_path: Path) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    reg = _register(state, tmp_path)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(_job(SLEEPER)), encoding="utf-8")
    argv = [sys.executable, "-m", "distgnn.cli", "run", str(manifest), "--workdir", str(work)]
    argv += ["--state-dir", str(state), "--grace", "2"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        runs = work / "runs"
        _wait(lambda: runs.is_dir() and any(runs.iterdir()), 120)
        (left,) = list(runs.iterdir())
        _wait((left / "owner.json").exists, 60)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert left.is_dir()  # nothing ran at SIGKILL
    # the next run (here: in-process) sweeps it
    ctx = RunContext(workdir=work, registry=reg, stream=io.StringIO(), grace=2)
    plan, _ = plan_from_manifest(_job("print('ok')"), manifest, work)
    run_job(plan, ctx)
    assert not left.exists()
    assert list((work / "runs").iterdir()) == []


def test_live_runs_and_unowned_folders_are_kept(tmp_path: Path) -> None:
    from distgnn.server.sweep import write_owner

    work = tmp_path / "work"
    reg = _register(tmp_path / "state", tmp_path)
    live = work / "runs" / "live-1"
    live.mkdir(parents=True)
    write_owner(str(live))  # this process: alive
    unowned = work / "runs" / "other-2"
    unowned.mkdir()
    ctx = RunContext(workdir=work, registry=reg, stream=io.StringIO(), grace=2)
    plan, _ = plan_from_manifest(_job("print('ok')"), tmp_path / "job.yaml", work)
    run_job(plan, ctx)
    assert live.is_dir() and unowned.is_dir()


def test_stale_graphserver_entries_and_tokens_are_swept(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "graphservers")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    token = reg.token_path("old")
    reg.root.mkdir(parents=True)
    token.write_text("secret", encoding="utf-8")
    (reg.root / "old.json").write_text(
        GraphServerEntry(
            name="old",
            servers=[],
            token_file=str(token),
            manifest_url="x",
            pid=dead.pid,
            create_time=1.0,
        ).to_json(),
        encoding="utf-8",
    )
    assert reg.sweep() == ["old"]
    assert not token.exists() and reg.names() == []
