"""Partitioning benchmark: 1M nodes, ~12M edges, 100 float32 features, 4 METIS parts.

Run: ``python bench/bench_partition.py [--runs 3] [--nodes 1000000]``. The graph is
generated once and cached under /tmp. Each run is a fresh subprocess so its peak RSS
(``ru_maxrss``) is its own. Prints a table with medians next to DGL 2.1's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

DGL = {"time_s": 16.6, "peak_gib": 3.7, "pymetis_s": 5.6}
CACHE = "/tmp/distgnn-bench"


def _child(mode: str, graph: str, out: str) -> None:
    import numpy as np

    from distgnn.graph.io import load_graph

    t0 = time.perf_counter()
    if mode == "pymetis":
        from distgnn.partition.assign import metis_assign

        g = load_graph(graph)
        parts = metis_assign(g.src, g.dst, g.num_nodes, 4)
        cut = float(np.mean(parts[g.src] != parts[g.dst]))
    else:
        from distgnn.partition.partitioner import partition_graph

        cut = partition_graph(graph, 4, out, "bench", progress=False).edge_cut
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"time_s": dt, "peak_bytes": peak, "edge_cut": cut}))


def _run(mode: str, graph: str, out: str) -> dict[str, float]:
    env = dict(os.environ, DISTGNN_LOG_LEVEL="WARNING")
    res = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--graph", graph, "--out", out],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=1800,
    )
    out_obj: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out_obj


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--child", choices=["partition", "pymetis"])
    ap.add_argument("--graph")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.graph, a.out)
        return
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    graph = f"{CACHE}/gen-{a.nodes}"
    if not os.path.exists(f"{graph}/.complete"):
        print(f"generating {graph} ...", file=sys.stderr)
        write_graph_dir(generate_graph(GenerateOptions(nodes=a.nodes)), graph)
        open(f"{graph}/.complete", "w").close()
    out = f"{CACHE}/parts"
    runs = []
    for _ in range(a.runs):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(_run("partition", graph, out))
    base = _run("pymetis", graph, out)
    t = statistics.median(r["time_s"] for r in runs)
    peak = statistics.median(r["peak_bytes"] for r in runs) / 2**30
    cut = statistics.median(r["edge_cut"] for r in runs)
    rows = [
        ("partition time (s)", f"{t:.2f}", f"{DGL['time_s']:.1f}", f"{t / DGL['time_s']:.0%}"),
        (
            "peak RSS (GiB)",
            f"{peak:.2f}",
            f"{DGL['peak_gib']:.1f}",
            f"{peak / DGL['peak_gib']:.0%}",
        ),
        (
            "edge cut",
            f"{cut:.4f}",
            f"{base['edge_cut']:.4f} (pymetis)",
            f"{cut / base['edge_cut'] - 1:+.1%}",
        ),
        ("pymetis alone (s)", f"{base['time_s']:.2f}", f"{DGL['pymetis_s']:.1f}", ""),
    ]
    print(f"bench_partition: {a.nodes} nodes, 4 parts, metis, median of {a.runs} run(s)")
    print(f"{'metric':<20} {'distgnn':>10} {'reference':>20} {'ratio':>8}")
    for name, ours, ref, ratio in rows:
        print(f"{name:<20} {ours:>10} {ref:>20} {ratio:>8}")


if __name__ == "__main__":
    main()
