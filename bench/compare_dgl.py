"""DistGNN and DGL 2.1 side by side on exactly the same work (one command; not part of CI).

Run: ``python bench/compare_dgl.py [--nodes 1000000] [--graphs generator,flat] [--rounds 3]
[--train-nodes 50000] [--epochs 1] [--warmup-steps -1] [--parts-only [--num-parts K] |
--train-only] [--quick] [--cache-mb MB] [--systems distgnn,distgnn_tcp_cache,...]``.

* **DGL's environment** is created once and cached in ``.tools/dgl-venv`` (DGL 2.1.0 and
  the torch it supports, 2.2.1, with NumPy 1.x; about 5 GB, from the package registry).
  ``bench/dgl_side.py`` runs there; it imports nothing from DistGNN.
* **The same graph**: ``distgnn generate``'s graph (``generator``: nested communities)
  and the flat-community model (``flat``: ``--group-sizes '' --locality 0.8``), both
  1M nodes / 12M edges / 100 float32 features, cached in ``/tmp/distgnn-bench``. Each gets
  one training set of exactly ``--train-nodes`` nodes (a seeded subset of the generator's
  ``train_mask``), written beside the shared arrays, so both systems balance, split and
  train on the same nodes: ``--train-nodes 50000`` is 25 steps per trainer (batch 1000, 2
  trainers).
* **Partitioning** (METIS, 2 parts, or ``--num-parts K`` with ``--parts-only``: one part
  per machine, as users partition; training nodes and edges balanced): wall time, peak
  RSS of the partitioning process, edge cut (the fraction of input edges whose ends fall
  in different partitions, computed here the same way from both assignments).
* **Training**: 2 servers + 2 DDP trainers, 3-layer GraphSAGE (mean) hidden 256, fanouts
  15,10,5, batch 1000, Adam 0.003, dropout 0.5, 1 torch thread per trainer, ``--epochs``
  timed epochs after a warm-up of one epoch on both sides (``--warmup-steps N``: DistGNN
  warms up N steps instead, 2 until round 12; DGL's script always runs one epoch), which
  also grows each trainer's heap to its size before the timed epoch (its first touches cost
  a trainer ~3-6 ms a step, bench/HISTORY.md round 13); each system on its own partitions
  of the same graph.
  DistGNN runs twice: every row over TCP (its default topology), and co-located
  (``trainers.colocate``: the local partition's rows from the server's shared memory, which
  is what DGL's trainers always do with their machine's server). With ``--cache-mb MB``
  also a third time, over TCP with a feature cache of MB per trainer
  (``trainers.featureCacheMB``), reported in a table of its own: DGL has no such cache
  (the same graph, training set and settings; the cache's 8 warm-up reads and its first
  fill fall in the warm-up epoch, in the first timed epoch with ``--warmup-steps 2``).
  ``--systems`` runs only some of the training runs.
  DGL runs twice: as shipped, and with the same glibc allocator settings DistGNN's trainers
  apply (``distgnn.train.proc``: ``M_MMAP_THRESHOLD``/``M_TRIM_THRESHOLD`` 1 GiB, top pad
  256 MiB, given to DGL as ``MALLOC_*_`` tunables). DGL's distributed mode needs one private
  ``/dev/shm`` per emulated machine (a mount namespace per server and its trainer, through
  ``unshare``: root needed) and its machine ID forced, since every machine is 127.0.0.1.
* **The floor** (issue 17's): forward + backward + optimizer step of the same sampled
  batches each DistGNN run's timed epoch trained on, all of them (``bench/epoch_floor.py``:
  made again after the epoch from their epoch and index, checked against the epoch's
  input nodes, features read untimed, only the compute timed), 1 thread: on rank 0 alone
  (no DDP, servers and the other trainer idle), and every trainer at once (a barrier before
  each batch; per step the slower rank's, as a DDP step waits for it); summed over the
  epoch. ``--floor-steps N`` also measures the earlier floor (N extra batches after the
  epoch, median x steps). DGL's epochs are divided by the median of the DistGNN runs'
  floors; each DistGNN run by its own.
* **The timeline** of each DistGNN epoch (``epoch_floor.timeline``): start to the first
  batch, step 0, the median and the last step, the last step's end to the epoch's end,
  the ranks' imbalance.
* **Micro**: remote feature pulls (10k random IDs of the other partition, 100-dim float32)
  in GB/s, and one-hop ``sample_neighbors`` (10k random seeds, fanout 10) in seeds/s, from
  rank 0 of each system after its epochs.

Rounds are interleaved A/B (the order alternates each round). Every figure is printed per
round, then the medians, the ratio DistGNN / DGL and the spread (min-max over rounds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from epoch_floor import timeline_lines
from summary import value_range

REPO = Path(__file__).resolve().parents[1]
ALL_SYSTEMS = ("distgnn", "distgnn_tcp_cache", "distgnn_colocated", "dgl", "dgl_tuned")
"""Training runs: DistGNN over TCP, over TCP with ``--cache-mb``, co-located; DGL as
shipped and with DistGNN's allocator settings."""
BENCH = REPO / "bench"
CACHE = Path("/tmp/distgnn-bench")
DGL_ENV = REPO / ".tools" / "dgl-venv"
DGL_PINS = [
    "torch==2.2.1", "dgl==2.1.0", "torchdata==0.7.1", "numpy==1.26.4", "pandas==2.2.3",
    "scipy==1.13.1", "pydantic", "pyyaml", "psutil",
]  # fmt: skip
# the glibc settings distgnn.train.proc applies with mallopt, as environment tunables
TUNED_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(256 << 20),
}
TIMEOUT_S = 3600


