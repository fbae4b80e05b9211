"""Training benchmark: GraphSAGE epoch time and distributed one-hop sampling throughput.

Run: ``python bench/bench_training.py [--nodes 1000000] [--steps 8] [--trainers 2]``.

The benchmark graph (``distgnn.graph.generate``: 1M nodes, ~12M edges, 100 float32
features) is generated once and cached under /tmp/distgnn-bench, partitioned into 2
parts (METIS, cached) and served by 2 real ``distgnn serve`` processes on loopback.

* one-hop sampling: ``distgnn.dist.sampling.sample_neighbors`` (fanout 10) on batches
  of random seeds from one client; seeds/s (median of ``--reps``) vs DGL 2.1's 363k.
* one GraphSAGE epoch (3 layers, fanouts 15,10,5, hidden 256, batch 1000) with
  ``--trainers`` DDP trainer processes: a full epoch is too slow on a 2-core machine,
  so ``--steps`` timed steps per trainer (after 2 warm-up steps) are extrapolated to
  the epoch's step count (median step time x steps per epoch). DGL 2.1: 12.7 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

DGL_EPOCH_S = 12.7
DGL_SEEDS_PER_S = 363_000
CACHE = "/tmp/distgnn-bench"
REPO = Path(__file__).resolve().parents[1]


def ensure_graph(nodes: int) -> str:
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    graph = f"{CACHE}/gen-{nodes}"
    if not os.path.exists(f"{graph}/.complete"):
        print(f"generating {graph} ...", file=sys.stderr)
        write_graph_dir(generate_graph(GenerateOptions(nodes=nodes)), graph)
        open(f"{graph}/.complete", "w").close()
    return graph


def ensure_parts(graph: str, nodes: int, method: str) -> str:
    from distgnn.partition.partitioner import partition_graph

    out = f"{CACHE}/train-{nodes}-{method}-2"
    manifest = f"{out}/bench.json"
    if not os.path.exists(manifest):
        print(f"partitioning into {out} ...", file=sys.stderr)
        partition_graph(graph, 2, out, "bench", method=method, progress=False)
    return manifest


def bench_sampling(env: dict[str, str], reps: int) -> list[tuple[int, float]]:
    import numpy as np

    from distgnn.dist.context import initialize
    from distgnn.dist.graph import DistGraph
    from distgnn.dist.sampling import sample_neighbors

    g = DistGraph(initialize(env=env), own=True)
    rng = np.random.default_rng(0)
    out = []
    try:
        for batch in (1000, 10000, 100000):
            times = []
            for r in range(reps + 2):
                seeds = rng.choice(g.num_nodes(), batch, replace=False)
                t0 = time.perf_counter()
                sample_neighbors(g, seeds, 10, seed=r)
                if r >= 2:
                    times.append(time.perf_counter() - t0)
            out.append((batch, batch / statistics.median(times)))
    finally:
        g.close()
    return out


def child_train(steps: int) -> None:
    """One DDP trainer: time ``steps`` GraphSAGE steps after 2 warm-up steps."""
    import torch
    from torch.nn import functional as F

    from distgnn.nn import GraphSAGE
    from distgnn.sampling import NeighborSampler, NodeBatcher
    from distgnn.sampling.loader import DistDataLoader
    from distgnn.train.ddp import agree_steps, init_ddp, shutdown, wrap
    from distgnn.train.graph import open_train_graph

    ctx = init_ddp()
    tg = open_train_graph()
    ids = tg.split_nodes("train_mask", ctx)
    n_cls = int(tg.read_all("label").max()) + 1
    model = wrap(ctx, GraphSAGE(int(tg.read("feat", torch.tensor([0])).shape[1]), 256, n_cls, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    batcher = NodeBatcher(ids, NeighborSampler([15, 10, 5]), 1000, seed=ctx.rank)
    num = int(os.environ.get("DISTGNN_NUM_SAMPLERS", "0"))
    times, parts = [], {"sample": [], "fetch": [], "compute": []}
    with DistDataLoader(tg.source, batcher, num) as loader:
        steps_per_epoch = agree_steps(ctx, len(loader))
        it = iter(loader)
        t_prev = time.perf_counter()
        for i in range(steps + 2):
            inp, out, blocks = next(it)
            t1 = time.perf_counter()
            x, y = tg.read("feat", inp).float(), tg.read("label", out).long()
            t2 = time.perf_counter()
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t3 = time.perf_counter()
            if i >= 2:
                times.append(t3 - t_prev)
                parts["sample"].append(t1 - t_prev)
                parts["fetch"].append(t2 - t1)
                parts["compute"].append(t3 - t2)
            t_prev = t3
    tg.close()
    shutdown(ctx)
    if ctx.rank == 0:
        med = {k: statistics.median(v) for k, v in parts.items()}
        print(
            json.dumps(
                {
                    "step_s": statistics.median(times),
                    "steps_per_epoch": steps_per_epoch,
                    "input_nodes": int(inp.numel()),
                    **med,
                }
            )
        )


def bench_epoch(env: dict[str, str], trainers: int, steps: int, samplers: int) -> dict[str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(trainers):
        penv = dict(
            os.environ,
            **env,
            RANK=str(r),
            WORLD_SIZE=str(trainers),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            DISTGNN_NUM_SAMPLERS=str(samplers),
            DISTGNN_LOG_LEVEL="WARNING",
        )
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child-train", "--steps", str(steps)],
            env=penv, stdout=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"trainer failed: {[p.returncode for p in procs]}")
    res: dict[str, float] = json.loads(outs[0].strip().splitlines()[-1])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per trainer")
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--num-samplers", type=int, default=0)
    ap.add_argument("--reps", type=int, default=15, help="sampling repetitions")
    ap.add_argument("--method", default="metis", choices=["metis", "random"])
    ap.add_argument("--child-train", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_train:
        child_train(a.steps)
        return
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from servers import running_servers

    manifest = ensure_parts(ensure_graph(a.nodes), a.nodes, a.method)
    with running_servers(manifest, num_parts=2, workers=1, timeout=600) as srv:
        env = srv.env()
        samp = bench_sampling(env, a.reps)
        ep = bench_epoch(env, a.trainers, a.steps, a.num_samplers)
    epoch_s = ep["step_s"] * ep["steps_per_epoch"]
    best = max(v for _, v in samp)
    print(
        f"bench_training: {a.nodes} nodes, 2 partitions/servers, {a.trainers} trainers, "
        f"num_samplers={a.num_samplers}; epoch extrapolated from {a.steps} steps (medians)"
    )
    print(f"{'metric':<38} {'distgnn':>12} {'DGL 2.1':>10} {'ratio':>8} {'target':>8}")
    rows = [
        ("GraphSAGE epoch (s, extrapolated)", f"{epoch_s:.1f}", f"{DGL_EPOCH_S}",
         f"{epoch_s / DGL_EPOCH_S:.2f}x", "<=0.8x"),
        ("  step (s) / steps per epoch", f"{ep['step_s']:.2f}/{ep['steps_per_epoch']:.0f}",
         "", "", ""),
        ("  sample / fetch / compute (s)",
         f"{ep['sample']:.2f}/{ep['fetch']:.2f}/{ep['compute']:.2f}", "", "", ""),
    ]  # fmt: skip
    for batch, v in samp:
        rows.append((f"one-hop sampling, batch {batch} (seeds/s)", f"{v / 1e3:.0f}k",
                     f"{DGL_SEEDS_PER_S / 1e3:.0f}k", f"{v / DGL_SEEDS_PER_S:.2f}x",
                     ">=3x" if v == best else ""))  # fmt: skip
    for r in rows:
        print(f"{r[0]:<38} {r[1]:>12} {r[2]:>10} {r[3]:>8} {r[4]:>8}")


if __name__ == "__main__":
    main()
