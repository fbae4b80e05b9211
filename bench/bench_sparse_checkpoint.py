"""Checkpointing the R-GCN app's sparse embeddings: a 1M-row ``DistEmbedding`` and its
``SparseAdam`` state, saved and restored by the trainers that own the rows.

Run: ``python bench/bench_sparse_checkpoint.py [--authors 1000000] [--rounds 3]``.

The graph of ``bench_hetero_embedding.py`` (cached under /tmp/distgnn-bench; 2 random
partitions, 2 real ``distgnn serve`` processes). Two DDP trainers attach the app's table
``node_emb_author`` (``--hidden`` wide, uniform on the servers) and its ``SparseAdam``
(``_step``, ``_mem``, ``_power``) exactly as ``distgnn train`` does
(``distgnn.train.sparse_emb.NodeEmbeddings``) and time, between barriers:

* ``save``: what every epoch's checkpoint now does: each trainer pulls the table and
  state rows it owns and writes them (``.npy`` + ``meta.json``) to a local folder;
* ``restore``: what resume does: each trainer reads its folders back and writes the rows
  to the servers;
* ``gather (before)``: what a checkpoint did before (table only, no optimizer state):
  rank 0 reads the whole table (``checkpoint.embedding_state``) and ``torch.save`` s it
  into memory (no file write).

Also the bytes written and each trainer's peak RSS during save and restore over its RSS
when the step began (the kernel's high-water mark ``VmHWM``, reset before each step
through ``/proc/self/clear_refs``, so a step's figure is its own, not an earlier step's
peak; the larger trainer's; the "before" figure is rank 0's). Medians over the rounds,
[min-max].
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from summary import median_range

REPO = Path(__file__).resolve().parents[1]


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"/proc/self/status has no {field}")


def _rss_mib() -> float:
    """The RSS now, with the peak reset to it (what :func:`_peak_mib` measures from)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mib("VmRSS")


def _peak_mib() -> float:
    return _status_mib("VmHWM")


def worker(ckpt_dir: str, hidden: int, out: str) -> None:
    """One trainer (RANK/WORLD_SIZE and the servers from the environment)."""
    import torch

    from distgnn.distributed.context import initialize
    from distgnn.distributed.graph import DistGraph
    from distgnn.train import checkpoint
    from distgnn.train.ddp import barrier, init_ddp
    from distgnn.train.sparse_emb import CHUNK, NodeEmbeddings

    ctx = init_ddp()
    g = DistGraph(ctx=initialize(), own=True)
    n = int(g.num_nodes("author"))
    embs = NodeEmbeddings(g, {"author": n}, hidden, lr=0.01)
    url = os.path.join(ckpt_dir, "ckpt-epoch-00000.pt")
    res: dict[str, Any] = {}
    barrier(ctx)
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    part = embs.save(url)
    barrier(ctx)
    res["save_s"] = time.perf_counter() - t0
    res["save_rss_mib"] = _peak_mib() - rss0
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    embs.restore(part, url, ctx.is_main)
    barrier(ctx)
    res["restore_s"] = time.perf_counter() - t0
    res["restore_rss_mib"] = _peak_mib() - rss0
    if ctx.is_main:
        rss0 = _rss_mib()
        t0 = time.perf_counter()
        state = checkpoint.embedding_state(list(embs.tables.values()), CHUNK)
        torch.save(state, io.BytesIO())
        res["gather_s"] = time.perf_counter() - t0
        res["gather_rss_mib"] = _peak_mib() - rss0
    barrier(ctx)
    Path(out).write_text(json.dumps(res))
    g.close()


def run_round(env: dict[str, str], a: argparse.Namespace, tmp: Path, i: int) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ck = tmp / f"ck-{i}"
    procs, outs = [], []
    for r in range(2):
        out = tmp / f"res-{i}-{r}.json"
        outs.append(out)
        penv = dict(os.environ, **env, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port), OMP_NUM_THREADS="1", LOCAL_WORLD_SIZE="2",
                    DISTGNN_LOG_LEVEL="WARNING")  # fmt: skip
        cmd = [sys.executable, __file__, "--worker", str(ck), str(a.hidden), str(out)]
        procs.append(subprocess.Popen(cmd, env=penv, stdout=subprocess.DEVNULL))
    codes = [p.wait(timeout=1800) for p in procs]
    if any(codes):
        raise SystemExit(f"trainers failed: {codes}")
    res = [json.loads(o.read_text()) for o in outs]
    size = sum(f.stat().st_size for f in ck.rglob("*") if f.is_file())
    shutil.rmtree(ck)
    return {
        "save_s": max(r["save_s"] for r in res),
        "restore_s": max(r["restore_s"] for r in res),
        "gather_s": res[0]["gather_s"],
        "save_rss_mib": max(r["save_rss_mib"] for r in res),
        "restore_rss_mib": max(r["restore_rss_mib"] for r in res),
        "gather_rss_mib": res[0]["gather_rss_mib"],
        "mib": size / 2**20,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--authors", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=64)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    sys.path.insert(0, str(REPO / "bench"))
    import tempfile

    from servers import running_servers

    from bench_hetero_embedding import ensure_parts

    manifest = ensure_parts(a.authors)
    got: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-sckpt-") as tmp,
        running_servers(manifest, 2, workers=1, timeout=600) as srv,
    ):
        for i in range(a.rounds):
            got.append(run_round(srv.env(), a, Path(tmp), i))
    table_mib = a.authors * a.hidden * 4 / 2**20
    print(
        f"bench_sparse_checkpoint: {a.authors} x {a.hidden} table ({table_mib:.0f} MiB) + "
        f"SparseAdam state, 2 partitions/servers, 2 trainers; {a.rounds} round(s), medians "
        f"[min-max]; {time.monotonic() - t0:.0f} s in all"
    )

    def cell(key: str, fmt: str) -> str:
        return median_range([r[key] for r in got], fmt)

    for label, key, fmt in (
        ("save, table + state, per trainer (s)", "save_s", ".2f"),
        ("restore, table + state (s)", "restore_s", ".2f"),
        ("written (MiB)", "mib", ".0f"),
        ("trainer peak RSS over start, save (MiB)", "save_rss_mib", ".0f"),
        ("trainer peak RSS over start, restore (MiB)", "restore_rss_mib", ".0f"),
        ("before: rank 0 gathers the table (s)", "gather_s", ".2f"),
        ("before: rank 0 peak RSS over start (MiB)", "gather_rss_mib", ".0f"),
    ):
        print(f"{label:<40} {cell(key, fmt):>24}")


if __name__ == "__main__":
    main()