def log(msg: str) -> None:
    print(f"[compare_dgl {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- environment and data
def ensure_dgl_env(path: Path) -> Path:
    """The cached DGL environment (created on first use); its python."""
    py = path / "bin" / "python"
    if (path / ".complete").exists():
        return py
    log(f"creating DGL's environment in {path} (once; about 5 GB) ...")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *DGL_PINS], check=True)
    subprocess.run([str(py), "-c", "import dgl.distributed"], check=True)
    (path / ".complete").touch()
    return py


def ensure_graph(kind: str, nodes: int, train_nodes: int) -> Path:
    """The benchmark graph ``kind`` with a training set of exactly ``train_nodes`` nodes."""
    import numpy as np

    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    base = CACHE / (f"gen2-{nodes}" if kind == "generator" else f"flat-{nodes}")
    if not (base / ".complete").exists():
        log(f"generating {base} ...")
        opts = (
            GenerateOptions(nodes=nodes)
            if kind == "generator"
            else GenerateOptions(nodes=nodes, group_sizes=(), locality=(0.8,))
        )
        write_graph_dir(generate_graph(opts), str(base))
        (base / ".complete").touch()
    out = CACHE / f"cmp-{kind}-{nodes}-t{train_nodes}"
    if not (out / ".complete").exists():
        out.mkdir(parents=True, exist_ok=True)
        for key in ("src", "dst", "feat", "label"):
            link = out / f"{key}.npy"
            if not link.exists():
                link.symlink_to(base / f"{key}.npy")
        full = np.load(base / "train_mask.npy")
        cand = np.flatnonzero(full)
        if train_nodes > cand.shape[0]:
            raise SystemExit(f"--train-nodes {train_nodes} > {cand.shape[0]} training nodes")
        pick = np.random.default_rng(0).permutation(cand)[:train_nodes]
        mask = np.zeros_like(full)
        mask[pick] = True
        np.save(out / "train_mask.npy", mask)
        (out / ".complete").touch()
    return out


def edge_cut(graph: Path, assignment: Any) -> float:
    import numpy as np

    src = np.load(graph / "src.npy", mmap_mode="r")
    dst = np.load(graph / "dst.npy", mmap_mode="r")
    cut = 0
    for i in range(0, src.shape[0], 1 << 22):
        cut += int(np.count_nonzero(assignment[src[i : i + (1 << 22)]]
                                    != assignment[dst[i : i + (1 << 22)]]))  # fmt: skip
    return cut / src.shape[0]


