"""Helpers: run real ``distgnn train`` trainer processes (DDP over gloo on loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRAIN_TIMEOUT_S = 400.0


@dataclass
class TrainResult:
    returncodes: list[int]
    stdout: list[str]
    stderr: list[str]
    metrics: dict[str, Any] | None

    def explain(self) -> str:
        return "\n".join(
            f"--- trainer {i} rc={rc}\n{self.stderr[i][-3000:]}"
            for i, rc in enumerate(self.returncodes)
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_trainers(
    argv: Sequence[str],
    world_size: int,
    env: Mapping[str, str],
    workdir: Path,
    timeout: float = TRAIN_TIMEOUT_S,
    per_rank_argv: Sequence[Sequence[str]] | None = None,
) -> TrainResult:
    """Start ``world_size`` trainer processes running ``argv`` and wait for all of them."""
    port = free_port()
    metrics_file = workdir / "metrics.json"
    procs = []
    for rank in range(world_size):
        penv = dict(os.environ)
        penv.update(env)
        penv.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            DISTGNN_METRICS_FILE=str(metrics_file),
            DISTGNN_TERMINATION_LOG=str(workdir / f"termination-{rank}.log"),
            DISTGNN_LOG_FORMAT="json",
            OMP_NUM_THREADS="1",
        )
        cmd = list(per_rank_argv[rank]) if per_rank_argv else [sys.executable, "-m", *argv]
        procs.append(
            subprocess.Popen(
                cmd, env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    outs, errs, rcs = [], [], []
    try:
        for p in procs:
            o, e = p.communicate(timeout=timeout)
            outs.append(o)
            errs.append(e)
            rcs.append(p.returncode)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else None
    return TrainResult(rcs, outs, errs, metrics)
