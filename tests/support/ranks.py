"""Real trainer processes on 127.0.0.1 for torch.distributed tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from distgnn.local.ports import free_port


def run_ranks(script: str, *args: str, world: int = 2, timeout: float = 180) -> list[Any]:
    """Run ``python -c script *args`` as ranks 0..world-1 of one gloo group (MASTER on
    127.0.0.1, a free port, 1 torch thread each); the last stdout line of each, as JSON, in
    rank order. Asserts every rank exits 0; kills the others when one fails or hangs."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            assert p.returncode == 0
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    return outs
