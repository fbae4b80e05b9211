"""The R-GCN app's featureless node type: dense ``nn.Embedding`` vs sparse ``DistEmbedding``.

Run: ``python bench/bench_hetero_embedding.py [--authors 1000000] [--rounds 3]``.

A generated heterogeneous graph (cached under /tmp/distgnn-bench): ``paper`` nodes with a
32-wide feature, labels and masks, and ``--authors`` featureless ``author`` nodes, each
writing 2 random papers (``author:writes:paper`` and the reverse ``paper:written-by:
author``), papers citing 5 random papers; 2 random partitions, 2 real ``distgnn serve``
processes. Two DDP trainers run the built-in app (``distgnn train node-classification
--model rgcn --target-ntype paper``, hidden 64, fanouts 10,10, batch 500, 1 epoch) with
``--no-sparse-embedding`` (every trainer holds the author table, its gradient, Adam's
state; DDP all-reduces the whole table's gradient every step) and ``--sparse-embedding``
(the table on the servers, the touched rows pulled, SparseAdam on the servers), the
modes alternating for ``--rounds`` rounds. Per step: ``train_seconds`` / steps (the epoch
loop: sampling, pulls, compute, gradient exchange, both optimizers; evaluation not
included). Trainer peak RSS: the larger of the two trainers, sampled by psutil every
0.1 s. Medians over the rounds, [min-max].
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from summary import median_range

CACHE = "/tmp/distgnn-bench"
REPO = Path(__file__).resolve().parents[1]
PAPERS = 20_000


def ensure_parts(authors: int) -> str:
    import numpy as np

    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph

    out = f"{CACHE}/hetero-emb-{authors}"
    manifest = f"{out}/hemb.json"
    if os.path.exists(manifest):
        return manifest
    print(f"generating and partitioning {out} ...", file=sys.stderr)
    rng = np.random.default_rng(0)
    p, a = PAPERS, authors
    labels = rng.integers(0, 8, p)
    feat = rng.normal(size=(p, 32)).astype(np.float32)
    feat[np.arange(p), labels] += 2.0  # some signal
    w_src = np.repeat(np.arange(a, dtype=np.int64), 2)
    w_dst = rng.integers(0, p, w_src.size).astype(np.int64)
    c_src = np.repeat(np.arange(p, dtype=np.int64), 5)
    c_dst = rng.integers(0, p, c_src.size).astype(np.int64)
    split = rng.random(p)
    arrays = {
        "num_nodes/paper": np.array(p),
        "num_nodes/author": np.array(a),
        "edges/paper:cites:paper/src": c_src,
        "edges/paper:cites:paper/dst": c_dst,
        "edges/author:writes:paper/src": w_src,
        "edges/author:writes:paper/dst": w_dst,
        "edges/paper:written-by:author/src": w_dst,
        "edges/paper:written-by:author/dst": w_src,
        "ndata/paper/feat": feat,
        "ndata/paper/labels": labels.astype(np.int64),
        "ndata/paper/train_mask": (split < 0.9).astype(np.uint8),
        "ndata/paper/val_mask": ((split >= 0.9) & (split < 0.91)).astype(np.uint8),
        "ndata/paper/test_mask": (split >= 0.99).astype(np.uint8),
    }
    partition_graph(graph_from_arrays(arrays, "hemb"), 2, out, "hemb", method="random",
                    progress=False)  # fmt: skip
    return manifest


def _watch_rss(pids: list[int], peaks: dict[int, int], stop: threading.Event) -> None:
    import psutil

    procs = [psutil.Process(p) for p in pids]
    while not stop.is_set():
        for pr in procs:
            try:
                peaks[pr.pid] = max(peaks.get(pr.pid, 0), pr.memory_info().rss)
            except psutil.Error:
                continue
        stop.wait(0.1)


def run_mode(env: dict[str, str], sparse: bool, a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Two trainers of the app; rank 0's metrics and the trainers' peak RSS."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics = tmp / f"metrics-{'sparse' if sparse else 'dense'}.json"
    cmd = [
        sys.executable, "-m", "distgnn.cli", "train", "node-classification",
        "--model", "rgcn", "--target-ntype", "paper", "--label", "labels",
        "--epochs", str(a.epochs), "--hidden", str(a.hidden), "--fanouts", "10,10",
        "--batch-size", str(a.batch_size), "--lr", "0.01", "--dropout", "0.0",
        "--sparse-embedding" if sparse else "--no-sparse-embedding",
        "--metrics-file", str(metrics),
    ]  # fmt: skip
    procs = []
    for r in range(2):
        penv = dict(os.environ, **env, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port), OMP_NUM_THREADS="1", LOCAL_WORLD_SIZE="2",
                    DISTGNN_LOG_LEVEL="WARNING")  # fmt: skip
        penv.pop("DISTGNN_CHECKPOINT_URL", None)
        procs.append(subprocess.Popen(cmd, env=penv, stdout=subprocess.DEVNULL))
    peaks: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_rss, args=([p.pid for p in procs], peaks, stop))
    watcher.start()
    try:
        codes = [p.wait(timeout=1800) for p in procs]
    finally:
        stop.set()
        watcher.join()
    if any(codes):
        raise SystemExit(f"trainers failed: {codes}")
    m: dict[str, Any] = json.loads(metrics.read_text())
    if ("sparse_embedding_types" in m) != sparse:
        raise SystemExit(f"the trainers ran the other embedding mode: {m}")
    steps = int(m["steps_per_epoch"]) * int(m["epochs"])
    return {
        "step_s": float(m["train_seconds"]) / steps,
        "rss_gib": max(peaks.values()) / 2**30,
        "test_accuracy": float(m["test_accuracy"]),
        "steps_per_epoch": int(m["steps_per_epoch"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--authors", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=500)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import tempfile

    from servers import running_servers

    manifest = ensure_parts(a.authors)
    got: dict[str, list[dict[str, Any]]] = {"dense": [], "sparse": []}
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-hemb-") as tmp,
        running_servers(manifest, 2, workers=1, timeout=600) as srv,
    ):
        for _ in range(a.rounds):
            for mode in ("dense", "sparse"):
                got[mode].append(run_mode(srv.env(), mode == "sparse", a, Path(tmp)))
    table_mib = a.authors * a.hidden * 4 / 2**20
    print(
        f"bench_hetero_embedding: {PAPERS} papers (32-wide feat), {a.authors} featureless "
        f"authors (table {table_mib:.0f} MiB at hidden {a.hidden}), 2 partitions/servers, 2 "
        f"trainers x 1 thread, batch {a.batch_size}, fanouts 10,10, {a.epochs} epochs, "
        f"{got['dense'][0]['steps_per_epoch']} steps per epoch; {a.rounds} alternating "
        f"round(s), medians [min-max]; {time.monotonic() - t0:.0f} s in all"
    )

    def cell(mode: str, key: str, fmt: str) -> str:
        return median_range([r[key] for r in got[mode]], fmt)

    print(f"{'metric':<34} {'dense nn.Embedding':>26} {'sparse DistEmbedding':>26}")
    for label, key, fmt in (
        ("step (s)", "step_s", ".3f"),
        ("trainer peak RSS (GiB)", "rss_gib", ".2f"),
        ("test accuracy", "test_accuracy", ".3f"),
    ):
        print(f"{label:<34} {cell('dense', key, fmt):>26} {cell('sparse', key, fmt):>26}")


if __name__ == "__main__":
    main()
