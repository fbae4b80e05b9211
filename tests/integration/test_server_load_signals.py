"""A graph server stops on SIGTERM while it is still loading a (large) partition."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from distgnn.graph.io import graph_from_arrays
from distgnn.partition.partitioner import partition_graph

BIG = 2 << 30  # a sparse file: reading and hashing it all takes seconds, storing it nothing


@pytest.fixture
def slow_partition(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    g = graph_from_arrays(
        {"src": rng.integers(0, 50, 200), "dst": rng.integers(0, 50, 200),
         "feat": rng.random((50, 4), dtype=np.float32)}
    )  # fmt: skip
    partition_graph(g, 1, str(tmp_path / "p"), "g", progress=False)
    manifest = tmp_path / "p" / "g.json"
    m = json.loads(manifest.read_text())
    files = m["parts"][0]["files"]
    rel = "graph/indptr.npy"  # read first
    with open(tmp_path / "p" / m["parts"][0]["path"] / rel, "r+b") as f:
        f.truncate(BIG)
    files[rel]["bytes"] = BIG  # its sha256 no longer matches: loading it to the end fails
    m["parts"][0]["files"] = {rel: files[rel], **{k: v for k, v in files.items() if k != rel}}
    manifest.write_text(json.dumps(m))
    return manifest


def test_sigterm_during_a_long_load_stops_the_server(slow_partition: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "distgnn.cli", "--log-format", "text", "serve",
            "--manifest", str(slow_partition), "--part-id", "0", "--bind", "127.0.0.1",
            "--port", "0", "--health-port", "0", "--insecure-no-token"]  # fmt: skip
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "load partition: started" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the server never started loading"
            time.sleep(0.02)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    text = log.read_text(errors="replace")
    assert rc == 0, text[-3000:]
    assert "stopped while loading" in text and "sha256" not in text, text[-3000:]
    assert took < 30
    shm = [p for p in Path("/dev/shm").glob("distgnn-p0-*") if str(proc.pid) in _owner(p)]
    assert shm == [], "the stopped server left its shared memory"


def _owner(folder: Path) -> str:
    try:
        return (folder / "owner.json").read_text()
    except OSError:
        return ""