# ---------------------------------------------------------------- partitioning
def child_partition(graph: str, out: str, num_parts: int) -> None:
    """DistGNN's partitioning in this process; one JSON line (time, peak RSS, assignment)."""
    import resource

    import numpy as np

    from distgnn.partition.loader import load_partition
    from distgnn.partition.partitioner import partition_graph

    t0 = time.perf_counter()
    # the same work as dgl_side.py: training nodes and in-edges balanced (DGL:
    # balance_ntypes=train_mask, balance_edges=True); --balance-train is also the CLI default
    partition_graph(graph, num_parts, out, "bench", method="metis", balance_train=True,
                    balance_edges=True, progress=False)  # fmt: skip
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    manifest = f"{out}/bench.json"
    n = int(np.load(f"{graph}/label.npy", mmap_mode="r").shape[0])
    assign = np.full(n, -1, dtype=np.int32)
    for p in range(num_parts):
        assign[load_partition(manifest, p).orig_nid] = p
    np.save(f"{out}/assignment.npy", assign)
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": peak,
                      "assignment": f"{out}/assignment.npy"}))  # fmt: skip


def last_json(stdout: str) -> dict[str, Any]:
    """The last JSON object line of a child's output (DGL also prints to stdout)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            res: dict[str, Any] = json.loads(line)
            return res
    raise SystemExit(f"no result line in the output: {stdout[-500:]!r}")


def run_json(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    p = subprocess.run(
        cmd, check=False, env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT_S
    )
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return last_json(p.stdout)


def partition_round(
    system: str, graph: Path, dgl_py: Path, work: Path, num_parts: int = 2
) -> dict[str, Any]:
    import numpy as np

    out = work / f"parts-{system}"
    shutil.rmtree(out, ignore_errors=True)
    if system == "distgnn":
        cmd = [sys.executable, __file__, "--child-partition", str(graph), str(out),
               str(num_parts)]  # fmt: skip
    else:
        cmd = [str(dgl_py), str(BENCH / "dgl_side.py"), "partition", str(graph), str(out),
               "--parts", str(num_parts)]  # fmt: skip
    res = run_json(cmd)
    res["edge_cut"] = edge_cut(graph, np.load(res["assignment"]))
    res["parts"] = str(out)
    return res


# ---------------------------------------------------------------- training
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def distgnn_epoch(
    parts: Path,
    epochs: int,
    floor_steps: int,
    colocate: bool = False,
    cache_mb: float = 0,
    warmup: int = -1,
) -> dict[str, Any]:
    """DistGNN: 2 real servers, 2 trainers (bench_training's trainer), then the micro figures.
    ``colocate``: each trainer reads its partition's rows from its server's shared memory
    (``trainers.colocate``), as DGL's trainers do with their machine's server.
    ``cache_mb``: each trainer keeps a feature cache of that many MB
    (``trainers.featureCacheMB``; DGL has none). ``warmup``: untimed steps first (-1: a
    whole epoch, as DGL's)."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    sys.path.insert(0, str(BENCH))
    from servers import running_servers

    import bench_training

    manifest = str(parts / "bench.json")
    extra = ["--steps", "0", "--epochs", str(epochs), "--floor-steps", str(floor_steps),
             "--warmup", str(warmup)]  # fmt: skip
    senv = bench_training.server_env(2)  # the row gather as `distgnn run` sets it
    with running_servers(manifest, 2, workers=1, env=senv, timeout=600) as srv:
        stores = [r["shm_dir"] for r in srv.ready] if colocate else None
        pids = [p.pid for p in srv.procs]
        env = dict(srv.env())
        if cache_mb:
            env["DISTGNN_FEATURE_CACHE_MB"] = str(cache_mb)
        res = bench_training.bench_epoch(env, 2, extra, 0, pids, stores)
        res.update(distgnn_micro(srv.env()))
    return res


def distgnn_micro(env: dict[str, str], reps: int = 15) -> dict[str, float]:
    import numpy as np

    from distgnn.distributed.context import initialize
    from distgnn.distributed.graph import DistGraph
    from distgnn.distributed.sampling import sample_neighbors

    g = DistGraph(ctx=initialize(env=env), own=True)
    try:
        rng = np.random.default_rng(0)
        remote = g.get_partition_book().partid2nids(1)
        feat = g.ndata["feat"]
        row_bytes = int(feat.shape[1]) * 4
        pulls, samples = [], []
        for r in range(reps + 2):
            ids = rng.choice(remote, 10_000, replace=False)
            t0 = time.perf_counter()
            feat[ids]
            if r >= 2:
                pulls.append(10_000 * row_bytes / (time.perf_counter() - t0))
            seeds = rng.choice(g.num_nodes(), 10_000, replace=False)
            t0 = time.perf_counter()
            sample_neighbors(g, seeds, 10)
            if r >= 2:
                samples.append(10_000 / (time.perf_counter() - t0))
    finally:
        g.close()
    return {
        "remote_pull_bytes_per_s": statistics.median(pulls),
        "sampling_seeds_per_s": statistics.median(samples),
    }


def dgl_epoch(parts: Path, dgl_py: Path, epochs: int, tuned: bool, work: Path) -> dict[str, Any]:
    """DGL: per emulated machine, a mount namespace with a private /dev/shm holding its
    server and its trainer (DGL maps the local partition from the server's shared memory)."""
    ip_config = work / "ip_config.txt"
    ports = [_free_port(), _free_port()]
    ip_config.write_text("".join(f"127.0.0.1 {p}\n" for p in ports))
    master = _free_port()
    script = str(BENCH / "dgl_side.py")
    common = ["--ip-config", str(ip_config), "--part-config", str(parts / "bench.json"),
              "--epochs", str(epochs), "--threads", "1", "--clients", "2"]  # fmt: skip
    procs = []
    for m in range(2):
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(master), RANK=str(m), WORLD_SIZE="2",
                   PYTHONPATH="", DGLBACKEND="pytorch")  # fmt: skip
        if tuned:
            env.update(TUNED_MALLOC)
        micro = ["--micro-reps", "15"] if m == 0 else []
        server = " ".join([str(dgl_py), script, "server", "--machine", str(m), *common])
        trainer = " ".join([str(dgl_py), script, "trainer", "--machine", str(m), *common, *micro])
        shell = (f"mount -t tmpfs -o size=16g tmpfs /dev/shm && ({server} 1>&2 &) && "
                 f"exec {trainer}")  # fmt: skip
        procs.append(subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
            env=env, stdout=subprocess.PIPE, text=True,
        ))  # fmt: skip
    outs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"DGL trainers failed: {[p.returncode for p in procs]}")
    return last_json(outs[0])


