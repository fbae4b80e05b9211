"""Training benchmark: GraphSAGE epoch time and distributed one-hop sampling throughput.

Run: ``python bench/bench_training.py [--epochs 3 | --steps 20] [--trainers 2]
[--prefetch auto|on|off] [--precision 32|bf16-mixed] [--colocate ROUNDS]``.

The benchmark graph (``distgnn.graph.generate``: 1M nodes, ~12M edges, 100 float32
features) is generated once and cached under /tmp/distgnn-bench, partitioned into 2
parts (METIS, cached) and served by 2 real ``distgnn serve`` processes on loopback.

* one-hop sampling: ``distgnn.distributed.sampling.sample_neighbors`` (fanout 10) on batches
  of random seeds from one client; seeds/s (median of ``--reps``).
* GraphSAGE epochs (3 layers, fanouts 15,10,5 in DGL order, hidden 256, batch 1000,
  dropout 0.5) with ``--trainers`` DDP trainer processes (``distgnn.train.proc``: each
  gets ``cpus // trainers`` torch threads and the tuned allocator), features pulled in
  turn or by a prefetch thread (``--prefetch``; ``auto`` follows the trainers' own rule,
  ``distgnn.train.proc.use_prefetch``: a thread only beside an idle CPU). Default:
  ``--epochs`` (3) full epochs after 2 warm-up steps, median epoch time; ``--steps N``:
  N timed steps, epoch EXTRAPOLATED (median step x steps per epoch). Comparisons with
  DGL on the same work are ``bench/compare_dgl.py``'s; this script prints DistGNN's own
  figures and the compute floor (``--floor-steps``: rank 0 alone, and every trainer at
  once, which shows what the machine's cores give compute together).
  Per-step breakdown (rank 0 medians): waiting for the batch, sampling and feature pull
  (in the prefetch thread when on), forward, backward (DDP all-reduce inside), the
  all-reduce alone, optimizer; CPU seconds per step of a trainer and of both servers
  (psutil, approximate). ``--warmup N``: the untimed steps before the timed ones (2; -1:
  a whole epoch).
* Every rank's batch making and reads in the timed steps (per step): its sampling and its
  feature + label pull, each as wall = the main thread's CPU (its kernel time and page
  faults) + waiting for a core + blocked; the rows and bytes pulled over TCP, the requests
  to the servers, the rows read from a co-located server's shared memory, the sampling
  requests answered in-process.
* ``--colocate ROUNDS``: the same training with trainers over TCP and co-located
  (``trainers.colocate``: each trainer reads its partition's rows and samples its
  partition's seeds from its server's shared memory), runs alternating; per-step
  medians side by side. ``--modes`` picks the topologies (``colocated-tcp-sampling``:
  co-located with ``DISTGNN_LOCAL_SAMPLING=0``, sampling over TCP).
* The timed window's whole-machine account (``bench/cpu_account.py``, from ``/proc``; a
  few lines per mode, ms per timed step, medians over runs): the cores' time by owner
  (each trainer with all its threads, both servers with their workers, other processes,
  idle, steal) and the window's mean step less the median step (slow steps); per rank its
  CPU (threads other than the main one, kernel time, page faults) and its main thread's
  time off its core, waiting for one (runnable) or blocked (sleeping), by phase: getting
  the batch (sampling, pull), forward, backward (DDP's all-reduce waits for the slower
  rank there), optimizer, between steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from epoch_floor import timeline_lines as ef_lines
from summary import median_range

CACHE = "/tmp/distgnn-bench"
REPO = Path(__file__).resolve().parents[1]


def ensure_graph(nodes: int) -> str:
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    graph = f"{CACHE}/gen2-{nodes}"
    if not os.path.exists(f"{graph}/.complete"):
        print(f"generating {graph} ...", file=sys.stderr)
        write_graph_dir(generate_graph(GenerateOptions(nodes=nodes)), graph)
        open(f"{graph}/.complete", "w").close()
    return graph


def ensure_parts(graph: str, nodes: int, method: str) -> str:
    from distgnn.partition.partitioner import partition_graph

    out = f"{CACHE}/train2-{nodes}-{method}-2"
    manifest = f"{out}/bench.json"
    if not os.path.exists(manifest):
        print(f"partitioning into {out} ...", file=sys.stderr)
        partition_graph(graph, 2, out, "bench", method=method, progress=False)
    return manifest


def server_env(trainers: int) -> dict[str, str]:
    """The servers' environment as ``distgnn run`` gives it on a host shared with
    ``trainers`` one-process trainers of ``cpus // trainers`` torch threads each: the row
    gather on the CPUs those leave free, at least 1 (``DISTGNN_GATHER_THREADS`` from the
    environment wins)."""
    from distgnn.cpus import available_cpus
    from distgnn.rpc.gather import ENV_GATHER_THREADS, shared_host_threads

    if os.environ.get(ENV_GATHER_THREADS, "").strip():
        return {}
    cpus = available_cpus()
    used = trainers * max(1, cpus // max(1, trainers))
    return {ENV_GATHER_THREADS: str(shared_host_threads(cpus, used))}


def bench_sampling(env: dict[str, str], reps: int) -> list[tuple[int, float]]:
    import numpy as np

    from distgnn.distributed.context import initialize
    from distgnn.distributed.graph import DistGraph
    from distgnn.distributed.sampling import sample_neighbors

    g = DistGraph(ctx=initialize(env=env), own=True)
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


def child_train(
    steps: int,
    epochs: int,
    use_prefetch: bool,
    precision: str,
    floor_steps: int = 0,
    floor: bool = True,
    floor_ddp: bool = False,
    warmup: int = 2,
) -> None:
    """One DDP trainer. ``steps > 0``: time ``steps`` steps after ``warmup`` warm-up
    steps; ``steps == 0``: time ``epochs`` full epochs after them. ``floor``: the
    compute floor of the timed steps' own batches (``epoch_floor``: each made again after
    them, untimed, and its forward + backward + step timed), rank 0 alone (no DDP, the
    servers and the other trainer idle), then every trainer at once (a barrier before each
    batch); ``floor_ddp``: also through DDP. ``floor_steps`` (the earlier floor): every
    trainer trains that many more (untimed) steps and keeps their batches, and the same is
    measured on those (median step, 2 passes)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn import functional as F

    import epoch_floor as ef
    from cpu_account import account, snapshot, thread_times
    from distgnn.nn import GraphSAGE
    from distgnn.sampling import NeighborSampler, NodeBatcher
    from distgnn.sampling.loader import BatchLoader, prefetch
    from distgnn.train.config import TrainConfig
    from distgnn.train.ddp import agree_steps, barrier, init_ddp, shutdown, wrap
    from distgnn.train.graph import open_train_graph
    from distgnn.train.loop import Steps, autocast, deferred_sync, padded
    from distgnn.train.proc import configure_trainer_process

    threads = configure_trainer_process()
    server_pids = [int(p) for p in os.environ.get(ENV_SERVER_PIDS, "").split(",") if p]
    watched = {"trainer": [os.getpid()]}
    cfg = TrainConfig(precision=precision).validate()
    ctx = init_ddp()
    if ctx.rank == 0 and server_pids:
        watched["servers"] = server_pids
    tg = open_train_graph()
    ids = tg.split_nodes("train_mask", ctx)
    n_cls = int(tg.read_all("label").max()) + 1
    model = wrap(ctx, GraphSAGE(int(tg.read("feat", torch.tensor([0])).shape[1]), 256, n_cls, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    batcher = NodeBatcher(ids, NeighborSampler([15, 10, 5]), 1000, seed=ctx.rank)
    num = int(os.environ.get("DISTGNN_NUM_SAMPLERS", "0"))
    keys = ("wait", "sample", "fetch", "forward", "backward", "optimizer")
    parts: dict[str, list[float]] = {k: [] for k in keys}
    # the main thread's CPU and run-queue wait per phase, summed over the timed steps
    phases = ("batch", "forward", "backward", "sync", "optimizer")
    ph_cpu = dict.fromkeys(phases, 0.0)
    ph_runq = dict.fromkeys(phases, 0.0)
    ph_wall = dict.fromkeys(phases, 0.0)
    ph_sys = dict.fromkeys(phases, 0.0)
    ph_faults = dict.fromkeys(phases, 0.0)
    times: list[float] = []
    epoch_times: list[float] = []
    n_inputs: list[int] = []
    kept: list[tuple[Any, Any, Any]] = []  # extra batches re-run for the earlier floor
    trained: list[ef.StepBatch] = []  # what each timed step trained on (the floor's batches)
    lines: list[list[float]] = []  # each timed epoch's timeline (epoch_floor.timeline_floats)
    gc_epochs: list[list[list[float]]] = []  # rank 0's collections in each timed epoch
    split: list[float] = []  # each timed step's sampling and pull seconds, in turn
    # the timed steps' sampling and pull, summed: wall, CPU, wait for a core, kernel, faults
    make_acct = [np.zeros(5), np.zeros(5)]
    sync = deferred_sync(ctx, model, use_prefetch)  # DISTGNN_DEFER_ALLREDUCE, as the app

    # all-reduce of one gradient-sized buffer (DDP does this inside backward)
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))
    ar = []
    for _ in range(7):
        t0 = time.perf_counter()
        if ctx.joined:
            dist.all_reduce(flat)
        ar.append(time.perf_counter() - t0)

    def timed_batches(loader: BatchLoader) -> Any:
        epoch = loader.epoch  # the epoch this iter() samples
        it = iter(loader)
        index = 0
        while True:
            t0, c0 = time.perf_counter(), thread_times()
            b = next(it, None)
            if b is None:
                return
            t1, c1 = time.perf_counter(), thread_times()
            yield t1 - t0, (epoch, index), b, (t1 - t0, c1 - c0)
            index += 1

    def load(item: Any) -> Any:
        t_sample, key, (inp, out, blocks), made = item
        t1, c1 = time.perf_counter(), thread_times()
        x, y = tg.read("feat", inp).float(), tg.read("label", out).long()
        t2, c2 = time.perf_counter(), thread_times()
        made = (*made, t2 - t1, c2 - c1)  # sampling's and the pull's wall and thread times
        return t_sample, t2 - t1, x, y, blocks, (*key, *ef.fingerprint(inp), made)

    gcs: list[list[float]] = []  # the garbage collector's runs: start, seconds, generation
    gc_t0: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_t0[:] = [time.perf_counter()]
        elif gc_t0:
            gcs.append([gc_t0[0], time.perf_counter() - gc_t0[0], float(info["generation"])])

    import gc

    gc.callbacks.append(on_gc)

    def run_steps(loader: BatchLoader, n: int, record: bool, keep: bool = False) -> int:
        t_start = time.perf_counter()
        first = -1.0
        line: list[list[float]] = []
        src = timed_batches(loader)
        batches = prefetch(src, load) if use_prefetch else map(load, src)
        done = 0
        try:
            t_prev, c_prev = time.perf_counter(), thread_times()
            # padded: a trainer out of batches repeats its last one with weight 0
            # (the app's Steps: with a deferred all-reduce, the next batch is made while
            # it waits for the other ranks, in sync_gradients)
            steps_it = Steps(padded(batches, n), sync)
            for (t_sample, t_fetch, x, y, blocks, ident), w in steps_it:
                t1, c1 = time.perf_counter(), thread_times()
                if first < 0:
                    first = t1 - t_start
                with steps_it.no_sync():
                    with autocast(cfg, x.device):
                        logits = model(blocks, x).float()
                    loss = F.cross_entropy(logits, y) * w
                    t2, c2 = time.perf_counter(), thread_times()
                    opt.zero_grad()
                    loss.backward()
                t_bwd, c_bwd = time.perf_counter(), thread_times()
                steps_it.sync_gradients()  # deferred: the all-reduce, the next batch meanwhile
                t3, c3 = time.perf_counter(), thread_times()
                opt.step()
                t4, c4 = time.perf_counter(), thread_times()
                if record:
                    for ph, (ta, tb, ca, cb) in zip(
                        phases,
                        (
                            (t_prev, t1, c_prev, c1),
                            (t1, t2, c1, c2),
                            (t2, t_bwd, c2, c_bwd),
                            (t_bwd, t3, c_bwd, c3),
                            (t3, t4, c3, c4),
                        ),
                        strict=True,
                    ):
                        ph_wall[ph] += tb - ta
                        ph_cpu[ph] += cb.cpu_s - ca.cpu_s
                        ph_runq[ph] += cb.runq_s - ca.runq_s
                        ph_sys[ph] += cb.sys_s - ca.sys_s
                        ph_faults[ph] += cb.faults - ca.faults
                    times.append(t4 - t_prev)
                    for k, v in zip(
                        keys,
                        # waiting: for the batch, and (deferred) the all-reduce + next batch
                        (t1 - t_prev + t3 - t_bwd, t_sample, t_fetch, t2 - t1, t_bwd - t2, t4 - t3),
                        strict=True,
                    ):
                        parts[k].append(v)
                    n_inputs.append(ident[2])
                    trained.append(ef.StepBatch(ident[0], ident[1], w, ident[2], ident[3]))
                    line.append([t4 - t_start, t_sample + t_fetch, t2 - t1 + t_bwd - t2 + t4 - t3])
                    split.extend([t_sample, t_fetch])
                    for i, (wall, ct) in enumerate((ident[4][:2], ident[4][2:])):
                        make_acct[i] += [wall, ct.cpu_s, ct.runq_s, ct.sys_s, ct.faults]
                if keep and len(kept) < floor_steps:
                    kept.append((x, y, blocks))
                t_prev, c_prev = t4, c4
                done += 1
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        if record:
            gc_epochs.append(
                [[a - t_start, b, g] for a, b, g in gcs if t_start <= a <= time.perf_counter()]
            )
            # the head's loop end and end (after the closing barrier) filled in by the caller
            lines.append(ef.timeline_floats([first, time.perf_counter() - t_start, 0.0], line))
        return done

    def mark_end(t_start: float) -> None:
        """The last timed epoch's end (after its closing barrier), in its timeline."""
        lines[-1][2] = time.perf_counter() - t_start

    with BatchLoader(tg.source, batcher, num) as loader:
        steps_per_epoch = agree_steps(ctx, len(loader))
        # warm-up (epoch 0; all of it with warmup < 0)
        run_steps(loader, steps_per_epoch if warmup < 0 else warmup, record=False)
        barrier(ctx)
        cpu0 = time.process_time()
        # the timed window (every rank from the same barrier): its whole-machine account
        snap0 = snapshot(watched)
        io0 = io_counters(tg)
        if steps > 0:
            loader.set_epoch(1)
            t0 = time.perf_counter()
            run_steps(loader, steps, record=True)
            barrier(ctx)
            mark_end(t0)
        else:
            for e in range(epochs):
                loader.set_epoch(1 + e)
                barrier(ctx)
                t0 = time.perf_counter()
                run_steps(loader, steps_per_epoch, record=True)
                barrier(ctx)
                epoch_times.append(time.perf_counter() - t0)
                mark_end(t0)
        acct = account(snap0, snapshot(watched))
        io = [b - a for a, b in zip(io0, io_counters(tg), strict=True)]
        cpu = (time.process_time() - cpu0) / max(1, len(times))
        # every rank's own figures to rank 0 (a float tensor: no pickle)
        me = acct.groups["trainer"]
        mine = [me.cpu_s, me.runq_s, me.sys_s, float(me.faults)]
        mine += [acct.thread.cpu_s, acct.thread.runq_s, acct.thread_blocked_s]
        for ph in phases:
            mine += [ph_wall[ph], ph_cpu[ph], ph_runq[ph], ph_sys[ph], ph_faults[ph]]
        everyone = gather_floats(ctx, mine)
        timelines = [ef.timeline(gather_floats(ctx, line)) for line in lines]
        step_split = gather_floats(ctx, split)  # every rank's (sampling, pull) per step
        io_ranks = gather_floats(ctx, io)  # every rank's reads in the timed window
        make_ranks = gather_floats(ctx, [float(v) for a in make_acct for v in a])
        # the pulls and the cache up to here (warm-up and timed steps; not the floors')
        cache = getattr(getattr(tg.g, "ctx", None), "feature_cache", None)
        cache_stats = dataclasses.asdict(cache.stats) if cache else None
        cstats = tg.client_stats()
        pulled = cstats.bytes_pulled if cstats else 0
        if floor_steps:
            # the floor's batches come from extra, untimed steps: holding them during the
            # timed ones keeps ~0.1 GB each from the allocator, so the timed steps would
            # page-fault fresh memory (measured: a 25-step epoch 13.1-13.3 s vs 10.8-11.8 s)
            loader.set_epoch(1 + max(1, epochs))
            run_steps(loader, floor_steps, record=False, keep=True)

    # the floor: the timed steps' own batches, made again (untimed), compute timed
    def per_epoch(seconds: float) -> float:
        """Summed over the timed steps -> per epoch (with ``steps``: extrapolated)."""
        if steps == 0:
            return seconds / max(1, epochs)
        return seconds / max(1, len(trained)) * steps_per_epoch

    fl: dict[str, Any] = {}
    if floor and trained:

        def rebuild(step: Any) -> Any:
            arrays = ef.remake(batcher, tg.source, step)
            inp, out, blocks = batcher.decode(arrays)
            x, y = tg.read("feat", inp).float(), tg.read("label", out).long()
            return step.weight, x, y, blocks, arrays

        def again(batch: Any) -> Any:  # the blocks decoded again: no CSR built yet
            w, x, y, _, arrays = batch
            return w, x, y, batcher.decode(arrays)[2], arrays

        def compute(module: Any) -> Any:
            def run(batch: Any) -> None:
                w, x, y, blocks, _ = batch
                with autocast(cfg, x.device):
                    logits = module(blocks, x).float()
                loss = F.cross_entropy(logits, y) * w
                opt.zero_grad()
                loss.backward()
                opt.step()

            return run

        bare = getattr(model, "module", model)
        if ctx.rank == 0:  # rank 0 alone, the other trainer waiting in the barrier
            # beside the earlier floor: the same batches with their CSRs kept, as it has them
            kept_csr: list[float] | None = [] if floor_steps else None
            lone, lone_cpu, lone1 = ef.timed_compute(
                trained, rebuild, compute(bare), passes=FLOOR_PASSES, again=again,
                reused=kept_csr,
            )  # fmt: skip
            if kept_csr:
                fl["floor_csr_kept_epoch_s"] = per_epoch(sum(kept_csr))
            fl.update(floor_epoch_s=per_epoch(sum(lone)), floor_step_s=statistics.median(lone),
                      floor_epoch_cpu_s=per_epoch(sum(lone_cpu)),
                      floor_pass1_epoch_s=per_epoch(sum(lone1)))  # fmt: skip
        barrier(ctx)
        # every trainer at once, a barrier before each batch: per step the slower rank
        # (a DDP step waits for it), what the machine's cores give compute together
        both, both_cpu, _ = ef.timed_compute(
            trained, rebuild, compute(bare), lambda: barrier(ctx), passes=FLOOR_PASSES,
            again=again,
        )  # fmt: skip
        ranks_both = gather_floats(ctx, both)
        slower = [max(v) for v in zip(*ranks_both, strict=True)]
        fl.update(floor_all_epoch_s=per_epoch(sum(slower)),
                  floor_all_r0_epoch_s=per_epoch(sum(ranks_both[0])),
                  floor_all_epoch_cpu_s=per_epoch(sum(both_cpu)))  # fmt: skip
        barrier(ctx)
        if floor_ddp and ctx.joined:  # through DDP: its hooks, bucket copies, all-reduce
            ddp_t, _, _ = ef.timed_compute(
                trained, rebuild, compute(model), lambda: barrier(ctx), passes=FLOOR_PASSES,
                again=again,
            )  # fmt: skip
            fl["floor_ddp_epoch_s"] = per_epoch(sum(ddp_t))
            barrier(ctx)
    # the earlier floor: extra batches after the timed steps (rank 0 alone, then all at once)
    floor_x = compute_floor(model, opt, cfg, kept)[0] if ctx.rank == 0 and kept else None
    barrier(ctx)
    floor_all, floor_all_cpu = compute_floor(model, opt, cfg, kept) if kept else (None, None)
    barrier(ctx)
    tg.close()
    shutdown(ctx)
    if ctx.rank == 0:
        med = {k: statistics.median(v) for k, v in parts.items()}
        print(
            json.dumps(
                {
                    "step_s": statistics.median(times),
                    "step_times": times,
                    "steps_per_epoch": steps_per_epoch,
                    "timed_steps": len(times),
                    "epoch_times": epoch_times,
                    "input_nodes": statistics.median(n_inputs),
                    "allreduce": statistics.median(ar[2:]),
                    "threads": threads,
                    "trainer_cpu": cpu,
                    "prefetch": use_prefetch,
                    "deferred_allreduce": sync is not None,
                    "pulled_bytes": pulled,
                    "io_by_rank": [dict(zip(IO_FIELDS, v, strict=True)) for v in io_ranks],
                    "make_by_rank": [make_parts(v) for v in make_ranks],
                    "account": account_json(acct, everyone, phases, times),
                    **({"cache": cache_stats} if cache_stats else {}),
                    "timelines": timelines,
                    "gc": gc_epochs,
                    "step_split": step_split,
                    "floor_batches": len(trained),
                    **fl,
                    **({"floor_x_step_s": floor_x} if floor_x is not None else {}),
                    **({"floor_x_all_step_s": floor_all} if floor_all is not None else {}),
                    **({"floor_x_all_cpu_s": floor_all_cpu} if floor_all_cpu is not None else {}),
                    **med,
                }
            )
        )


