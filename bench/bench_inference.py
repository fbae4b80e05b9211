"""Inference benchmark: layer-wise full-neighbour GraphSAGE over the whole graph.

Run: ``python bench/bench_inference.py [--nodes 1000000] [--reps 3] [--batch-size 16384]``.

The benchmark graph of bench_training.py (``distgnn.graph.generate``: 1M nodes, ~12M
edges, 100 float32 features; cached under /tmp/distgnn-bench, METIS into 2 parts) and a
3-layer, hidden-256 GraphSAGE (random weights, saved as a checkpoint).

* distributed: 2 real ``distgnn serve`` processes and 2 ``distgnn train inference``
  trainers (DDP over gloo, 1 torch thread each on 2 cores); the intermediate layers are
  DistTensors on the servers; each trainer computes its partition's nodes. Nodes/s is
  N / the layer-wise pass (rank 0's ``inference_compute_seconds``: the three layers,
  barriers included; writing the output is reported separately).
* reference: one process with the whole graph in memory (a ``LocalGraph``, every layer
  a NumPy array, all cores' torch threads) running the same layer-wise pass
  (``distgnn.train.layerwise.layer_pass``, same batch size); its CSC index is built
  before timing.

Peak memory: the trainers' and the reference's ``ru_maxrss``; the servers' VmHWM (main
process + workers) from /proc. Medians over ``--reps`` runs; the target is distributed
>= 70 % of the reference's nodes/s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = "/tmp/distgnn-bench"
TARGET = 0.70


def make_checkpoint(graph: str, out: str) -> str:
    """A 3-layer hidden-256 GraphSAGE for the graph's features/classes, as a checkpoint."""
    import numpy as np
    import torch

    from distgnn.graph.io import read_arrays
    from distgnn.nn import GraphSAGE
    from distgnn.train import checkpoint

    arrays = read_arrays(graph)
    in_feats = int(arrays["feat"].shape[1])
    n_cls = int(np.asarray(arrays["label"]).max()) + 1
    torch.manual_seed(0)
    model = GraphSAGE(in_feats, 256, n_cls, 3)
    ck = checkpoint.Checkpoint(0, model.state_dict(), {}, extra={"app": "node-classification"})
    checkpoint.save(out, ck)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vm_hwm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _server_hwm(pids: list[int]) -> list[float]:
    """Peak RSS of each server (its main process plus its worker processes)."""
    import psutil

    out = []
    for pid in pids:
        try:
            kids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            kids = []
        out.append(sum(_vm_hwm_mb(p) for p in [pid, *kids]))
    return out


def run_distributed(
    env: dict[str, str], ckpt: str, batch: int, trainers: int, workdir: str
) -> list[dict[str, Any]]:
    """One inference run; each trainer's ``inference done`` summary line."""
    port = _free_port()
    out = os.path.join(workdir, "out")
    procs = []
    for r in range(trainers):
        penv = dict(
            os.environ,
            **env,
            RANK=str(r),
            WORLD_SIZE=str(trainers),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            DISTGNN_LOG_FORMAT="json",
            OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // trainers)),
        )
        cmd = [sys.executable, "-m", "distgnn.cli", "train", "inference",
               "--checkpoint-url", ckpt, "--output-url", out,
               "--infer-batch-size", str(batch)]  # fmt: skip
        procs.append(
            subprocess.Popen(
                cmd, env=penv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    errs = [p.communicate(timeout=3600)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"trainer failed: {[p.returncode for p in procs]}\n{errs[0][-3000:]}")
    res = []
    for e in errs:
        lines = [json.loads(x) for x in e.splitlines() if x.startswith("{")]
        done = [x for x in lines if x.get("msg") == "inference done"][-1]
        done["layers"] = [x["seconds"] for x in lines if x.get("msg") == "inference layer"]
        res.append(done)
    return res


def child_reference(graph: str, ckpt: str, batch: int) -> None:
    """The single-process layer-wise pass; prints one JSON line."""
    import resource

    import numpy as np
    import torch

    from distgnn.graph.io import read_arrays
    from distgnn.sampling.local import LocalGraph
    from distgnn.sampling.source import LocalSource
    from distgnn.train import checkpoint
    from distgnn.train.ddp import DDPContext
    from distgnn.train.graph import TrainGraph
    from distgnn.train.inference import model_from_state, resolve_checkpoint
    from distgnn.train.layerwise import FeatureRows, layer_pass, layerwise, rows_factory
    from distgnn.train.proc import configure_trainer_process

    threads = configure_trainer_process()
    a = read_arrays(graph)
    n = int(a["feat"].shape[0])
    lg = LocalGraph(np.asarray(a["src"]), np.asarray(a["dst"]), n, {"feat": np.asarray(a["feat"])})
    tg = TrainGraph(lg, LocalSource(lg))
    lg.one_hop(np.random.default_rng(0))(np.arange(2), -1, replace=False, prob=None, edge_dir="in")
    model = model_from_state(checkpoint.load(resolve_checkpoint(ckpt)).model)
    ctx = DDPContext(0, 1, torch.device("cpu"))
    t0, c0 = time.monotonic(), time.process_time()
    layer_pass(
        tg, layerwise(model), FeatureRows(tg, "feat"), np.arange(n), ctx,
        rows_factory(tg, "ref"), batch,
    )  # fmt: skip
    dt, cpu = time.monotonic() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": dt, "cpu": cpu, "nodes": n, "peak_rss_mb": rss,
                      "threads": threads}))  # fmt: skip


