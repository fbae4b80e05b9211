"""Graph-server benchmark: feature-pull bandwidth vs raw loopback TCP, memory, sampling.

    python bench/bench_server.py [--nodes 150000] [--dims 128,512,1024] [--batch 10000] [--reps 15]
        [--pull-only]

1. A generated graph (random edges, float32 features of each dimension) is partitioned
   into ONE partition and served by one ``distgnn serve`` (1 worker) on 127.0.0.1.
2. Pull: ``DistTensor[ids]`` of ``--batch`` random node IDs, payload GB/s (median), vs a
   plain socket sender/receiver in another process moving the same message sizes into a
   fresh buffer each time (as a pull must return a new tensor). Rounds of back-to-back
   pulls and back-to-back raw requests alternate, so both are steady-state figures under
   the same machine load; the ratio is the median over rounds. A third sender first
   gathers the answer's bytes from random rows of a table of the same size (the work a
   server does for a pull of rows narrower than 4 KiB), so pull / (raw + gather) is
   what the protocol and the Python around it cost.
3. Memory: the sum of PSS (psutil ``memory_full_info``) over the server's processes,
   after every worker touched every row, vs the partition's file size, for 1 and 4 workers.
4. One-hop ``sample_neighbors`` throughput (seeds/s, fanout 10), standalone and via server.

With ``--colocate`` only one table: the same pulls by a plain TCP client and by a
co-located one (``trainers.colocate``: rows gathered from the server's shared memory).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil


def make_partition(out: Path, nodes: int, dims: list[int], avg_deg: int) -> str:
    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph

    rng = np.random.default_rng(0)
    e = nodes * avg_deg
    arrays = {
        "src": rng.integers(0, nodes, e, dtype=np.int64),
        "dst": rng.integers(0, nodes, e, dtype=np.int64),
    }
    for d in dims:
        arrays[f"feat{d}"] = rng.random((nodes, d), dtype=np.float32)
    g = graph_from_arrays(arrays, "generated")
    partition_graph(g, 1, str(out), "gen", method="random", progress=False)
    return str(out / "gen.json")


class Server:
    """One ``distgnn serve`` subprocess on a free loopback port."""

    def __init__(self, manifest: str, workers: int, tmp: Path) -> None:
        self.token = secrets.token_hex(8)
        tok = tmp / f"tok-{workers}"
        tok.write_text(self.token)
        ready = tmp / f"ready-{workers}.json"
        ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "distgnn.cli", "--log-level", "WARNING", "serve",
             "--manifest", manifest, "--part-id", "0", "--bind", "127.0.0.1", "--port", "0",
             "--health-port", "0", "--workers", str(workers), "--token-file", str(tok),
             "--ready-file", str(ready)],
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("server failed to start")
            time.sleep(0.05)
        self.info = json.loads(ready.read_text())
        self.addr = ("127.0.0.1", int(self.info["port"]))

    def pss(self) -> int:
        procs = [psutil.Process(self.info["pid"])] + [
            psutil.Process(p) for p in self.info["workers"]
        ]
        return sum(p.memory_full_info().pss for p in procs)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def _raw_sender(port_q: mp.Queue, nbytes: int, reps: int, req: int, width: int, nodes: int) -> None:
    """A plain socket server: for each ``req``-byte request, send ``nbytes`` back; with
    ``width`` (floats per row), those bytes are random rows of a ``nodes``-row table,
    gathered and sent as a server answers a pull of rows narrower than 4 KiB: by
    ``BLOCK_BYTES`` blocks, each gathered by the process's row gatherer (its threads)."""
    from distgnn.rpc.gather import default_gatherer
    from distgnn.rpc.protocol import BLOCK_BYTES

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port_q.put(ls.getsockname()[1])
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = np.ones(nbytes, dtype=np.uint8)
    table = rows = None
    if width:
        n = nbytes // (4 * width)
        table = np.ones((nodes, width), np.float32)
        rows = np.random.default_rng(3).integers(0, nodes, (reps, n))
    rbuf = bytearray(req)
    conn.settimeout(600)
    for r in range(reps):
        view, got = memoryview(rbuf), 0
        while got < req:
            n = conn.recv_into(view[got:])
            if n == 0:  # the client is gone (it stopped early): do not spin
                conn.close()
                ls.close()
                return
            got += n
        if table is not None and rows is not None:  # as the server: its gather, by block
            gatherer = default_gatherer()
            step = max(1, BLOCK_BYTES // (4 * width))
            buf = np.empty((min(step, rows.shape[1]), width), np.float32)
            for i in range(0, rows.shape[1], step):
                blk = rows[r, i : i + step]
                conn.sendall(gatherer.gather(table, blk, buf[: len(blk)]).data.cast("B"))
            continue
        conn.sendall(payload)
    conn.close()
    ls.close()


class RawPeer:
    """Client side of the plain-socket baseline (same request and answer sizes)."""

    def __init__(self, nbytes: int, reps: int, req: int, width: int = 0, nodes: int = 0) -> None:
        ctx = mp.get_context("spawn")
        self.q: mp.Queue = ctx.Queue()
        self.p = ctx.Process(target=_raw_sender, args=(self.q, nbytes, reps, req, width, nodes))
        self.p.start()
        self.s = socket.create_connection(("127.0.0.1", self.q.get(timeout=120)), timeout=60)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.nbytes, self.ask = nbytes, b"x" * req

    def request(self) -> float:
        buf = np.empty(self.nbytes, dtype=np.uint8)  # a fresh buffer, like a pull's output
        view = memoryview(buf)
        t0 = time.perf_counter()
        self.s.sendall(self.ask)
        got = 0
        while got < self.nbytes:
            got += self.s.recv_into(view[got:], self.nbytes - got)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.s.close()
        self.p.join(60)
        self.q.close()
        self.q.join_thread()


def bench_pull(
    srv: Server, dim: int, batch: int, reps: int, nodes: int, run: int = 5
) -> tuple[float, float, float, float, float]:
    """(pull GB/s, raw GB/s, median per-round pull/raw, raw + gather GB/s, median
    per-round pull / (raw + gather)).

    Each round times ``run`` back-to-back pulls, then ``run`` back-to-back raw requests,
    then ``run`` raw requests whose sender gathers random rows first (the first of each
    run is a warm-up), so all are measured in a loader's steady state and under the same
    machine load. A lone request after an idle gap also pays the VM's vCPU wake-ups,
    which say nothing about bandwidth (2-core VM: a 5 MB pull took 1.84 ms back-to-back,
    2.08 ms after a 1.3 ms idle gap, 3.30 ms after 5 ms).
    """
    import torch

    from distgnn.distributed import DistGraph, initialize

    rng = np.random.default_rng(1)
    nbytes = batch * dim * 4
    raw = RawPeer(nbytes, reps * (run + 1), batch * 8)
    rawg = RawPeer(nbytes, reps * (run + 1), batch * 8, dim, nodes)
    pulls, raws, rawgs, ratios, gratios = [], [], [], [], []
    try:
        with initialize(servers=[srv.addr], token=srv.token) as ctx:
            t = DistGraph(ctx=ctx).ndata[f"feat{dim}"]
            for _ in range(reps):
                idss = [torch.from_numpy(rng.integers(0, nodes, batch)) for _ in range(run + 1)]
                pt = []
                for ids in idss:
                    t0 = time.perf_counter()
                    out = t[ids]
                    pt.append(time.perf_counter() - t0)
                rt = [raw.request() for _ in range(run + 1)]
                gt = [rawg.request() for _ in range(run + 1)]
                p, r, g = (statistics.median(x[1:]) for x in (pt, rt, gt))
                pulls.append(p)
                raws.append(r)
                rawgs.append(g)
                ratios.append(r / p)
                gratios.append(g / p)
            assert out.shape == (batch, dim)
    finally:
        raw.close()
        rawg.close()
    gbs = [nbytes / statistics.median(x) / 1e9 for x in (pulls, raws, rawgs)]
    return gbs[0], gbs[1], statistics.median(ratios), gbs[2], statistics.median(gratios)


def touch_all(srv: Server, dims: list[int], nodes: int, workers: int) -> None:
    """Pull every row through connections spread over every worker."""
    from distgnn.rpc.client import Connection
    from distgnn.rpc.protocol import MsgType

    seen: set[int] = set()
    conns = []
    for _ in range(50 * workers):
        c = Connection(*srv.addr, srv.token)
        c.connect()
        conns.append(c)
        if c.server_info["pid"] not in seen:
            seen.add(c.server_info["pid"])
            for d in dims:
                for lo in range(0, nodes, 20000):
                    ids = np.arange(lo, min(nodes, lo + 20000))
                    c.request(MsgType.PULL, {"name": f"node/_N/feat{d}"}, [ids])
        if len(seen) == workers:
            break
    for c in conns:
        c.close()


def bench_sampling(manifest: str, srv: Server, nodes: int, reps: int) -> list[tuple[str, float]]:
    from distgnn.distributed import DistGraph, initialize, sample_neighbors

    rng = np.random.default_rng(2)
    out = []
    for mode in ("standalone", "1 server"):
        ctx = (
            initialize(manifest=manifest)
            if mode == "standalone"
            else initialize(servers=[srv.addr], token=srv.token)
        )
        with ctx:
            g = DistGraph(ctx=ctx)
            times = []
            for _ in range(reps):
                seeds = rng.integers(0, nodes, 100_000)
                t0 = time.perf_counter()
                sample_neighbors(g, seeds, 10)
                times.append(time.perf_counter() - t0)
        out.append((mode, 100_000 / statistics.median(times)))
    return out


def bench_colocated(
    srv: Server, dim: int, batch: int, reps: int, nodes: int, run: int = 5
) -> tuple[float, float, float]:
    """(TCP pull GB/s, co-located pull GB/s, median per-round speed-up): the same random
    IDs pulled by a plain client and by a co-located one (``trainers.colocate``: rows
    read from the server's shared memory), rounds alternating as in :func:`bench_pull`."""
    import torch

    from distgnn.distributed import DistGraph, initialize

    rng = np.random.default_rng(2)
    env = {"DISTGNN_LOCAL_PARTITION": "0", "DISTGNN_LOCAL_STORE": srv.info["shm_dir"]}
    tcps, locs, ups = [], [], []
    with (
        initialize(servers=[srv.addr], token=srv.token) as tcp,
        initialize(servers=[srv.addr], token=srv.token, env=env) as co,
    ):
        assert co.local_reader is not None, "co-located reader not set up"
        tt = DistGraph(ctx=tcp).ndata[f"feat{dim}"]
        tc = DistGraph(ctx=co).ndata[f"feat{dim}"]
        for _ in range(reps):
            idss = [torch.from_numpy(rng.integers(0, nodes, batch)) for _ in range(run + 1)]
            times = []
            for t in (tt, tc):
                ts = []
                for ids in idss:
                    t0 = time.perf_counter()
                    t[ids]
                    ts.append(time.perf_counter() - t0)
                times.append(statistics.median(ts[1:]))
            tcps.append(times[0])
            locs.append(times[1])
            ups.append(times[0] / times[1])
        assert co.local_reader.stats.rows >= reps * (run + 1) * batch
    nbytes = batch * dim * 4
    return (
        nbytes / statistics.median(tcps) / 1e9,
        nbytes / statistics.median(locs) / 1e9,
        statistics.median(ups),
    )


def colocate_table(manifest: str, tmp: Path, dims: list[int], a: argparse.Namespace) -> None:
    print(
        "\n| feature dim | batch | payload MB | TCP pull GB/s | co-located pull GB/s "
        "| speed-up (median of rounds) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    srv = Server(manifest, 1, tmp)
    try:
        for d in dims:
            tcp, loc, up = bench_colocated(srv, d, a.batch, a.reps, a.nodes)
            print(
                f"| {d} | {a.batch} | {a.batch * d * 4 / 1e6:.1f} | {tcp:.2f} | {loc:.2f} "
                f"| {up:.1f}x |"
            )
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=150_000)
    ap.add_argument("--dims", default="128,512,1024")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--avg-degree", type=int, default=10)
    ap.add_argument(
        "--colocate",
        action="store_true",
        help="only compare pulls over TCP with a co-located trainer's shared-memory reads",
    )
    ap.add_argument(
        "--pull-only", action="store_true", help="only the pull table (no memory, no sampling)"
    )
    a = ap.parse_args()
    dims = [int(d) for d in a.dims.split(",")]
    os.environ.setdefault("DISTGNN_LOG_LEVEL", "WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmpd:
        tmp = Path(tmpd)
        t0 = time.perf_counter()
        manifest = make_partition(tmp / "parts", a.nodes, dims, a.avg_degree)
        files = json.loads(Path(manifest).read_text())["parts"][0]["files"]
        part_bytes = sum(f["bytes"] for f in files.values())
        print(
            f"# graph: {a.nodes} nodes, {a.nodes * a.avg_degree} edges, dims {dims}; "
            f"partition files {part_bytes / 2**20:.0f} MiB "
            f"(built in {time.perf_counter() - t0:.0f}s)"
        )
        if a.colocate:
            colocate_table(manifest, tmp, dims, a)
            return
        print(
            "\n| feature dim | batch | payload MB | DistTensor pull GB/s | raw loopback GB/s "
            "| pull/raw (median of rounds) | raw + gather GB/s | pull / (raw + gather) |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        srv = Server(manifest, 1, tmp)
        try:
            for d in dims:
                nbytes = a.batch * d * 4
                pull, raw, ratio, rawg, gratio = bench_pull(srv, d, a.batch, a.reps, a.nodes)
                print(
                    f"| {d} | {a.batch} | {nbytes / 1e6:.1f} | {pull:.2f} | {raw:.2f} | "
                    f"{100 * ratio:.0f}% | {rawg:.2f} | {100 * gratio:.0f}% |"
                )
            if a.pull_only:
                return
            samp = bench_sampling(manifest, srv, a.nodes, max(3, a.reps // 3))
        finally:
            srv.stop()

        print("\n| workers | server PSS MiB | partition files MiB | PSS / files |")
        print("|---:|---:|---:|---:|")
        for w in (1, 4):
            srv = Server(manifest, w, tmp)
            try:
                touch_all(srv, dims, a.nodes, w)
                pss = srv.pss()
            finally:
                srv.stop()
            print(
                f"| {w} | {pss / 2**20:.0f} | {part_bytes / 2**20:.0f} | {pss / part_bytes:.2f}x |"
            )

        print("\n| one-hop sample_neighbors (fanout 10, 100k seeds/call) | seeds/s |")
        print("|---|---:|")
        for mode, rate in samp:
            print(f"| {mode} | {rate / 1e6:.2f} M |")


if __name__ == "__main__":
    main()
