"""Partitioning benchmark: 1M nodes, ~12M edges, 100 float32 features, 4 METIS parts.

Run: ``python bench/bench_partition.py [--runs 3] [--nodes 1000000] [--num-parts 4]``
(plain pymetis, the baseline, is given the same number of parts). The graph is
generated once and cached under /tmp. Each run is a fresh subprocess so its peak RSS
(``ru_maxrss``) is its own. Prints a table with medians next to the issue's DGL 2.1
figures, which were measured on another graph: not a same-work ratio (that is
``compare_dgl.py``'s).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

DGL = {"time_s": 16.6, "peak_gib": 3.7, "pymetis_s": 5.6}
CACHE = "/tmp/distgnn-bench"


class _Steps(logging.Handler):
    """Collects ``step`` log records: name -> (seconds, time the step finished)."""

    def __init__(self, t0: float) -> None:
        super().__init__(logging.INFO)
        self.t0 = t0
        self.done: dict[str, tuple[float, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        f = getattr(record, "fields", {})
        if "seconds" in f and "step" in f:
            self.done[str(f["step"])] = (float(f["seconds"]), time.perf_counter() - self.t0)


def _child(mode: str, graph: str, out: str, num_parts: int) -> None:
    import numpy as np

    from distgnn.graph.io import load_graph
    from distgnn.log import step

    t0 = time.perf_counter()
    steps = _Steps(t0)
    lg = logging.getLogger("distgnn.partition")
    lg.setLevel(logging.INFO)
    lg.propagate = False
    lg.addHandler(steps)
    if mode == "pymetis":  # the plain library call, as a user of pymetis would make it
        import pymetis

        from distgnn.partition.assign import symmetric_csr

        g = load_graph(graph)
        with step("symmetrise", lg):
            xadj, adjncy = symmetric_csr(g.src, g.dst, g.num_nodes)
        with step("metis", lg):
            res = pymetis.part_graph(
                num_parts, pymetis.CSRAdjacency(xadj, adjncy), options=pymetis.Options(seed=0)
            )
        parts = np.asarray(res.vertex_part)
        cut = float(np.mean(parts[g.src] != parts[g.dst]))
    else:
        from distgnn.partition.partitioner import partition_graph

        cut = partition_graph(graph, num_parts, out, "bench", progress=False).edge_cut
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    d = steps.done
    res = {"time_s": dt, "peak_bytes": peak, "edge_cut": cut}
    for key, name in [
        ("read_s", "read graph"),
        ("fingerprint_s", "fingerprint"),
        ("sample_s", "sample edges"),
        ("symmetrise_s", "symmetrise"),
        ("metis_s", "metis"),
        ("refine_s", "refine"),
        ("relabel_s", "relabel"),
    ]:
        res[key] = d.get(name, (0.0, 0.0))[0]
    if "relabel" in d:  # local CSC + feature gather + hashing + writing, after relabel
        res["write_s"] = dt - d["relabel"][1]
    print(json.dumps(res))


def _run(mode: str, graph: str, out: str, num_parts: int) -> dict[str, float]:
    env = dict(os.environ, DISTGNN_LOG_LEVEL="WARNING")
    res = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--graph",
            graph,
            "--out",
            out,
            "--num-parts",
            str(num_parts),
        ],
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
    ap.add_argument("--num-parts", type=int, default=4)
    ap.add_argument("--child", choices=["partition", "pymetis"])
    ap.add_argument("--graph")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.graph, a.out, a.num_parts)
        return
    from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir

    graph = f"{CACHE}/gen2-{a.nodes}"
    if not os.path.exists(f"{graph}/.complete"):
        print(f"generating {graph} ...", file=sys.stderr)
        write_graph_dir(generate_graph(GenerateOptions(nodes=a.nodes)), graph)
        open(f"{graph}/.complete", "w").close()
    out = f"{CACHE}/parts"
    runs = []
    for _ in range(a.runs):
        shutil.rmtree(out, ignore_errors=True)
        runs.append(_run("partition", graph, out, a.num_parts))
    base = _run("pymetis", graph, out, a.num_parts)

    def med(key: str, rs: list[dict[str, float]] = runs) -> float:
        return statistics.median(r.get(key, 0.0) for r in rs)

    t = med("time_s")
    peak = med("peak_bytes") / 2**30
    cut = med("edge_cut")
    # the machine may be loaded: scale by the METIS call measured in this same run
    scale = DGL["pymetis_s"] / base["metis_s"] if base.get("metis_s") else float("nan")
    rows = [
        ("read graph (s)", f"{med('read_s'):.2f}", "", ""),
        ("fingerprint (s, overlapped)", f"{med('fingerprint_s'):.2f}", "", ""),
        ("sample edges (s)", f"{med('sample_s'):.2f}", "", ""),
        ("build METIS input (s)", f"{med('symmetrise_s'):.2f}", "", ""),
        ("METIS call (s)", f"{med('metis_s'):.2f}", f"{base['metis_s']:.2f} (pymetis)", ""),
        ("refine on all edges (s)", f"{med('refine_s'):.2f}", "", ""),
        ("relabel (s)", f"{med('relabel_s'):.2f}", "", ""),
        ("local CSC + write (s)", f"{med('write_s'):.2f}", "", ""),
        ("partition time (s)", f"{t:.2f}", f"{base['time_s']:.2f} (pymetis)", ""),
        (
            "time, raw (s)",
            f"{t:.2f}",
            f"{DGL['time_s']:.1f} (DGL, issue)",
            f"{t / DGL['time_s']:.0%}",
        ),
        (
            "time, DGL-scaled (s)",
            f"{t * scale:.2f}",
            f"{DGL['time_s']:.1f} (DGL, issue)",
            f"{t * scale / DGL['time_s']:.0%}",
        ),
        (
            "peak RSS (GiB)",
            f"{peak:.2f}",
            f"{DGL['peak_gib']:.1f} (DGL, issue)",
            f"{peak / DGL['peak_gib']:.0%}",
        ),
        ("pymetis peak (GiB)", f"{base['peak_bytes'] / 2**30:.2f}", "", ""),
        (
            "edge cut",
            f"{cut:.4f}",
            f"{base['edge_cut']:.4f} (pymetis)",
            f"{cut / base['edge_cut'] - 1:+.1%}",
        ),
    ]
    print(
        f"bench_partition: {a.nodes} nodes, {a.num_parts} parts, metis, median of {a.runs} run(s)"
    )
    print(
        f"pymetis alone (load + METIS input + METIS): {base['time_s']:.2f} s; "
        f"DGL-scaled = x {scale:.2f} (DGL's METIS step {DGL['pymetis_s']} s / "
        f"this run's METIS call {base['metis_s']:.2f} s)"
    )
    print(f"{'metric':<28} {'distgnn':>10} {'reference':>20} {'ratio':>8}")
    for name, ours, ref, ratio in rows:
        print(f"{name:<28} {ours:>10} {ref:>20} {ratio:>8}")


if __name__ == "__main__":
    main()