FLOOR_PASSES = 2
"""Each floor batch's compute is timed this many times (its blocks decoded afresh each
time), the least counted: a floor, so a pass slowed by other work is not."""
ENV_SERVER_PIDS = "DISTGNN_BENCH_SERVER_PIDS"
"""The servers' process IDs, given to the trainers so rank 0 accounts for their CPU."""
TRAINER_FIELDS = (
    "cpu_s", "runq_s", "sys_s", "faults", "main_cpu_s", "main_runq_s", "main_blocked_s",
)  # fmt: skip

PHASE_FIELDS = ("wall_s", "cpu_s", "runq_s", "sys_s", "faults")


IO_FIELDS = (
    "requests", "pull_requests", "rows_pulled", "bytes_pulled",
    "local_rows", "local_bytes", "local_sample_requests", "local_seeds",
)  # fmt: skip
"""A trainer's reads (:func:`io_counters`), each rank's over the timed window."""


def io_counters(tg: Any) -> list[float]:
    """This trainer's reads so far (:data:`IO_FIELDS`): requests to the servers (sampling
    and pulls), the rows and bytes pulled over TCP, the rows and bytes read from a
    co-located server's shared memory, the sampling requests answered in-process."""
    c, loc, smp = tg.client_stats(), tg.local_stats(), tg.local_sample_stats()
    return [
        float(v)
        for v in (
            c.requests if c else 0, c.pull_requests if c else 0,
            c.rows_pulled if c else 0, c.bytes_pulled if c else 0,
            loc.rows if loc else 0, loc.bytes if loc else 0,
            smp.requests if smp else 0, smp.seeds if smp else 0,
        )
    ]  # fmt: skip


