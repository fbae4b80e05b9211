"""The graph server's parent process: load, spawn workers, report readiness, drain.

Order of a server's life:

1. the health endpoint starts (``/healthz`` 200, ``/readyz`` 503);
2. the protocol port is bound (once, here; workers inherit the socket), so a port in use
   fails fast;
3. partition ``I`` is loaded from object storage into shared memory (checksums verified);
   only then does the socket listen (clients retry refused connections meanwhile);
4. ``N`` worker processes start, attach to the shared memory and accept connections;
5. ``/readyz`` turns 200 and the ready file (JSON: ports, pid) is written;
6. on SIGTERM/SIGINT the workers are asked to drain, the shared memory is removed,
   and the process exits 0. A worker that dies unexpectedly is restarted; when that
   fails (out of file descriptors, processes or memory) three times in a row the server
   stops its workers, removes its shared memory and exits 1 with one log line.

With ``metrics_port`` set, ``/metrics`` (Prometheus) is served from step 3 on, summing
the workers' counters (:mod:`distgnn.server.metrics`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distgnn import contract, storage
from distgnn import log as dlog
from distgnn.errors import ConfigError, DistGNNError
from distgnn.log import kv
from distgnn.metrics_http import MetricsEndpoint, serve
from distgnn.partition.loader import LoadCancelled
from distgnn.server.health import HealthServer
from distgnn.server.limits import ServerLimits, shm_free
from distgnn.server.metrics import ServerState, server_registry, stats_path
from distgnn.server.state import load_into_store
from distgnn.server.store import ShmStore, default_shm_root, sweep_stale

RESTART_TRIES = 3

log = logging.getLogger("distgnn.server")


class ServerStartError(DistGNNError, RuntimeError):
    """A graph server could not start (port in use, worker failed to attach)."""


class PortUnavailable(ServerStartError):
    """A port the options name cannot be bound (in use, an address not on this host):
    another process (or container of the pod) holds it, which restarting this server does
    not change (``distgnn serve`` exits 2)."""


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``distgnn serve`` needs; logged once at start (without the token)."""

    manifest: str
    part_id: int
    port: int
    bind: str
    health_port: int
    workers: int
    token: str | None
    insecure: bool = False
    ready_file: str | None = None
    shm_dir: str = field(default_factory=default_shm_root)
    drain_timeout: float = 30.0
    storage_options: Mapping[str, Any] | None = None
    limit_env: Mapping[str, str] = field(default_factory=dict)
    """``DISTGNN_SERVER_*``/``DISTGNN_HEALTH_*`` overrides of the derived limits."""
    metrics_port: int | None = None
    """Prometheus /metrics port (0: any); None: no metrics."""

    def validate(self) -> None:
        if not self.token and not self.insecure:
            raise ConfigError(
                "a token is required: pass --token-file or set DISTGNN_TOKEN_FILE/DISTGNN_TOKEN "
                "(or --insecure-no-token for development)"
            )
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.part_id < 0:
            raise ConfigError(f"--part-id must be >= 0, got {self.part_id}")
        for name, port in (
            ("--port", self.port),
            ("--health-port", self.health_port),
            ("--metrics-port", 0 if self.metrics_port is None else self.metrics_port),
        ):
            if not 0 <= port < 65536:
                raise ConfigError(f"{name} {port} is not a port number")
        ServerLimits().with_env(self.limit_env)  # a bad override fails before loading


