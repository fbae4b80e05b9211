"""Local mode's rendezvous store listens on the loopback address only, not ``*:MASTER_PORT``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from distgnn.local.ports import free_port

TRAINER = """
import json, os, psutil
from distgnn.train.ddp import all_reduce, init_ddp, shutdown
ctx = init_ddp(timeout_s=60)
total = all_reduce(ctx, [1.0])[0]
port = int(os.environ["MASTER_PORT"])
listening = [c.laddr.ip for c in psutil.Process().net_connections("tcp")
             if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
print(json.dumps({"rank": ctx.rank, "total": total, "listening": listening}), flush=True)
shutdown(ctx)
"""


def test_rendezvous_store_binds_loopback_only() -> None:
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", TRAINER], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0
        outs.append(json.loads(out.strip().splitlines()[-1]))
    rank0 = next(o for o in outs if o["rank"] == 0)
    assert all(o["total"] == 2.0 for o in outs)
    assert rank0["listening"] == ["127.0.0.1"], rank0
