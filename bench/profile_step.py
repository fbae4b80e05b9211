"""Where a trainer step's CPU goes, item by item (issue 17 section 2).

``python bench/profile_step.py [--steps 20] [--topology colocated|tcp|both]``: starts the
benchmark's 2 servers (the 1M-node graph of ``bench_training.py``, 2 METIS partitions),
then trains, in this process, as rank 0 of 2 trainers (rank 0's share of the training
nodes, beside partition 0 when co-located; one trainer, so the servers answer it alone)
with the benchmark's model and settings. Each item's CPU time is the thread time of
the functions named in ``ITEMS`` (inclusive; nested items are subtracted from their
parent), summed over the timed steps and printed in ms per step, with the servers'
CPU per step (psutil) and the step's compute (forward + backward + optimizer less the
block CSRs the layers build: the compute floor of ``bench_training.py`` re-runs batches
whose CSRs are already built). Thread time of one thread: waiting does not count.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

# (label, module, attribute path, parent label or None): inclusive thread time of each
ITEMS: list[tuple[str, str, str, str | None]] = [
    ("batch: seeds, 3 hops, blocks", "distgnn.sampling.batches", "NodeBatcher.make", None),
    (
        "  one-hop sampling (3 hops)",
        "distgnn.sampling.source",
        "_DistOneHop.__call__",
        "batch: seeds, 3 hops, blocks",
    ),
    (
        "    own partition, in-process",
        "distgnn.distributed.localsample",
        "LocalSampler.answer",
        "  one-hop sampling (3 hops)",
    ),
    (
        "    requests: encode, send, receive",
        "distgnn.rpc.client",
        "ServerPool.call_many",
        "  one-hop sampling (3 hops)",
    ),
    (
        "    answers checked (decode)",
        "distgnn.distributed.sampling",
        "decode_sample_answer",
        "  one-hop sampling (3 hops)",
    ),
    (
        "  to_block (relabelling)",
        "distgnn.sampling.neighbor",
        "to_block",
        "batch: seeds, 3 hops, blocks",
    ),
    ("feature + label read", "distgnn.train.graph", "TrainGraph.read", None),
    (
        "  local rows (shared memory gather)",
        "distgnn.distributed.localread",
        "LocalReader.gather_from",
        "feature + label read",
    ),
    (
        "  remote rows (PULL over TCP)",
        "distgnn.rpc.client",
        "ServerPool.call_many",
        "feature + label read",
    ),
    (
        "  feature cache (with --cache-mb)",
        "distgnn.distributed.featcache",
        "TensorCache.read",
        "feature + label read",
    ),
    (
        "    rows placed (cached and pulled)",
        "distgnn.distributed.featcache",
        "place_rows",
        "  feature cache (with --cache-mb)",
    ),
    ("block CSRs (forward)", "distgnn.nn.ops", "MeanAdjacency.__init__", None),
    ("block CSR transposes (backward)", "distgnn.nn.ops", "MeanAdjacency.transpose", None),
]


class Clock:
    """Thread time per label, only while ``on``: inclusive (``t``) and less the wrapped
    calls nested in it (``own``); a function wrapped under several parents
    (``call_many``) counts under the innermost active one."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {label: 0.0 for label, *_ in ITEMS}
        self.own: dict[str, float] = dict(self.t)
        self.active: list[list[Any]] = []  # [label, thread time of nested wrapped calls]
        self.on = False

    def wrap(self, labels: dict[str | None, str], fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*a: Any, **k: Any) -> Any:
            label = next((labels[f[0]] for f in reversed(self.active) if f[0] in labels), None)
            if label is None:
                label = labels.get(None)
            if label is None or not self.on:
                return fn(*a, **k)
            frame = [label, 0.0]
            self.active.append(frame)
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                dt = time.thread_time() - t0
                self.active.pop()
                self.t[label] += dt
                self.own[label] += dt - frame[1]
                if self.active:
                    self.active[-1][1] += dt

        return timed


def instrument(clock: Clock) -> None:
    by_target: dict[tuple[str, str], dict[str | None, str]] = {}
    for label, mod, attr, parent in ITEMS:
        by_target.setdefault((mod, attr), {})[parent] = label
    for (mod, attr), labels in by_target.items():
        m = importlib.import_module(mod)
        owner: Any = m
        *path, name = attr.split(".")
        for p in path:
            owner = getattr(owner, p, None)
        if not hasattr(owner, name):  # older code (an A/B against main): the item reads 0
            continue
        setattr(owner, name, clock.wrap(labels, getattr(owner, name)))


def run(manifest: str, topology: str, steps: int, warmup: int = 0) -> dict[str, float]:
    import psutil
    from servers import running_servers

    from bench_training import server_env

    with running_servers(manifest, 2, workers=1, env=server_env(2), timeout=600) as srv:
        env = dict(srv.env(), RANK="0", WORLD_SIZE="1", DISTGNN_LOG_LEVEL="WARNING")
        # the benchmark's trainers: 2 on the host, cpus // 2 torch threads each
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // 2))
        env["LOCAL_WORLD_SIZE"] = "2"
        if topology == "colocated":
            env["DISTGNN_LOCAL_PARTITION"] = "0"
            env["DISTGNN_LOCAL_STORE"] = srv.ready[0]["shm_dir"]
        os.environ.update(env)
        servers = [psutil.Process(p.pid) for p in srv.procs]

        def server_cpu() -> float:
            tot = 0.0
            for root in servers:
                for p in [root, *root.children(recursive=True)]:
                    t = p.cpu_times()
                    tot += t.user + t.system
            return tot

        return train(steps, server_cpu, warmup)


