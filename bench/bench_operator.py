"""Operator throughput: N DistGNNJobs created at once against kmock's API emulator.

Runs the real ``distgnn-operator`` entry point in a subprocess (kubeconfig login, kopf,
our aiohttp client) and reports the time until every job has its children, the median
create->children latency per job, the operator's peak memory, and the CPU time of the
operator and of the (single-threaded, in-process) emulator. Since the emulator stopped
keeping every served request (round 15), 200 jobs all get their children in ~11 s on
2 cores, the emulator using ~3x the operator's CPU (bench/README.md).

    python bench/bench_operator.py [--jobs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import kmock

# the emulator stand-in is shared with the operator's integration tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.emulator import (
    GV,
    StampingEmulator,
    declare_resources,
    write_kubeconfig,
)

CHILDREN = ("secrets", "jobs", "services", "statefulsets", "networkpolicies")
PER_JOB = 6  # token Secret, partition Job, 2 Services, StatefulSet, NetworkPolicy
SETTLE_S = 10.0  # window in which a settled operator must write nothing


def job(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "DistGNNJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "graph": {"source": {"url": "s3://graphs/g.npz"}},
            "trainers": {"app": {"name": "node-classification"}},
        },
    }


def children_of(k: kmock.KubernetesEmulator) -> dict[str, int]:
    counts: dict[str, int] = {}
    for (res, _ns, _name), obj in list(k.objects.items()):
        if getattr(res, "plural", None) in CHILDREN and not obj.deleted:
            refs = obj.get("metadata", {}).get("ownerReferences") or []
            for r in refs:
                counts[r["name"]] = counts.get(r["name"], 0) + 1
    return counts


def all_finalized(k: kmock.KubernetesEmulator) -> bool:
    jobs = [
        o
        for (res, _ns, _name), o in list(k.objects.items())
        if getattr(res, "plural", None) == "distgnnjobs" and not o.deleted
    ]
    return all(
        "distgnn.dev/finalizer" in (o.get("metadata", {}).get("finalizers") or []) for o in jobs
    )


async def run(n: int, timeout: float, spread: bool) -> dict[str, float]:
    async with StampingEmulator() as k, kmock.Server(k):
        declare_resources(k)
        tmp = tempfile.mkdtemp(prefix="bench-operator-")
        kc = write_kubeconfig(k, Path(tmp) / "kubeconfig")
        env = {
            **os.environ,
            "KUBECONFIG": str(kc),
            "DISTGNN_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        }
        log = open(os.environ.get("BENCH_LOG", os.devnull), "w")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distgnn_operator",
                "--liveness",
                "",
                "--resync-seconds",
                "600",
                "--partitions-url",
                "s3://parts",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            await asyncio.sleep(3.0)  # operator start-up and watches
            names = [f"job-{i:04d}" for i in range(n)]
            t0 = time.monotonic()
            cpu0 = time.process_time()
            created: dict[str, float] = {}

            async def create(name: str) -> None:
                ns = f"bench-{name}" if spread else "bench"
                async with k.request(
                    "POST", f"/apis/{GV}/namespaces/{ns}/distgnnjobs", json=job(name, ns)
                ) as r:
                    assert r.status < 300, await r.text()
                created[name] = time.monotonic()

            await asyncio.gather(*(create(nm) for nm in names))
            done: dict[str, float] = {}
            while len(done) < n and time.monotonic() - t0 < timeout:
                counts = children_of(k)
                now = time.monotonic()
                for nm in names:
                    if nm not in done and counts.get(nm, 0) >= PER_JOB:
                        done[nm] = now
                await asyncio.sleep(1.0)
            total = time.monotonic() - t0
            # steady state: with nothing changing, the operator should write nothing at all;
            # settled = the finalizer on every job (the first pass adds it, kopf may too), + 3 s
            t_fin = time.monotonic()
            while not all_finalized(k) and time.monotonic() - t_fin < timeout:
                await asyncio.sleep(1.0)
            await asyncio.sleep(3.0)  # let the last status patches land
            n_writes = len(k.writes)
            await asyncio.sleep(SETTLE_S)
            settled_writes = len(k.writes) - n_writes
            kinds = Counter(
                f"{w.method} {w.plural}{'/status' if w.path.endswith('/status') else ''}"
                for w in k.writes_since(n_writes)
            )
            if kinds:
                print(f"writes once settled: {dict(kinds)}", file=sys.stderr)
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 60)
            log.close()
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_kib = ru.ru_maxrss
        op_cpu = ru.ru_utime + ru.ru_stime
        emu_cpu = time.process_time() - cpu0
        lat = [done[nm] - created[nm] for nm in done]
        return {
            "jobs": n,
            "complete": len(done),
            "all_children_s": total,
            "median_s": statistics.median(lat) if lat else float("nan"),
            "p90_s": sorted(lat)[int(0.9 * (len(lat) - 1))] if lat else float("nan"),
            "peak_mib": peak_kib / 1024,
            "op_cpu_s": op_cpu,
            "emu_cpu_s": emu_cpu,
            "settled_writes": settled_writes,
        }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument(
        "--one-namespace",
        action="store_true",
        help="all jobs in one namespace (the emulator ignores label selectors, so every "
        "list then returns every job's children: quadratic in the emulator)",
    )
    a = ap.parse_args()
    r = asyncio.run(run(a.jobs, a.timeout, spread=not a.one_namespace))
    print(f"namespaces: {'one' if a.one_namespace else 'one per job'}")
    print(
        "| jobs | with children | time to all children (s) | median create->children (s) "
        "| p90 (s) | operator peak RSS (MiB) | operator CPU (s) | emulator CPU (s) "
        f"| writes in {SETTLE_S:g} s once settled |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {r['jobs']} | {r['complete']} | {r['all_children_s']:.2f} | {r['median_s']:.2f} "
        f"| {r['p90_s']:.2f} | {r['peak_mib']:.0f} | {r['op_cpu_s']:.1f} "
        f"| {r['emu_cpu_s']:.1f} | {r['settled_writes']:.0f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