def run_reference(graph: str, ckpt: str, batch: int) -> dict[str, Any]:
    env = dict(os.environ, DISTGNN_LOG_LEVEL="WARNING")
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    cmd = [sys.executable, __file__, "--child-reference", "--graph", graph,
           "--ckpt", ckpt, "--batch-size", str(batch)]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=True)
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000, help="graph size (quick: 100000)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each (medians)")
    ap.add_argument("--batch-size", type=int, default=16384, help="nodes per inference batch")
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--child-reference", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_reference:
        child_reference(a.graph, a.ckpt, a.batch_size)
        return
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from servers import running_servers

    from bench_training import _tree_cpu, ensure_graph, ensure_parts

    graph = ensure_graph(a.nodes)
    manifest = ensure_parts(graph, a.nodes, "metis")
    ckpt = make_checkpoint(graph, f"{CACHE}/infer-ckpt-{a.nodes}")
    refs = [run_reference(graph, ckpt, a.batch_size) for _ in range(a.reps)]
    dist: list[list[dict[str, Any]]] = []
    with running_servers(manifest, num_parts=2, workers=1, timeout=600) as srv:
        pids = [p.pid for p in srv.procs]
        server_cpu = []
        for _ in range(a.reps):
            with tempfile.TemporaryDirectory(prefix="bench-infer-") as wd:
                c0 = _tree_cpu(pids)
                dist.append(run_distributed(srv.env(), ckpt, a.batch_size, a.trainers, wd))
                server_cpu.append(_tree_cpu(pids) - c0)
        server_mb = _server_hwm([p.pid for p in srv.procs])
    n = refs[0]["nodes"]
    ref_s = statistics.median(r["seconds"] for r in refs)
    dist_s = statistics.median(d[0]["inference_compute_seconds"] for d in dist)
    total_s = statistics.median(d[0]["inference_seconds"] for d in dist)
    layer_s = [statistics.median(d[0]["layers"][i] for d in dist) for i in range(3)]
    ratio = (n / dist_s) / (n / ref_s)
    ref_cpu = statistics.median(r["cpu"] for r in refs)
    dist_cpu = statistics.median(
        sum(t["compute_cpu_seconds"] for t in d) + c for d, c in zip(dist, server_cpu, strict=True)
    )
    print(
        f"bench_inference: {n} nodes, 3-layer hidden-256 GraphSAGE, batch {a.batch_size}, "
        f"medians of {a.reps} runs; distributed: 2 partitions/servers, {a.trainers} trainers "
        f"({dist[0][0].get('threads', 1)} thread each); reference: 1 process, "
        f"{refs[0]['threads']} threads, whole graph in memory; {os.cpu_count()} CPUs"
    )
    print("runs (s): reference " + ", ".join(f"{r['seconds']:.1f}" for r in refs)
          + "; distributed " + ", ".join(f"{d[0]['inference_compute_seconds']:.1f}"
                                          for d in dist))  # fmt: skip
    print(f"{'metric':<46} {'distributed':>12} {'reference':>10} {'ratio':>7} {'target':>7}")
    rows = [
        ("layer-wise pass, 3 layers (nodes/s)", f"{n / dist_s / 1e3:.0f}k",
         f"{n / ref_s / 1e3:.0f}k", f"{ratio:.2f}", f">={TARGET:.2f}"),
        ("  pass (s)", f"{dist_s:.1f}", f"{ref_s:.1f}", "", ""),
        ("  per layer (s, rank 0)", "/".join(f"{x:.1f}" for x in layer_s), "", "", ""),
        ("  pass + writing the output (s)", f"{total_s:.1f}", "", "", ""),
        ("CPU-s of the pass (trainers + servers)", f"{dist_cpu:.1f}", f"{ref_cpu:.1f}",
         f"{ref_cpu / dist_cpu:.2f}", ""),
        ("nodes per CPU-second", f"{n / dist_cpu / 1e3:.1f}k", f"{n / ref_cpu / 1e3:.1f}k",
         f"{ref_cpu / dist_cpu:.2f}", ""),
        ("peak RSS per trainer (MiB)",
         "/".join(f"{t['peak_rss_mb']:.0f}" for t in dist[-1]),
         f"{statistics.median(r['peak_rss_mb'] for r in refs):.0f}", "", ""),
        ("peak RSS per server incl. workers (MiB)", "/".join(f"{x:.0f}" for x in server_mb),
         "", "", ""),
    ]  # fmt: skip
    for r in rows:
        print(f"{r[0]:<46} {r[1]:>12} {r[2]:>10} {r[3]:>7} {r[4]:>7}")


if __name__ == "__main__":
    main()