# ---------------------------------------------------------------- report
def report(title: str, rows: list[tuple[str, str, list[float], list[float], float, str]]) -> None:
    """rows: (metric, unit, distgnn values, dgl values, scale, fmt)."""
    print(f"\n{title}")
    print("| metric | DistGNN (median, range) | DGL 2.1 (median, range) | DistGNN / DGL |")
    print("|---|---:|---:|---:|")
    for metric, unit, a, b, scale, fmt in rows:
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {metric} ({unit}) | {ma * scale:{fmt}} ({value_range(a, fmt, scale)}) | "
              f"{mb * scale:{fmt}} ({value_range(b, fmt, scale)}) | {ma / mb:.2f} |")  # fmt: skip


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="compare-dgl-", dir=CACHE))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def compare_graph(kind: str, a: argparse.Namespace, dgl_py: Path) -> None:
    graph = ensure_graph(kind, a.nodes, a.train_nodes)
    log(f"graph {kind}: {graph}")
    with workdir() as work:
        part: dict[str, list[dict[str, Any]]] = {"distgnn": [], "dgl": []}
        for r in range(a.rounds if not a.train_only else 1):
            order = ["distgnn", "dgl"] if r % 2 == 0 else ["dgl", "distgnn"]
            for system in order:
                log(f"{kind} round {r + 1}: partitioning with {system}")
                res = partition_round(system, graph, dgl_py, work / f"r{r}", a.num_parts)
                part[system].append(res)
                print(f"round {r + 1} {system:8s} partition: {res['seconds']:.2f} s, "
                      f"peak RSS {res['peak_rss_bytes'] / 2**30:.2f} GiB, "
                      f"edge cut {res['edge_cut']:.4f}", flush=True)  # fmt: skip
        if not a.train_only:
            title = (f"Partitioning, graph '{kind}' ({a.nodes} nodes), {a.num_parts} parts, "
                     f"{a.rounds} rounds")  # fmt: skip
            report(title, [
                ("time", "s", [x["seconds"] for x in part["distgnn"]],
                 [x["seconds"] for x in part["dgl"]], 1.0, ".2f"),
                ("peak RSS", "GiB", [x["peak_rss_bytes"] for x in part["distgnn"]],
                 [x["peak_rss_bytes"] for x in part["dgl"]], 2.0**-30, ".2f"),
                ("edge cut", "fraction", [x["edge_cut"] for x in part["distgnn"]],
                 [x["edge_cut"] for x in part["dgl"]], 1.0, ".4f"),
            ])  # fmt: skip
        if a.parts_only:
            return
        dparts = Path(part["distgnn"][0]["parts"])
        gparts = Path(part["dgl"][0]["parts"])
        systems = ["distgnn", "distgnn_colocated", "dgl", "dgl_tuned"]
        if a.cache_mb:
            systems.insert(1, "distgnn_tcp_cache")
        if a.systems:
            systems = [x for x in systems if x in a.systems.split(",")]
        runs: dict[str, list[dict[str, Any]]] = {x: [] for x in ALL_SYSTEMS}
        for r in range(a.rounds):
            order = list(systems)
            order = order if r % 2 == 0 else order[::-1]
            for system in order:
                log(f"{kind} round {r + 1}: training with {system}")
                if system.startswith("distgnn"):
                    colocated = system == "distgnn_colocated"
                    cache = a.cache_mb if system == "distgnn_tcp_cache" else 0
                    res = distgnn_epoch(dparts, a.epochs, a.floor_steps, colocated, cache,
                                        a.warmup_steps)  # fmt: skip
                else:
                    res = dgl_epoch(gparts, dgl_py, a.epochs, system == "dgl_tuned", work)
                runs[system].append(res)
                ep = statistics.median(res["epoch_times"])
                print(f"round {r + 1} {system:17s} epoch {ep:.2f} s "
                      f"({res['steps_per_epoch']} steps/trainer)"
                      + (f", floor {res['floor_epoch_s']:.2f} s (all at once "
                         f"{res['floor_all_epoch_s']:.2f} s)" if "floor_epoch_s" in res else "")
                      + (f", earlier floor {res['floor_x_step_s'] * res['steps_per_epoch']:.2f} s"
                         if "floor_x_step_s" in res else ""), flush=True)  # fmt: skip
    d, g, t = runs["distgnn"], runs["dgl"], runs["dgl_tuned"]
    c, k = runs["distgnn_colocated"], runs["distgnn_tcp_cache"]

    def ep(rs: list[dict[str, Any]]) -> list[float]:
        return [statistics.median(x["epoch_times"]) for x in rs]

    steps = {x["steps_per_epoch"] for x in d + c + k + g + t}
    title = (f"Training, graph '{kind}': {sorted(steps)} steps per trainer per epoch, "
             f"{a.rounds} rounds x {a.epochs} epoch(s)")  # fmt: skip
    report(title + " - DGL as shipped", [
        ("epoch", "s", ep(d), ep(g), 1.0, ".2f"),
        ("remote pull, 10k x 100 float32", "GB/s", [x["remote_pull_bytes_per_s"] for x in d],
         [x["remote_pull_bytes_per_s"] for x in g], 1e-9, ".2f"),
        ("one-hop sampling, 10k seeds, fanout 10", "k seeds/s",
         [x["sampling_seeds_per_s"] for x in d], [x["sampling_seeds_per_s"] for x in g],
         1e-3, ".0f"),
    ])  # fmt: skip
    report(title + " - DGL with DistGNN's allocator settings", [
        ("epoch", "s", ep(d), ep(t), 1.0, ".2f"),
        ("  sampling per step", "s", [x["sample"] for x in d],
         [x["sample"] for x in t], 1.0, ".3f"),
        ("  feature pull per step", "s", [x["fetch"] for x in d],
         [x["fetch"] for x in t], 1.0, ".3f"),
        ("  compute per step (fwd+bwd+step)", "s",
         [x["forward"] + x["backward"] + x["optimizer"] for x in d],
         [x["compute"] for x in t], 1.0, ".3f"),
    ])  # fmt: skip
    report(title + " - DistGNN co-located (local rows from shared memory, as DGL) vs DGL "
           "with DistGNN's allocator settings", [
        ("epoch", "s", ep(c), ep(t), 1.0, ".2f"),
        ("  feature pull per step", "s", [x["fetch"] for x in c], [x["fetch"] for x in t],
         1.0, ".3f"),
        ("  compute per step (fwd+bwd+step)", "s",
         [x["forward"] + x["backward"] + x["optimizer"] for x in c],
         [x["compute"] for x in t], 1.0, ".3f"),
    ])  # fmt: skip
    if k:
        report(title + f" - DistGNN over TCP with a feature cache of {a.cache_mb:g} MB per "
               "trainer (trainers.featureCacheMB; DGL has no such cache: the same graph, "
               "training set and settings) vs DGL with DistGNN's allocator settings", [
            ("epoch", "s", ep(k), ep(t), 1.0, ".2f"),
            ("  feature pull per step", "s", [x["fetch"] for x in k], [x["fetch"] for x in t],
             1.0, ".3f"),
            ("  compute per step (fwd+bwd+step)", "s",
             [x["forward"] + x["backward"] + x["optimizer"] for x in k],
             [x["compute"] for x in t], 1.0, ".3f"),
        ])  # fmt: skip
    named = [("DistGNN", d), ("TCP + cache", k), ("co-located", c), ("DGL as shipped", g),
             ("DGL tuned", t)]  # fmt: skip
    print_floors(named, d + c + k, ep)
    for n, rs in named[:3]:
        tls = [t for x in rs for t in x.get("timelines", [])]
        if tls:
            print(f"\n{n}: where the epoch went (epoch_floor.timeline, medians over rounds, ms)")
            for line in timeline_lines(tls):
                print(line)
            gcs = [sum(g[1] for g in ep_gc) for x in rs for ep_gc in x.get("gc", [])]
            if gcs:
                print(f"  rank 0's garbage collections in the epoch: {1e3 * max(gcs):.1f} ms at "
                      "most (gc.callbacks)")  # fmt: skip