def train(steps: int, server_cpu: Callable[[], float], warmup: int = 0) -> dict[str, float]:
    import torch
    from torch.nn import functional as F

    from distgnn.distributed.featcache import WARMUP_READS
    from distgnn.distributed.split import node_split
    from distgnn.nn import GraphSAGE
    from distgnn.sampling import NeighborSampler, NodeBatcher
    from distgnn.train.graph import open_train_graph
    from distgnn.train.proc import configure_trainer_process

    configure_trainer_process()
    clock = Clock()
    instrument(clock)
    tg = open_train_graph()
    mask = torch.from_numpy(tg.read_all("train_mask").astype(bool))
    ids = node_split(mask, tg.g.get_partition_book(), rank=0, world_size=2).numpy()
    n_cls = int(tg.read_all("label").max()) + 1
    model = GraphSAGE(int(tg.read("feat", torch.tensor([0])).shape[1]), 256, n_cls, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    batcher = NodeBatcher(ids, NeighborSampler([15, 10, 5]), 1000, seed=0)
    compute: list[float] = []
    step_cpu: list[float] = []
    # 2 warm-up steps; with a feature cache, also its warm-up reads and the fill (a run
    # without one given --warmup 11 times the same batches)
    warm = warmup or (2 + WARMUP_READS + 1 if tg.cache_stats() is not None else 2)
    try:
        cpu0 = srv0 = 0.0
        for i in range(steps + warm):  # epoch after epoch when more than one
            if i == warm:
                clock.on = True
                cpu0, srv0 = time.thread_time(), server_cpu()
            t0 = time.thread_time()
            epoch, b = divmod(i, len(batcher))
            inp, out, blocks = batcher.decode(batcher.make(tg.source, 1 + epoch, b))
            x, y = tg.read("feat", inp).float(), tg.read("label", out).long()
            t1 = time.thread_time()
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if clock.on:
                compute.append(time.thread_time() - t1)
                step_cpu.append(time.thread_time() - t0)
        total = time.thread_time() - cpu0
        srv = server_cpu() - srv0
    finally:
        tg.close()
    n = len(compute)
    res: dict[str, float] = {}
    parents = {parent for *_, parent in ITEMS}
    for label, *_ in ITEMS:
        res[label] = (clock.t if label in parents else clock.own)[label] / n
        if label in parents:
            pad = " " * (len(label) - len(label.lstrip()) + 2)
            res[f"{pad}rest of: {label.strip()[:24]}"] = clock.own[label] / n
    csr = res["block CSRs (forward)"] + res["block CSR transposes (backward)"]
    res["compute (fwd + bwd + step, less the CSRs)"] = sum(compute) / n - csr
    res["trainer CPU per step (this thread)"] = total / n
    res["both servers' CPU per step"] = srv / n
    res["compute median step (s)"] = statistics.median(compute)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--topology", default="both", choices=["colocated", "tcp", "both"])
    ap.add_argument(
        "--cache-mb",
        type=float,
        default=0,
        help="a feature cache of this many MB (DISTGNN_FEATURE_CACHE_MB; 0: none)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed steps first (0: 2, or 11 with a cache: its warm-up reads "
        "and the fill; --warmup 11 without one times the same batches)",
    )
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    from bench_training import ensure_graph, ensure_parts

    manifest = ensure_parts(ensure_graph(a.nodes), a.nodes, "metis")
    if a.child:
        import json

        if a.cache_mb:
            os.environ["DISTGNN_FEATURE_CACHE_MB"] = str(a.cache_mb)

        print(json.dumps(run(manifest, a.child, a.steps, a.warmup)))
        return
    import json
    import subprocess

    topos = ["colocated", "tcp"] if a.topology == "both" else [a.topology]
    got = {}
    for t in topos:  # a fresh process each: no instrumented state shared
        out = subprocess.run(
            [sys.executable, __file__, "--child", t, "--steps", str(a.steps),
             "--nodes", str(a.nodes), "--cache-mb", str(a.cache_mb),
             "--warmup", str(a.warmup)],
            check=True, stdout=subprocess.PIPE, text=True,
        ).stdout  # fmt: skip
        got[t] = json.loads(out.strip().splitlines()[-1])
    cache = f", feature cache {a.cache_mb:g} MB" if a.cache_mb else ""
    print(f"profile_step: {a.nodes} nodes, rank 0 of 2's training nodes, {a.steps} steps"
          f"{cache}; ms of CPU per step (thread time)")  # fmt: skip
    print(f"{'item':<48}" + "".join(f" {t:>10}" for t in topos))
    for label in got[topos[0]]:
        scale = 1 if label.endswith("(s)") else 1000
        print(f"{label:<48}" + "".join(f" {got[t][label] * scale:>10.1f}" for t in topos))


if __name__ == "__main__":
    main()