MAKE_FIELDS = ("wall_s", "cpu_s", "runq_s", "sys_s", "faults")
"""A timed step's sampling and pull, each summed over the timed steps: wall, the main
thread's CPU, its wait for a core, its kernel time and minor page faults."""


def make_parts(vals: list[float]) -> dict[str, dict[str, float]]:
    """One rank's gathered ``make_acct`` as ``{"sampling": {...}, "pull": {...}}``."""
    k = len(MAKE_FIELDS)
    return {
        part: dict(zip(MAKE_FIELDS, vals[k * i : k * (i + 1)], strict=True))
        for i, part in enumerate(("sampling", "pull"))
    }


def make_lines(runs: list[dict[str, Any]], indent: str = "  ") -> list[str]:
    """Each rank's sampling and pull per timed step (ms): wall = CPU + waiting for a core
    + blocked (on the servers, a lock), medians over ``runs`` (bench results)."""
    runs = [r for r in runs if r.get("make_by_rank")]
    if not runs:
        return []
    out = []
    for rank in range(len(runs[0]["make_by_rank"])):
        cells = []
        for part in ("sampling", "pull"):

            def med(key: str, part: str = part, rank: int = rank) -> float:
                return statistics.median(
                    r["make_by_rank"][rank][part][key] / max(1, r["timed_steps"]) for r in runs
                )

            blocked = statistics.median(
                max(0.0, m["wall_s"] - m["cpu_s"] - m["runq_s"]) / max(1, r["timed_steps"])
                for r in runs
                for m in [r["make_by_rank"][rank][part]]
            )
            cells.append(
                f"{part} {1e3 * med('wall_s'):.1f} = CPU {1e3 * med('cpu_s'):.1f} (kernel "
                f"{1e3 * med('sys_s'):.1f}, {med('faults'):.0f} faults) + waiting for a core "
                f"{1e3 * med('runq_s'):.1f} + blocked {1e3 * blocked:.1f}"
            )
        out.append(f"{indent}rank {rank} per step (ms): " + "; ".join(cells))
    return out


