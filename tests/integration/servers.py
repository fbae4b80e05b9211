"""Reusable helpers: partition Cora and run real ``distgnn serve`` processes on loopback.

Import explicitly from tests (``from servers import running_servers, partition_cora``;
``tests/integration`` is on ``sys.path`` under pytest's default import mode)::

    url = partition_cora(cora_path, tmp_path_factory.getbasetemp() / "cora2", num_parts=2)
    with running_servers(url, num_parts=2, workers=1) as srv:
        ctx = initialize(servers=srv.addrs, token=srv.token)   # or env=srv.env()
        ...

Each server binds port 0 on 127.0.0.1 and reports its real ports in its ready file,
so there are no port races. On exit every server gets SIGTERM (then SIGKILL after a
timeout); ``srv.returncodes`` holds their exit codes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 40.0


def partition_cora(
    cora_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    num_parts: int = 2,
    method: str = "metis",
    name: str = "cora",
) -> str:
    """Partition Cora into ``out_dir`` once (reused when the manifest exists); manifest URL."""
    from distgnn.partition.partitioner import partition_graph

    out = Path(out_dir)
    manifest = out / f"{name}.json"
    if not manifest.exists():
        partition_graph(str(cora_path), num_parts, str(out), name, method=method, progress=False)
    return str(manifest)


@dataclass
class Servers:
    """Running servers: addresses in partition order, token, manifest URL, processes."""

    manifest_url: str
    token: str
    addrs: list[tuple[str, int]]
    procs: list[subprocess.Popen[bytes]]
    ready: list[dict[str, Any]]
    logs: list[Path]
    returncodes: list[int | None] = field(default_factory=list)

    @property
    def servers(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addrs)

    def env(self) -> dict[str, str]:
        """The contract environment a trainer needs (DISTGNN_SERVERS, token, manifest)."""
        return {
            "DISTGNN_SERVERS": self.servers,
            "DISTGNN_TOKEN": self.token,
            "DISTGNN_MANIFEST": self.manifest_url,
        }

    def log_text(self, i: int) -> str:
        return self.logs[i].read_text(errors="replace")

    def kill(self, i: int) -> None:
        """SIGKILL server ``i`` and its workers (a crash, not a drain); removes its shm."""
        for pid in [*self.ready[i].get("workers", []), self.procs[i].pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.procs[i].wait(10)
        shutil.rmtree(self.ready[i].get("shm_dir", "/nonexistent"), ignore_errors=True)


def serve_command(
    manifest_url: str, part_id: int, token_file: str | None, ready_file: str, workers: int
) -> list[str]:
    cmd = [
        sys.executable, "-m", "distgnn.cli", "serve",
        "--manifest", manifest_url, "--part-id", str(part_id),
        "--bind", "127.0.0.1", "--port", "0", "--health-port", "0",
        "--workers", str(workers), "--ready-file", ready_file,
    ]  # fmt: skip
    cmd += ["--token-file", token_file] if token_file else ["--insecure-no-token"]
    return cmd


@contextlib.contextmanager
def running_servers(
    manifest_url: str,
    num_parts: int,
    workers: int = 1,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = READY_TIMEOUT_S,
    extra_args: Sequence[str] = (),
) -> Iterator[Servers]:
    """Start one server per partition, wait until all are ready, stop them at the end."""
    token = token or secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="distgnn-servers-") as tmp:
        tok_file = os.path.join(tmp, "token")
        with open(tok_file, "w", encoding="utf-8") as f:
            f.write(token)
        penv = dict(os.environ)
        penv.update(env or {})
        penv.setdefault("DISTGNN_LOG_FORMAT", "json")
        procs: list[subprocess.Popen[bytes]] = []
        logs: list[Path] = []
        readies = [os.path.join(tmp, f"ready-{p}.json") for p in range(num_parts)]
        srv = Servers(manifest_url, token, [], procs, [], logs)
        try:
            for p in range(num_parts):
                logs.append(Path(tmp) / f"server-{p}.log")
                with open(logs[-1], "wb") as out:
                    cmd = serve_command(manifest_url, p, tok_file, readies[p], workers)
                    procs.append(
                        subprocess.Popen(
                            [*cmd, *extra_args], stdout=out, stderr=subprocess.STDOUT, env=penv
                        )
                    )
            deadline = time.monotonic() + timeout
            for p in range(num_parts):
                while not os.path.exists(readies[p]):
                    if procs[p].poll() is not None:
                        raise RuntimeError(
                            f"server {p} exited with {procs[p].returncode}:\n{srv.log_text(p)}"
                        )
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"server {p} not ready:\n{srv.log_text(p)}")
                    time.sleep(0.05)
                with open(readies[p], encoding="utf-8") as f:
                    info = json.load(f)
                srv.ready.append(info)
                srv.addrs.append(("127.0.0.1", int(info["port"])))
            yield srv
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            srv.returncodes[:] = [proc.returncode for proc in procs]