class GraphServer:
    """The parent: owns the listening socket, the shared memory and the workers."""

    def __init__(self, cfg: ServeConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.stop = threading.Event()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.limits = ServerLimits.derive(env=cfg.limit_env)
        self.stats = ServerState(cfg.part_id)

    def request_stop(self, *_: object) -> None:
        self.stop.set()

    def _spawn(
        self, listener: socket.socket, store: ShmStore, slot: int
    ) -> subprocess.Popen[bytes]:
        rfd, wfd = os.pipe()
        env = dict(os.environ)
        env["DISTGNN_WORKER_TOKEN"] = self.cfg.token or ""
        env[contract.ENV_PART_ID] = str(self.cfg.part_id)  # the workers' log context
        cmd = [
            sys.executable,
            "-m",
            "distgnn.server.worker",
            "--shm-dir",
            store.root,
            "--listen-fd",
            str(listener.fileno()),
            "--ready-fd",
            str(wfd),
            "--drain-timeout",
            str(self.cfg.drain_timeout),
            "--limits",
            self.limits.to_json(),
        ]
        if self.cfg.insecure:
            cmd.append("--insecure-no-token")
        if self.cfg.metrics_port is not None:
            cmd += ["--stats-file", stats_path(store.root, slot)]
        proc = subprocess.Popen(cmd, pass_fds=(listener.fileno(), wfd), env=env)
        os.close(wfd)
        try:
            ready, _, _ = select.select([rfd], [], [], 120.0)
            if not ready or os.read(rfd, 1) != b"R":
                proc.kill()
                proc.wait(10)
                raise ServerStartError(f"server worker pid {proc.pid} failed to start")
        finally:
            os.close(rfd)
        return proc

    def run(self) -> int:
        cfg = self.cfg
        log.info(
            "graph server starting",
            extra=kv(
                manifest=storage.redact(cfg.manifest),
                partition=cfg.part_id,
                bind=cfg.bind,
                port=cfg.port,
                health_port=cfg.health_port,
                metrics_port=cfg.metrics_port,
                workers=cfg.workers,
                auth=not cfg.insecure,
            ),
        )
        try:
            health = HealthServer(
                cfg.bind,
                cfg.health_port,
                self.limits.health_connections,
                self.limits.health_timeout,
            )
        except OSError as e:
            raise PortUnavailable(f"cannot bind health port {cfg.health_port}: {e}") from e
        health.start()
        listener = socket.socket(socket.AF_INET6 if ":" in cfg.bind else socket.AF_INET)
        store: ShmStore | None = None
        metrics: MetricsEndpoint | None = None
        try:
            if cfg.metrics_port is not None:
                try:
                    metrics = serve(server_registry(self.stats), cfg.metrics_port, cfg.bind)
                except OSError as e:
                    raise PortUnavailable(
                        f"cannot bind metrics port {cfg.metrics_port}: {e}"
                    ) from e
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((cfg.bind, cfg.port))
            except OSError as e:
                raise PortUnavailable(f"cannot bind {cfg.bind}:{cfg.port}: {e}") from e
            port = int(listener.getsockname()[1])
            # folders of servers killed before they could clean up (SIGKILL, OOM)
            sweep_stale(cfg.shm_dir)
            store = ShmStore.create(cfg.shm_dir, prefix=f"distgnn-p{cfg.part_id}-")
            self.stats.shm_root = store.root
            t_load = time.monotonic()
            with dlog.step("load partition", log, partition=cfg.part_id):
                try:  # SIGTERM stays live: the loader polls the stop event between reads
                    info = load_into_store(
                        cfg.manifest, cfg.part_id, store, cfg.storage_options, self.stop.is_set
                    )
                except LoadCancelled:
                    log.info("stopped while loading the partition")
                    return 0
            self.stats.load_seconds = round(time.monotonic() - t_load, 3)
            if self.stop.is_set():
                return 0
            # the run-time tensor quota is a share of what the partition left free
            self.limits = ServerLimits.derive(env=cfg.limit_env, shm_free=shm_free(store.root))
            log.info("server limits", extra=kv(**json.loads(self.limits.to_json())))
            # listen only now: while loading, connections are refused and clients keep
            # retrying (DISTGNN_CONNECT_TIMEOUT) instead of waiting on a silent backlog
            listener.listen(1024)
            for slot in range(cfg.workers):
                self.workers.append(self._spawn(listener, store, slot))
            self.stats.workers = [w.pid for w in self.workers]
            details = {
                "part_id": cfg.part_id,
                "port": port,
                "health_port": health.port,
                "metrics_port": metrics.port if metrics is not None else None,
                "pid": os.getpid(),
                "workers": [w.pid for w in self.workers],
                "shm_dir": store.root,
                "owned_nodes": info["num_owned_nodes"],
            }
            health.details = details
            health.ready.set()
            self.stats.loaded = True
            if cfg.ready_file:
                tmp = cfg.ready_file + ".tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(details, f)
                os.replace(tmp, cfg.ready_file)
            log.info("graph server ready", extra=kv(**{k: details[k] for k in ("port", "pid")}))
            while not self.stop.wait(0.5):
                for i, w in enumerate(self.workers):
                    if w.poll() is not None:
                        log.warning("worker died; restarting", extra=kv(pid=w.pid, rc=w.returncode))
                        replacement = self._restart(listener, store, i)
                        if replacement is None:
                            return 1
                        self.workers[i] = replacement
                        self.stats.workers = [w.pid for w in self.workers]
            log.info("graph server draining", extra=kv(workers=len(self.workers)))
            return 0
        finally:
            health.ready.clear()
            self.stats.loaded = False
            steps = [self._stop_workers, listener.close, health.close]
            if metrics is not None:
                steps.append(metrics.close)
            for step in steps:
                try:
                    step()
                except Exception as e:  # cleanup goes on: the shared memory must go
                    log.warning("shutdown step failed", extra=kv(error=str(e)))
            if store is not None:
                store.close()
            log.info("graph server stopped")

    def _restart(
        self, listener: socket.socket, store: ShmStore, slot: int
    ) -> subprocess.Popen[bytes] | None:
        """A new worker, or None after RESTART_TRIES failures (the caller exits 1)."""
        for attempt in range(1, RESTART_TRIES + 1):
            try:
                return self._spawn(listener, store, slot)
            except (OSError, subprocess.SubprocessError, ServerStartError) as e:
                log.error(
                    "cannot restart a worker",
                    extra=kv(attempt=attempt, of=RESTART_TRIES, error=str(e)[:200]),
                )
                if self.stop.wait(1.0 * attempt):
                    return None
        log.error("server stops: its workers cannot be restarted")
        return None

    def _stop_workers(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.cfg.drain_timeout + 5
        for w in self.workers:
            try:
                w.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker did not drain in time; killing", extra=kv(pid=w.pid))
                w.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.wait(5)