def io_lines(runs: list[dict[str, Any]], indent: str = "  ") -> list[str]:
    """Each rank's reads per timed step, medians over ``runs`` (bench results)."""
    runs = [r for r in runs if r.get("io_by_rank")]
    if not runs:
        return []
    out = []
    for rank in range(len(runs[0]["io_by_rank"])):

        def med(key: str, scale: float = 1.0, rank: int = rank) -> float:
            return statistics.median(
                r["io_by_rank"][rank][key] / max(1, r["timed_steps"]) / scale for r in runs
            )

        out.append(
            f"{indent}rank {rank} per step: pulled over TCP {med('bytes_pulled', 1e6):.1f} MB "
            f"({med('rows_pulled', 1e3):.1f}k rows, {med('pull_requests'):.1f} pull requests); "
            f"requests to the servers {med('requests'):.1f}; read from shared memory "
            f"{med('local_bytes', 1e6):.1f} MB ({med('local_rows', 1e3):.1f}k rows); "
            f"sampled in-process {med('local_sample_requests'):.1f} requests "
            f"({med('local_seeds', 1e3):.1f}k seeds)"
        )
    return out


def gather_floats(ctx: Any, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` (the same length everywhere), in rank order."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    if not ctx.joined:
        return [values]
    out = [torch.zeros_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def account_json(
    acct: Any, everyone: list[list[float]], phases: tuple[str, ...], step_times: list[float]
) -> dict[str, Any]:
    """The timed window's machine account (``cpu_account.Account``) with every rank's
    process and main-thread figures (as :func:`child_train` gathers them)."""
    n, k = len(TRAINER_FIELDS), len(PHASE_FIELDS)
    trainers = []
    for vals in everyone:
        t: dict[str, Any] = dict(zip(TRAINER_FIELDS, vals[:n], strict=True))
        t["phases"] = {
            ph: dict(zip(PHASE_FIELDS, vals[n + k * i : n + k * (i + 1)], strict=True))
            for i, ph in enumerate(phases)
        }
        trainers.append(t)
    servers = acct.groups.get("servers")
    return {
        "wall_s": acct.wall_s,
        "cores": acct.cores,
        "steps": len(step_times),
        "machine_busy_s": acct.machine_busy_s,
        "machine_idle_s": acct.machine_idle_s,
        "steal_s": acct.steal_s,
        "servers_cpu_s": servers.cpu_s if servers else float("nan"),
        "servers_runq_s": servers.runq_s if servers else float("nan"),
        "servers_sys_s": servers.sys_s if servers else float("nan"),
        "median_step_s": statistics.median(step_times) if step_times else float("nan"),
        "trainers": trainers,
    }


def account_figures(acc: dict[str, Any]) -> dict[str, float]:
    """Per-step seconds of the timed window's account: the machine's core-seconds by
    owner (every trainer, the servers with their workers, other processes, idle) and
    each rank's main thread off its core (waiting for a core; blocked, by phase)."""
    n = max(1, acc["steps"])
    trainers = acc["trainers"]
    t_cpu = sum(t["cpu_s"] for t in trainers)
    out = {
        "wall": acc["wall_s"] / n,
        "capacity": acc["cores"] * acc["wall_s"] / n,
        "trainers_cpu": t_cpu / n,
        "servers_cpu": acc["servers_cpu_s"] / n,
        "other_cpu": max(0.0, acc["machine_busy_s"] - t_cpu - acc["servers_cpu_s"]) / n,
        "idle": acc["machine_idle_s"] / n,
        "steal": acc["steal_s"] / n,
        "servers_sys": acc["servers_sys_s"] / n,
        "slow_steps": acc["wall_s"] / n - acc["median_step_s"],
        "cores": acc["cores"],
    }
    for r, t in enumerate(trainers):
        out[f"r{r}_cpu"] = t["cpu_s"] / n
        out[f"r{r}_sys"] = t["sys_s"] / n
        out[f"r{r}_other_threads"] = max(0.0, t["cpu_s"] - t["main_cpu_s"]) / n
        out[f"r{r}_faults"] = t["faults"] / n / 1e3  # ms() prints x 1e3: faults per step
        out[f"r{r}_runq"] = t["main_runq_s"] / n
        out[f"r{r}_blocked"] = t["main_blocked_s"] / n
        in_steps = 0.0
        for ph, v in t["phases"].items():
            b = max(0.0, v["wall_s"] - v["cpu_s"] - v["runq_s"])
            out[f"r{r}_blocked_{ph}"] = b / n
            out[f"r{r}_sys_{ph}"] = v["sys_s"] / n
            out[f"r{r}_faults_{ph}"] = v["faults"] / n / 1e3
            in_steps += b
        out[f"r{r}_blocked_outside"] = max(0.0, t["main_blocked_s"] - in_steps) / n
    return out


def account_lines(figs: list[dict[str, float]]) -> list[str]:
    """The accounting as text: medians (ms per step) over runs' :func:`account_figures`."""

    def ms(key: str) -> str:
        vals = [f[key] for f in figs if key in f]
        return f"{1e3 * statistics.median(vals):.0f}" if vals else "-"

    ranks = sorted({int(k[1 : k.index("_")]) for k in figs[0] if k.startswith("r")})
    lines = [
        f"  machine per step (ms of core time): {ms('capacity')} = "
        f"{figs[0]['cores']:.0f} cores x {ms('wall')}: "
        f"trainers {ms('trainers_cpu')} ("
        + " + ".join(ms(f"r{r}_cpu") for r in ranks)
        + f"), servers {ms('servers_cpu')}, other processes {ms('other_cpu')}, "
        f"idle {ms('idle')}, steal {ms('steal')}; window / steps - median step "
        f"{ms('slow_steps')}"
    ]
    for r in ranks:
        lines.append(
            f"  rank {r} per step: CPU {ms(f'r{r}_cpu')} ms (threads but the main one "
            f"{ms(f'r{r}_other_threads')}, kernel {ms(f'r{r}_sys')}, "
            f"{ms(f'r{r}_faults')} page faults); main thread off-core (ms): waiting for a core "
            f"{ms(f'r{r}_runq')}, blocked {ms(f'r{r}_blocked')} "
            f"(batch {ms(f'r{r}_blocked_batch')}, "
            f"forward {ms(f'r{r}_blocked_forward')}, backward (+ DDP's all-reduce) "
            f"{ms(f'r{r}_blocked_backward')}, deferred all-reduce + next batch "
            f"{ms(f'r{r}_blocked_sync')}, optimizer {ms(f'r{r}_blocked_optimizer')}, "
            f"between steps {ms(f'r{r}_blocked_outside')})"
        )
        lines.append(
            f"  rank {r} main thread's kernel time (ms) / page faults per step: "
            + ", ".join(
                f"{ph} {ms(f'r{r}_sys_{ph}')} / {ms(f'r{r}_faults_{ph}')}"
                for ph in ("batch", "forward", "backward", "sync", "optimizer")
            )
        )
    return lines


def compute_floor(
    model: Any, opt: Any, cfg: Any, batches: list[tuple[Any, Any, Any]], ddp: bool = False
) -> tuple[float, float]:
    """Median seconds of forward + backward + optimizer step over ``batches`` and the
    median thread CPU of one: on the module inside DDP, so no all-reduce runs (rank 0
    alone, or every rank at once), or with ``ddp`` through DDP itself (every rank at
    once: its hooks, bucket copies and the all-reduce's wait for the other ranks)."""
    from torch.nn import functional as F

    from distgnn.train.loop import autocast

    module = model if ddp else getattr(model, "module", model)
    times, cpus = [], []
    for rep in range(2):
        for x, y, blocks in batches:
            t0, c0 = time.perf_counter(), time.thread_time()
            with autocast(cfg, x.device):
                logits = module(blocks, x).float()
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rep == 1:
                times.append(time.perf_counter() - t0)
                cpus.append(time.thread_time() - c0)
    return statistics.median(times), statistics.median(cpus)


def bench_epoch(
    env: dict[str, str],
    trainers: int,
    extra: list[str],
    samplers: int,
    server_pids: list[int],
    stores: list[str] | None = None,
) -> dict[str, Any]:
    """One training run; ``stores`` (each server's shared-memory folder): co-located
    trainers, rank r beside partition ``r // (trainers / parts)`` (``trainers.colocate``)."""
    cpu0 = _tree_cpu(server_pids)
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
            OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // trainers)),
            LOCAL_WORLD_SIZE=str(trainers),
            **{ENV_SERVER_PIDS: ",".join(str(p) for p in server_pids)},
        )
        if stores:
            part = r // max(1, trainers // len(stores)) % len(stores)
            penv["DISTGNN_LOCAL_PARTITION"] = str(part)
            penv["DISTGNN_LOCAL_STORE"] = stores[part]
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--child-train", *extra],
            env=penv, stdout=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    server_cpu = _tree_cpu(server_pids) - cpu0
    if any(p.returncode for p in procs):
        raise SystemExit(f"trainer failed: {[p.returncode for p in procs]}")
    res: dict[str, Any] = json.loads(outs[0].strip().splitlines()[-1])
    res["server_cpu"] = server_cpu
    return res


def _tree_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by ``pids`` and their descendants."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=0, help="timed steps per trainer (0: full epochs)")
    ap.add_argument("--epochs", type=int, default=3, help="full epochs timed (--steps 0)")
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--num-samplers", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed steps before the timed ones (epoch 0's; -1: all of "
                    "epoch 0, as compare_dgl.py warms DGL up)")  # fmt: skip
    ap.add_argument("--prefetch", default="auto", choices=["auto", "on", "off"],
                    help="feature-prefetch thread (auto: the trainers' rule, on with a CPU beyond "
                    "the torch threads)")  # fmt: skip
    ap.add_argument("--no-prefetch", action="store_true", help="same as --prefetch off")
    ap.add_argument("--reps", type=int, default=15, help="sampling repetitions")
    ap.add_argument("--method", default="metis", choices=["metis", "random"])
    ap.add_argument("--precision", default="32", choices=["32", "bf16-mixed"])
    ap.add_argument("--no-floor", action="store_true",
                    help="no compute floor (by default: the timed steps' own batches made "
                    "again after them, their forward + backward + step timed, rank 0 alone "
                    "and every trainer at once)")  # fmt: skip
    ap.add_argument("--floor-ddp", action="store_true",
                    help="also the floor through DDP (every trainer at once)")  # fmt: skip
    ap.add_argument("--floor-steps", type=int, default=0,
                    help="the earlier floor, beside it: that many extra batches after the "
                    "timed steps, re-run (0: off)")  # fmt: skip
    ap.add_argument(
        "--colocate",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="compare the topologies: ROUNDS alternating runs with trainers over "
        "TCP and co-located (local rows from the servers' shared memory)",
    )
    ap.add_argument(
        "--modes",
        default="tcp,colocated",
        help=f"--colocate: the topologies compared, in order (of {', '.join(TOPOLOGIES)}; "
        "the ratio is the last over the first)",
    )
    ap.add_argument("--cache-mb", type=float, default=64,
                    help="--modes ...-cache: feature cache per trainer (MB)")  # fmt: skip
    ap.add_argument("--defer-allreduce", default="auto", choices=["auto", "on", "off"],
                    help="the trainers' DISTGNN_DEFER_ALLREDUCE (distgnn.train.gradsync: the "
                    "next batch made while the gradients' all-reduce waits; auto: on without "
                    "a prefetch thread)")  # fmt: skip
    ap.add_argument("--child-train", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_train:
        from distgnn.train.proc import use_prefetch

        threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
        auto = a.prefetch == "auto" and not a.no_prefetch
        pf = use_prefetch(threads) if auto else a.prefetch == "on" and not a.no_prefetch
        child_train(a.steps, a.epochs, pf, a.precision, a.floor_steps, not a.no_floor,
                    a.floor_ddp, a.warmup)  # fmt: skip
        # the product trainers' exit (distgnn.train.finish): a native teardown race after
        # the results are printed must not turn a finished run into a failure
        from distgnn.train.finish import end_process

        end_process(0)
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from servers import running_servers

    os.environ["DISTGNN_DEFER_ALLREDUCE"] = a.defer_allreduce  # the trainers inherit it

    extra = ["--steps", str(a.steps), "--epochs", str(a.epochs)]
    if a.no_prefetch:
        a.prefetch = "off"
    extra += ["--prefetch", a.prefetch]
    extra += ["--precision", a.precision, "--floor-steps", str(a.floor_steps)]
    extra += ["--warmup", str(a.warmup)]
    extra += ["--no-floor"] if a.no_floor else []
    extra += ["--floor-ddp"] if a.floor_ddp else []
    manifest = ensure_parts(ensure_graph(a.nodes), a.nodes, a.method)
    if a.colocate:
        compare_topologies(manifest, a, extra)
        return
    senv = server_env(a.trainers)
    with running_servers(manifest, 2, workers=1, env=senv, timeout=600) as srv:
        env = srv.env()
        samp = bench_sampling(env, a.reps)
        ep = bench_epoch(env, a.trainers, extra, a.num_samplers, [p.pid for p in srv.procs])
    if ep["epoch_times"]:
        epoch_s = statistics.median(ep["epoch_times"])
        how = f"full epochs, median of {len(ep['epoch_times'])}"
        label = "GraphSAGE epoch (s, measured)"
    else:
        epoch_s = ep["step_s"] * ep["steps_per_epoch"]
        how = f"EXTRAPOLATED: median step of {a.steps} x steps per epoch"
        label = "GraphSAGE epoch (s, extrapolated)"
    acct = ep["account"]  # the servers' CPU in the timed window (not the floors' remaking)
    server_cpu_step = acct["servers_cpu_s"] / max(1, acct["steps"])
    print(
        f"bench_training: {a.nodes} nodes, 2 partitions/servers, {a.trainers} trainers "
        f"({ep['threads']} torch thread(s) each), num_samplers={a.num_samplers}, "
        f"prefetch={'on' if ep['prefetch'] else 'off'} ({a.prefetch}), deferred all-reduce "
        f"{'on' if ep['deferred_allreduce'] else 'off'} ({a.defer_allreduce}), "
        f"precision {a.precision}, "
        f"server gather threads {senv.get('DISTGNN_GATHER_THREADS') or 'from the environment'}; "
        f"epoch: {how}"
    )
    if ep["epoch_times"]:
        print("epoch times (s): " + ", ".join(f"{t:.1f}" for t in ep["epoch_times"]))
    hidden = " (prefetch thread, overlapped)" if ep["prefetch"] else ""
    print(f"{'metric':<44} {'distgnn':>12}")
    rows = [
        (label, f"{epoch_s:.1f}", "", "", ""),
        ("  step (s) / steps per epoch", f"{ep['step_s']:.3f}/{ep['steps_per_epoch']:.0f}",
         "", "", ""),
        ("  per step, rank 0 medians (s):", "", "", "", ""),
        ("    waiting for the next batch (+ deferred all-reduce)", f"{ep['wait']:.3f}",
         "", "", ""),
        ("    sampling 3 hops" + hidden, f"{ep['sample']:.3f}", "", "", ""),
        ("    feature pull" + hidden, f"{ep['fetch']:.3f}", "", "", ""),
        ("    forward", f"{ep['forward']:.3f}", "", "", ""),
        ("    backward (incl. DDP's all-reduce if not deferred)", f"{ep['backward']:.3f}",
         "", "", ""),
        ("    all-reduce of the gradients alone", f"{ep['allreduce']:.3f}", "", "", ""),
        ("    optimizer", f"{ep['optimizer']:.3f}", "", "", ""),
        ("  input nodes per batch", f"{ep['input_nodes']:.0f}", "", "", ""),
        ("  CPU s per step: trainer (rank 0)", f"{ep['trainer_cpu']:.3f}", "", "", ""),
        ("  CPU s per step: both servers", f"{server_cpu_step:.3f}", "", "", ""),
    ]  # fmt: skip
    for key, what in FLOORS:
        if key in ep:
            rows.append((f"{what} (s)", f"{ep[key]:.2f}", "", "", ""))
            rows.append(("  epoch / that floor", f"{epoch_s / ep[key]:.3f}x", "", "", ""))
    if "floor_x_step_s" in ep:
        fx = ep["floor_x_step_s"] * ep["steps_per_epoch"]
        rows.append((f"earlier floor ({a.floor_steps} extra batches) (s)", f"{fx:.2f}", "", "", ""))
    for batch, v in samp:
        rows.append((f"one-hop sampling, batch {batch} (seeds/s)", f"{v / 1e3:.0f}k", "", "", ""))
    for r in rows:
        print(f"{r[0]:<44} {r[1]:>12}")
    print("the timed epochs' timelines (epoch_floor.timeline, ms), medians:")
    for line in ef_lines(ep["timelines"]):
        print(line)
    print("each rank's batch making and reads in the timed steps:")
    for line in make_lines([ep]) + io_lines([ep]):
        print(line)
    print("timed window's account (cpu_account: /proc, all processes):")
    for line in account_lines([account_figures(ep["account"])]):
        print(line)


FLOORS = (
    ("floor_epoch_s", "floor: the epoch's batches, rank 0 alone"),
    ("floor_all_epoch_s", "floor: every trainer at once, slower rank per step"),
    ("floor_all_r0_epoch_s", "floor: every trainer at once, rank 0's"),
    ("floor_ddp_epoch_s", "floor: through DDP, every trainer at once"),
)
"""The compute floors :func:`child_train` reports (seconds per epoch, the timed steps'
own batches; with ``--steps``, extrapolated to an epoch as the epoch is)."""

TOPOLOGIES = {
    "tcp": "TCP",
    "colocated": "co-located",
    "colocated-tcp-sampling": "co-loc., TCP sampling",
    "tcp-cache": "TCP + cache",
    "colocated-cache": "co-located + cache",
}
"""``--modes``: trainers over TCP; co-located (local rows and local seeds sampled from
the servers' shared memory); co-located with sampling over TCP
(``DISTGNN_LOCAL_SAMPLING=0``: what co-location did before local sampling); ``-cache``:
with a feature cache of ``--cache-mb`` per trainer (``DISTGNN_FEATURE_CACHE_MB``)."""


def compare_topologies(manifest: str, a: argparse.Namespace, extra: list[str]) -> None:
    """``--colocate ROUNDS``: the same training work in each of ``--modes``, runs
    alternating (so all see the same machine load); medians over the rounds."""
    from servers import running_servers

    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in TOPOLOGIES]
    if bad or len(modes) < 2:
        raise SystemExit(f"--modes: two or more of {', '.join(TOPOLOGIES)} (got {a.modes!r})")
    got: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    senv = server_env(a.trainers)
    with running_servers(manifest, 2, workers=1, env=senv, timeout=600) as srv:
        stores = [r["shm_dir"] for r in srv.ready]
        pids = [p.pid for p in srv.procs]
        for _ in range(a.colocate):
            for topo, runs in got.items():
                st = None if topo.startswith("tcp") else stores
                env = dict(srv.env())
                if topo == "colocated-tcp-sampling":
                    env["DISTGNN_LOCAL_SAMPLING"] = "0"
                if topo.endswith("-cache"):
                    env["DISTGNN_FEATURE_CACHE_MB"] = str(a.cache_mb)
                runs.append(bench_epoch(env, a.trainers, extra, a.num_samplers, pids, st))

    def warm_steps(r: dict[str, Any]) -> int:
        """The run's untimed warm-up steps (``--warmup -1``: a whole epoch)."""
        return int(r["steps_per_epoch"]) if a.warmup < 0 else a.warmup

    def vals(topo: str, key: str) -> list[float]:
        out = []
        for r in got[topo]:
            if key.startswith("epoch_floor"):  # the epoch (as measured or extrapolated) / a floor
                fkey = key.removeprefix("epoch_")
                if fkey not in r:
                    return []
                ep = statistics.median(r["epoch_times"]) if r["epoch_times"] else (
                    r["step_s"] * r["steps_per_epoch"])  # fmt: skip
                out.append(ep / r[fkey])
            elif key == "server_cpu":  # in the timed window
                out.append(r["account"]["servers_cpu_s"] / max(1, r["account"]["steps"]))
            elif key == "pulled_mb":  # warm-up and timed steps
                n = (a.steps or r["steps_per_epoch"] * a.epochs) + warm_steps(r)
                out.append(r["pulled_bytes"] / n / 1e6)
            elif key.startswith("cache_"):
                c = r.get("cache", {})
                n = (a.steps or r["steps_per_epoch"] * a.epochs) + warm_steps(r)
                if key == "cache_hit":
                    out.append(c.get("hits", 0) / max(1, c.get("hits", 0) + c.get("misses", 0)))
                elif key == "cache_saved_mb":
                    out.append(c.get("bytes_saved", 0) / n / 1e6)
                else:
                    out.append(c.get("bytes", 0) / 1e6)
            elif key not in r:
                return []
            else:
                out.append(r[key])
        return out

    print(
        f"bench_training --colocate: {a.nodes} nodes, 2 partitions, {a.trainers} trainers, "
        f"{a.colocate} alternating round(s) per topology, deferred all-reduce "
        f"{a.defer_allreduce}, medians (rank 0) [min-max]"
    )
    first, last = modes[0], modes[-1]
    head = "".join(f" {TOPOLOGIES[m]:>24}" for m in modes)
    print(f"{'metric':<34}{head} {'ratio':>7}")
    for label, key in (
        ("step (s)", "step_s"),
        ("feature pull per step (s)", "fetch"),
        ("sampling per step (s)", "sample"),
        ("waiting for batch + deferred AR (s)", "wait"),
        ("CPU s per step: trainer (rank 0)", "trainer_cpu"),
        ("CPU s per step: both servers", "server_cpu"),
        ("MB pulled over TCP per step", "pulled_mb"),
        ("cache hit rate (cached tensors)", "cache_hit"),
        ("MB not pulled (hits) per step", "cache_saved_mb"),
        ("cache memory (MB)", "cache_mem"),
        ("floor per epoch, rank 0 alone (s)", "floor_epoch_s"),
        ("floor per epoch, all at once (s)", "floor_all_epoch_s"),
        ("  its CPU, rank 0 (s)", "floor_all_epoch_cpu_s"),
        ("floor per epoch, through DDP (s)", "floor_ddp_epoch_s"),
        ("earlier floor step (extra batches)", "floor_x_step_s"),
        ("epoch / floor (rank 0 alone)", "epoch_floor_epoch_s"),
        ("epoch / floor (all at once)", "epoch_floor_all_epoch_s"),
    ):
        if not vals(first, key):
            continue
        cells = []
        for m in modes:
            cells.append(median_range(vals(m, key), ".3f"))
        m0, m1 = statistics.median(vals(first, key)), statistics.median(vals(last, key))
        ratio = m1 / m0 if m0 else float("nan")
        print(f"{label:<34}" + "".join(f" {c:>24}" for c in cells) + f" {ratio:>6.2f}x")
    print(f"ratio: {TOPOLOGIES[last]} / {TOPOLOGIES[first]}")
    for m in modes:  # whole epochs (a cache's warm-up reads fall in the first)
        eps = ["/".join(f"{x:.2f}" for x in r.get("epoch_times", [])) for r in got[m]]
        if any(eps):
            print(f"epoch times (s), each run: {TOPOLOGIES[m]}: {', '.join(eps)}")
    print("the timed epochs' timelines (epoch_floor.timeline, ms), medians:")
    for m in modes:
        print(f" {TOPOLOGIES[m]}:")
        for line in ef_lines([t for r in got[m] for t in r["timelines"]]):
            print(line)
    print("each rank's batch making and reads in the timed steps, medians:")
    for m in modes:
        print(f" {TOPOLOGIES[m]}:")
        for line in make_lines(got[m]) + io_lines(got[m]):
            print(line)
    print("timed window's account (cpu_account: /proc, all processes), medians:")
    for m in modes:
        print(f" {TOPOLOGIES[m]}:")
        for line in account_lines([account_figures(r["account"]) for r in got[m]]):
            print(line)


if __name__ == "__main__":
    main()
