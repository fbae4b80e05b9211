"""Local mode's rendezvous store listens on the loopback address only, not ``*:MASTER_PORT``."""

from __future__ import annotations

from tests.support.ranks import run_ranks

TRAINER = """
import json, os, psutil
from distgnn.train.ddp import all_reduce, init_ddp, shutdown
from distgnn.train.finish import end_process
ctx = init_ddp(timeout_s=60)
total = all_reduce(ctx, [1.0])[0]
port = int(os.environ["MASTER_PORT"])
listening = [c.laddr.ip for c in psutil.Process().net_connections("tcp")
             if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
print(json.dumps({"rank": ctx.rank, "total": total, "listening": listening}), flush=True)
shutdown(ctx)
# as `distgnn train` ends (docs/training.md "How a trainer ends"): no interpreter teardown,
# where a gloo worker thread dropping its last reference to a finished all-reduce aborts
end_process(0)
"""


def test_rendezvous_store_binds_loopback_only() -> None:
    outs = run_ranks(TRAINER)
    rank0 = next(o for o in outs if o["rank"] == 0)
    assert all(o["total"] == 2.0 for o in outs)
    assert rank0["listening"] == ["127.0.0.1"], rank0