FLOORS = (
    ("floor_epoch_s", "rank 0 alone"),
    ("floor_all_epoch_s", "both trainers at once (slower rank per step)"),
)


def print_floors(
    named: list[tuple[str, list[dict[str, Any]]]],
    distgnn_runs: list[dict[str, Any]],
    ep: Any,
) -> None:
    """The floors (the epochs' own batches; each DistGNN run's own) and epoch / floor: a
    DistGNN system's per run against its run's floor, DGL's against the median floor."""
    for key, what in FLOORS:
        fl = [x[key] for x in distgnn_runs if key in x]
        if not fl:
            continue
        med = statistics.median(fl)
        spread = (max(fl) - min(fl)) / med
        cells = []
        for n, rs in named:
            if not rs or (n == "DGL as shipped" and key != "floor_epoch_s"):
                continue
            if n.startswith("DGL"):
                cells.append(f"{n} {statistics.median(ep(rs)) / med:.2f}x")
            else:
                own = [e / x[key] for e, x in zip(ep(rs), rs, strict=True) if key in x]
                cells.append(f"{n} {statistics.median(own):.3f}x ({value_range(own, '.3f')})")
        print(f"\nfloor, the epoch's own batches, {what}, 1 thread: {med:.2f} s "
              f"({value_range(fl)}, spread {100 * spread:.1f} %, {len(fl)} runs); "
              f"epoch / floor: " + ", ".join(cells))  # fmt: skip
    kept = [x["floor_csr_kept_epoch_s"] for x in distgnn_runs if "floor_csr_kept_epoch_s" in x]
    if kept:
        med = statistics.median(kept)
        print(
            f"the epoch's batches re-run with their blocks' CSRs kept (as the earlier floor "
            f"re-ran its batches), rank 0 alone, one pass: {med:.2f} s ({value_range(kept)})"
        )
    p1 = [x["floor_pass1_epoch_s"] for x in distgnn_runs if "floor_pass1_epoch_s" in x]
    if p1:
        med = statistics.median(p1)
        print(
            f"floor, rank 0 alone, the first pass only (not the lesser of two): {med:.2f} s "
            f"({value_range(p1)}, spread {100 * (max(p1) - min(p1)) / med:.1f} %)"
        )
    fx = [x["floor_x_step_s"] * x["steps_per_epoch"] for x in distgnn_runs if "floor_x_step_s" in x]
    if fx:
        med = statistics.median(fx)
        print(f"earlier floor ({len(fx)} runs: extra batches after the epoch, rank 0 alone, "
              f"median x steps): {med:.2f} s ({value_range(fx)}, spread "
              f"{100 * (max(fx) - min(fx)) / med:.1f} %)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000, help="graph size (default 1M)")
    ap.add_argument("--graphs", default="generator,flat", help="generator and/or flat")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved A/B rounds")
    ap.add_argument("--train-nodes", type=int, default=50_000,
                    help="training set size (50000: 25 steps per trainer)")  # fmt: skip
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per training run")
    ap.add_argument("--warmup-steps", type=int, default=-1,
                    help="DistGNN's untimed steps before the timed epochs (-1, the default: "
                    "a whole epoch, as DGL's script; 2 until round 12)")  # fmt: skip
    ap.add_argument("--floor-steps", type=int, default=0,
                    help="also the earlier floor: N extra batches after the epoch")  # fmt: skip
    ap.add_argument("--parts-only", action="store_true", help="partitioning only")
    ap.add_argument("--num-parts", type=int, default=2,
                    help="METIS parts (default 2; other counts with --parts-only: training "
                    "runs 2 machines)")  # fmt: skip
    ap.add_argument("--train-only", action="store_true", help="one partitioning, then training")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 100k nodes, 5k training nodes, 1 round")  # fmt: skip
    ap.add_argument("--dgl-env", default=str(DGL_ENV), help="DGL's cached environment")
    ap.add_argument(
        "--cache-mb",
        type=float,
        default=0,
        help="also DistGNN over TCP with a feature cache of this many MB per "
        "trainer (its own table; DGL has no such cache)",
    )
    ap.add_argument(
        "--systems",
        default="",
        help=f"only these training runs (comma-separated, of {','.join(ALL_SYSTEMS)})",
    )
    ap.add_argument("--child-partition", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_partition:
        graph, out, parts = a.child_partition
        child_partition(graph, out, int(parts))
        return
    if a.num_parts < 2:
        raise SystemExit("--num-parts: at least 2")
    if a.num_parts != 2 and not a.parts_only:
        raise SystemExit("--num-parts: only with --parts-only (training runs 2 machines)")
    if a.quick:
        a.nodes, a.train_nodes, a.rounds = 100_000, 5_000, 1
    if os.geteuid() != 0 and not a.parts_only:
        raise SystemExit("DGL's emulated machines need mount namespaces: run as root")
    CACHE.mkdir(parents=True, exist_ok=True)
    dgl_py = ensure_dgl_env(Path(a.dgl_env))
    print(f"compare_dgl: {a.nodes} nodes, graphs {a.graphs}, {a.num_parts} parts, "
          f"{a.rounds} interleaved rounds, "
          f"{a.train_nodes} training nodes, {os.cpu_count()} CPUs", flush=True)  # fmt: skip
    for kind in a.graphs.split(","):
        compare_graph(kind.strip(), a, dgl_py)


if __name__ == "__main__":
    main()
