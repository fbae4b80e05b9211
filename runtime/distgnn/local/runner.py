"""Orchestration of one local run: servers, trainers, restarts, deadline, metrics.

:func:`run_job` runs a DistGNNJob plan to completion and returns its metrics;
:func:`run_graphserver` keeps a GraphServer's servers up until interrupted. Both
stop every process they started (process groups, SIGTERM then SIGKILL) on success,
failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from distgnn import contract
from distgnn import log as dlog
from distgnn.cpus import available_cpus
from distgnn.errors import ConfigError, JobFailed
from distgnn.local import gpus as gpu
from distgnn.local.plan import LocalPlan, distgnn_argv
from distgnn.local.ports import LOOPBACK, PortAllocator
from distgnn.local.progress import ProgressWatch
from distgnn.local.registry import GraphServerEntry, Registry, process_create_time
from distgnn.local.supervisor import ManagedProcess, ProcessSpec, Supervisor, describe_exit
from distgnn.log import Progress, kv
from distgnn.rpc.gather import ENV_GATHER_THREADS, shared_host_threads

log = logging.getLogger("distgnn.local")

TAIL = 15
SERVER_PREFIX = "server-"


@dataclass
class RunContext:
    """Everything a run needs besides the plan: where to write, how long to wait."""

    workdir: Path
    registry: Registry
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    ready_timeout: float = 300.0
    grace: float = 10.0
    poll_interval: float = 0.1
    status_interval: float = 30.0
    progress_interval: float = 2.0
    log_format: str | None = None
    """Format of the children's logs and of their lines in ``stream`` (json or text);
    None: this process's own (``distgnn --log-format``)."""

    def resolved_log_format(self) -> str:
        return self.log_format or dlog.current_format() or "text"


@dataclass(frozen=True)
class Servers:
    """Running (or attached) graph servers as trainers see them."""

    addresses: list[str]
    token_file: str
    manifest_url: str
    metrics_urls: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)
    """Each server's shared-memory store folder (from its ready file), in partition order."""


class Deadline:
    """``runPolicy.activeDeadlineSeconds`` counted from the start of the run."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.t0 = time.monotonic()

    def left(self) -> float | None:
        if self.seconds is None:
            return None
        return self.seconds - (time.monotonic() - self.t0)

    def check(self, what: str) -> None:
        left = self.left()
        if left is not None and left <= 0:
            raise JobFailed(
                f"runPolicy.activeDeadlineSeconds={self.seconds:g} exceeded while {what}"
            )


def write_token(path: Path) -> Path:
    """A fresh random token in a new 0600 file (never logged)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secrets.token_urlsafe(32))
    os.chmod(path, 0o600)
    return path


def child_env(extra: dict[str, str], log_format: str | None = None) -> dict[str, str]:
    """The parent's environment, the run's log format (one format per run, default the
    parent's own), unbuffered output, plus ``extra``."""
    env = dict(os.environ)
    env[contract.ENV_LOG_FORMAT] = (
        log_format or dlog.current_format() or env.get(contract.ENV_LOG_FORMAT) or "text"
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.pop(contract.ENV_TOKEN, None)
    env.update(extra)
    return env


def read_num_parts(manifest_url: str) -> int:
    """``num_parts`` of a partition manifest, validated (see docs/partition-format.md)."""
    from distgnn.partition.loader import load_manifest

    return load_manifest(manifest_url).num_parts


# -- servers ---------------------------------------------------------------------------


def start_servers(
    sup: Supervisor,
    ctx: RunContext,
    manifest_url: str,
    workers: int,
    token_file: Path,
    rundir: Path,
    ports: PortAllocator,
    deadline: Deadline,
    *,
    owner: str | None = None,
    metrics: bool = False,
    gather_threads: int | None = None,
) -> Servers:
    """Start one server per partition and wait for all of them to be ready (with
    ``metrics``, each also serves /metrics on a port of its own; ``gather_threads``:
    their row-gather threads, unless ``DISTGNN_GATHER_THREADS`` is set already)."""
    num_parts = read_num_parts(manifest_url)
    health: dict[str, tuple[int, Path]] = {}
    addresses: list[str] = []
    metrics_urls: list[str] = []
    for i in range(num_parts):
        name = server_name(i)
        port, hport = ports.take(), ports.take()
        ready = rundir / f"{name}.ready"
        ready.unlink(missing_ok=True)
        argv = [
            *distgnn_argv(),
            "serve",
            "--manifest", manifest_url,
            "--part-id", str(i),
            "--port", str(port),
            "--bind", LOOPBACK,
            "--token-file", str(token_file),
            "--workers", str(workers),
            "--health-port", str(hport),
            "--ready-file", str(ready),
        ]  # fmt: skip
        if metrics:
            mport = ports.take()
            argv += ["--metrics-port", str(mport)]
            metrics_urls.append(f"http://{LOOPBACK}:{mport}{contract.METRICS_PATH}")
        extra = {contract.ENV_TOKEN_FILE: str(token_file)}
        if owner:
            extra[contract.ENV_JOB_NAME] = owner
        if gather_threads is not None and not os.environ.get(ENV_GATHER_THREADS, "").strip():
            extra[ENV_GATHER_THREADS] = str(gather_threads)
        env = child_env(extra, ctx.resolved_log_format())
        sup.start(ProcessSpec(name, argv, env=env, cwd=str(rundir)))
        health[name] = (hport, ready)
        addresses.append(f"{LOOPBACK}:{port}")
    wait_ready(sup, ctx, health, deadline)
    log.info("graph servers ready", extra=kv(servers=",".join(addresses), num_parts=num_parts))
    if metrics_urls:
        log.info("graph server metrics", extra=kv(urls=",".join(metrics_urls)))
    stores = [read_store(hport, ready) for hport, ready in health.values()]
    return Servers(addresses, str(token_file), manifest_url, metrics_urls, stores)


def read_store(hport: int, ready: Path) -> str:
    """A ready server's store folder (``shm_dir`` of its ready file, else of its
    ``/readyz`` answer); "" if unknown (its trainers then read over TCP)."""
    try:
        with open(ready, encoding="utf-8") as f:
            return str(json.load(f).get("shm_dir") or "")
    except (OSError, ValueError):
        pass
    try:
        url = f"http://{LOOPBACK}:{hport}/readyz"
        with urllib.request.urlopen(url, timeout=5.0) as r:
            return str(json.loads(r.read(1 << 16)).get("shm_dir") or "")
    except (OSError, ValueError):
        return ""


def _is_ready(hport: int, ready: Path) -> bool:
    if ready.exists():
        return True
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{hport}/readyz", timeout=1.0) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_ready(
    sup: Supervisor, ctx: RunContext, health: dict[str, tuple[int, Path]], deadline: Deadline
) -> None:
    """Wait for every server's ready file or /readyz; name the one that failed."""
    pending = dict(health)
    t_end = time.monotonic() + ctx.ready_timeout
    with Progress("waiting for graph servers", total=len(health), logger=log) as prog:
        while pending:
            for name, (hport, ready) in list(pending.items()):
                proc = sup.procs[name]
                if proc.poll() is not None:
                    raise server_failure(
                        proc, f"{name} exited before it was ready ({describe_exit(proc.poll())})"
                    )
                if _is_ready(hport, ready):
                    del pending[name]
                    prog.update(1)
            if not pending:
                break
            deadline.check("waiting for graph servers")
            if time.monotonic() > t_end:
                name = sorted(pending)[0]
                raise JobFailed(
                    failure_text(
                        sup.procs[name],
                        f"{name} was not ready within {ctx.ready_timeout:g}s "
                        f"(pending: {', '.join(sorted(pending))})",
                    )
                )
            time.sleep(0.2)


def server_name(part: int) -> str:
    """The process name of partition ``part``'s graph server."""
    return f"{SERVER_PREFIX}{part}"


def server_failure(proc: ManagedProcess, headline: str) -> JobFailed:
    """The failure of a graph server that exited. Exit status 2 (``distgnn serve``'s for
    what a restart cannot cure: a partition missing or malformed, no credentials, a port
    in use) is one line naming the server, its partition and the error line of its log,
    and ``distgnn run`` exits 2, as the operator fails a job with ``ServerConfigError``;
    any other exit is ``headline``, its cause and last lines, exit 1 (local mode restarts
    no server)."""
    if not contract.is_config_error_exit(proc.poll()):
        return JobFailed(failure_text(proc, headline))
    proc.reader.join(timeout=2.0)  # its last lines, still in the pipe
    lines = proc.last_lines(TAIL)
    cause = log_root_cause(lines) or (lines[-1].strip() if lines else "it wrote no output")
    return JobFailed(
        f"graph server {proc.name} (partition {proc.name.removeprefix(SERVER_PREFIX)}) "
        f"exited with a configuration error (exit code {contract.EXIT_CONFIG_ERROR}), not "
        f"retried: {cause}",
        exit_status=contract.EXIT_CONFIG_ERROR,
    )


_CLI_ERROR = re.compile(r"distgnn [a-z]+: error: .+")


def log_root_cause(lines: list[str]) -> str | None:
    """The root cause among a process's last lines: the ``distgnn CMD: error: ...`` line
    its command ends with, else a missing Python module; None if neither is there."""
    for line in reversed(lines):
        if m := _CLI_ERROR.search(line):
            return m.group(0).strip()
    return missing_module(lines)


def failure_text(proc: ManagedProcess, headline: str, cause: str | None = None) -> str:
    """A multi-line failure description: headline, cause, last log lines. Without a
    termination-log cause, a missing Python module in those lines is the cause."""
    if proc.poll() is not None:
        proc.reader.join(timeout=2.0)  # its last lines, still in the pipe
    lines = proc.last_lines(TAIL)
    if cause is None or cause.startswith("ModuleNotFoundError:"):  # with what installs it
        cause = missing_module(lines) or cause
    parts = [headline]
    if cause:
        parts.append(f"cause: {cause.strip()}")
    if lines:
        parts.append(f"last {len(lines)} log lines of {proc.name}:")
        parts.extend(f"  {proc.name} | {ln}" for ln in lines)
    return "\n".join(parts)


def server_gather_threads(plan: LocalPlan) -> int:
    """Row-gather threads of a job's servers: the host's CPUs its trainers' torch threads
    leave free (``OMP_NUM_THREADS`` of the job or the environment, else the share
    :func:`trainer_specs` gives), at least 1: servers and trainers share this host."""
    replicas = max(1, plan.replicas)
    threads = max(1, available_cpus() // replicas)
    for env in (plan.env, os.environ):
        try:
            threads = max(1, int(env.get("OMP_NUM_THREADS", "")))
            break
        except ValueError:
            continue
    return shared_host_threads(available_cpus(), replicas * threads)


# -- trainers --------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainerPorts:
    """Rank 0's rendezvous and /progress ports; each rank's /metrics port (if enabled)."""

    master: int
    progress: int
    metrics: list[int] = field(default_factory=list)

    @classmethod
    def take(cls, ports: PortAllocator, plan: LocalPlan) -> TrainerPorts:
        metrics = [ports.take() for _ in range(plan.replicas)] if plan.metrics else []
        return cls(ports.take(), ports.take(), metrics)


def trainer_specs(
    plan: LocalPlan,
    servers: Servers,
    rundir: Path,
    tports: TrainerPorts,
    log_format: str | None = None,
    devices: list[str] | None = None,
) -> list[ProcessSpec]:
    """One ProcessSpec per trainer replica with the contract environment; ``devices``:
    each trainer's ``CUDA_VISIBLE_DEVICES`` (``trainers.gpus``: :mod:`distgnn.local.gpus`;
    the job's own ``podTemplate.env`` wins)."""
    assert plan.trainer_argv is not None
    threads = max(1, available_cpus() // max(1, plan.replicas))
    specs = []
    for rank in range(plan.replicas):
        extra = {
            contract.ENV_SERVERS: ",".join(servers.addresses),
            contract.ENV_TOKEN_FILE: servers.token_file,
            contract.ENV_MANIFEST: servers.manifest_url,
            contract.ENV_RANK: str(rank),
            contract.ENV_LOCAL_RANK: str(rank),
            contract.ENV_LOCAL_WORLD_SIZE: str(plan.replicas),
            contract.ENV_WORLD_SIZE: str(plan.replicas),
            contract.ENV_MASTER_ADDR: LOOPBACK,
            contract.ENV_MASTER_PORT: str(tports.master),
            contract.ENV_NUM_SAMPLERS: str(plan.num_samplers),
            contract.ENV_JOB_NAME: plan.name,
            contract.ENV_METRICS_FILE: str(rundir / "metrics.json"),
            contract.ENV_TERMINATION_LOG: str(rundir / f"trainer-{rank}.termination-log"),
            contract.ENV_PROGRESS_PORT: str(tports.progress) if rank == 0 else "off",
            contract.ENV_HTTP_BIND: LOOPBACK,
            **({gpu.VISIBLE: devices[rank]} if devices else {}),
            **plan.env,
        }
        if tports.metrics:
            extra[contract.ENV_METRICS_PORT] = str(tports.metrics[rank])
        if plan.colocate and servers.stores:
            extra.update(colocated_env(rank, plan.replicas, servers.stores))
        if plan.checkpoint_url:
            extra[contract.ENV_CHECKPOINT_URL] = plan.checkpoint_url
        if plan.feature_cache_mb:
            extra.setdefault(contract.ENV_FEATURE_CACHE_MB, str(plan.feature_cache_mb))
        env = child_env(extra, log_format)
        env.setdefault("OMP_NUM_THREADS", str(threads))
        specs.append(ProcessSpec(f"trainer-{rank}", plan.trainer_argv, env=env, cwd=plan.cwd))
    return specs


def colocated_env(rank: int, replicas: int, stores: list[str]) -> dict[str, str]:
    """A co-located trainer's partition (DGL's: ``rank // (replicas / num_parts)``, the
    partition whose training nodes it gets) and that server's store folder."""
    n = len(stores)  # as distgnn.distributed.context.trainer_partition
    part = rank // (replicas // n) if replicas >= n and replicas % n == 0 else rank % n
    if not stores[part]:
        return {}
    return {contract.ENV_LOCAL_PARTITION: str(part), contract.ENV_LOCAL_STORE: stores[part]}


def run_trainers(
    sup: Supervisor,
    ctx: RunContext,
    plan: LocalPlan,
    servers: Servers,
    rundir: Path,
    ports: PortAllocator,
    deadline: Deadline,
    devices: list[str] | None = None,
) -> dict[str, Any]:
    """Run the trainer group, restarting it up to ``backoff_limit`` times; return metrics;
    ``devices``: each trainer's ``CUDA_VISIBLE_DEVICES`` (:func:`job_devices`).

    A trainer's exit status 2 (a configuration error) fails the job at once: no restart."""
    server_names = [n for n in sup.procs if n.startswith(SERVER_PREFIX)]
    attempt = 0
    while True:
        for f in rundir.glob("*.termination-log"):
            f.unlink()
        (rundir / "metrics.json").unlink(missing_ok=True)
        tports = TrainerPorts.take(ports, plan)
        specs = trainer_specs(plan, servers, rundir, tports, ctx.resolved_log_format(), devices)
        log.info(
            "starting trainers",
            extra=kv(replicas=plan.replicas, attempt=attempt + 1, samplers=plan.num_samplers),
        )
        if tports.metrics:
            urls = [f"http://{LOOPBACK}:{p}{contract.METRICS_PATH}" for p in tports.metrics]
            log.info("trainer metrics", extra=kv(urls=",".join(urls)))
        for spec in specs:
            sup.start(spec)
        names = [s.name for s in specs]
        watch = ProgressWatch(tports.progress, ctx.progress_interval)
        failure = _watch(sup, ctx, names, server_names, rundir, deadline, watch)
        if failure is None:
            return read_metrics(sup, rundir, plan)
        sup.stop(names, grace=ctx.grace)
        suffix = f" after {attempt + 1} attempts" if attempt else ""
        if contract.is_config_error_exit(failure.exit_code):
            raise JobFailed(
                f"job {plan.name!r} failed{suffix}, not retried: a trainer exited with "
                f"{contract.EXIT_CONFIG_ERROR} (a configuration error): {failure.text}",
                exit_status=contract.EXIT_CONFIG_ERROR,
            )
        if attempt >= plan.backoff_limit:
            raise JobFailed(f"job {plan.name!r} failed{suffix}: {failure.text}")
        attempt += 1
        log.warning(
            "trainer group failed; restarting (runPolicy.backoffLimit)",
            extra=kv(
                attempt=attempt + 1,
                backoff_limit=plan.backoff_limit,
                resume=bool(plan.checkpoint_url),
            ),
        )


@dataclass(frozen=True)
class TrainerFailure:
    """The first trainer that failed: the failure text and its exit status."""

    text: str
    exit_code: int | None


def _watch(
    sup: Supervisor,
    ctx: RunContext,
    trainers: list[str],
    servers: list[str],
    rundir: Path,
    deadline: Deadline,
    progress: ProgressWatch | None = None,
) -> TrainerFailure | None:
    """Wait for the trainers; None when all succeeded, else the first failure.

    The first status line is logged at once, so even a run that ends at its first
    check (a deadline already spent while starting) shows where it stood."""
    t0 = time.monotonic()
    last_note = t0 - ctx.status_interval
    while True:
        now = time.monotonic()
        if progress is not None:
            progress.poll(now)
        if now - last_note >= ctx.status_interval:
            last_note = now
            n_done = len(sup.exited(trainers))
            log.info(
                "training: %d/%d trainers finished, %.0fs elapsed",
                n_done, len(trainers), now - t0,
                extra=kv(finished=n_done, trainers=len(trainers)),
            )  # fmt: skip
        for name in servers:
            proc = sup.procs[name]
            if proc.poll() is not None:
                raise server_failure(
                    proc, f"{name} died while training ({describe_exit(proc.poll())})"
                )
        done = sup.exited(trainers)
        bad = [p for p in done if p.poll() != 0]
        if bad:
            p = bad[0]
            cause = _termination_log(rundir, p.name)
            log.error(
                "%s failed (%s); stopping the other trainers",
                p.name,
                describe_exit(p.poll()),
                extra=kv(process=p.name),
            )
            text = failure_text(p, f"{p.name} failed ({describe_exit(p.poll())})", cause)
            return TrainerFailure(text, p.poll())
        if len(done) == len(trainers):
            return None
        left = deadline.left()
        if left is not None and left <= 0:
            raise JobFailed(
                f"runPolicy.activeDeadlineSeconds={deadline.seconds:g} exceeded while training"
            )
        time.sleep(ctx.poll_interval)


def _termination_log(rundir: Path, name: str) -> str | None:
    path = rundir / f"{name}.termination-log"
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return root_cause(text[-4000:]) or None


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def missing_module(lines: list[str]) -> str | None:
    """``ModuleNotFoundError`` in a process's last lines, with what installs it: a user
    command (DGL's examples import tqdm and scikit-learn) needing an extra not installed."""
    for line in reversed(lines):
        if m := _NO_MODULE.search(line):
            return (
                f"ModuleNotFoundError: No module named {m.group(1)!r} (not installed for "
                f"{sys.executable}; DistGNN's examples: pip install -e '.[examples]')"
            )
    return None


def root_cause(text: str) -> str:
    """A termination log as one line: ``distgnn train``'s JSON record (``error``,
    ``message``, ``traceback``) becomes ``ERROR: MESSAGE`` (its traceback is in the
    trainer's last log lines); any other text is kept as it is."""
    try:
        rec = json.loads(text)
    except ValueError:
        return text
    if isinstance(rec, dict) and isinstance(rec.get("message"), str):
        return f"{rec.get('error') or 'error'}: {rec['message']}"
    return text


def read_metrics(sup: Supervisor, rundir: Path, plan: LocalPlan) -> dict[str, Any]:
    """Rank 0's metrics file, else its last stdout line when JSON, else a status object."""
    candidates: list[str] = []
    path = rundir / "metrics.json"
    if path.exists():
        candidates.append(path.read_text(encoding="utf-8"))
    lines = sup.procs["trainer-0"].last_lines(1)
    if lines:
        candidates.append(lines[-1])
    for text in candidates:
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    if plan.app is not None:
        raise JobFailed(f"trainer-0 exited 0 but wrote no metrics JSON to {path}")
    return {"job": plan.name, "status": "Succeeded"}


# -- whole runs ------------------------------------------------------------------------


def _rundir(ctx: RunContext, name: str) -> tempfile.TemporaryDirectory[str]:
    """A private (0700) folder for one run's token, ready files, logs and metrics.

    The folder records its owner (pid and start time); folders left by runs that died
    without cleaning up (SIGKILL, power loss) are removed here, at the next start.
    """
    from distgnn.server.sweep import sweep_stale, write_owner

    runs = ctx.workdir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for path in sweep_stale(str(runs), prefix=""):
        log.info("removed the run folder of a dead run", extra=kv(path=path))
    tmp = tempfile.TemporaryDirectory(prefix=f"{name}-", dir=runs, ignore_cleanup_errors=True)
    os.chmod(tmp.name, 0o700)
    write_owner(tmp.name)
    return tmp


def sweep_shm() -> list[str]:
    """Remove shared-memory folders of graph servers that died (SIGKILL, crash)."""
    from distgnn.server.store import default_shm_root
    from distgnn.server.sweep import sweep_stale

    return sweep_stale(default_shm_root())


def _supervisor(ctx: RunContext, plan: LocalPlan) -> Supervisor:
    """Children's output in the run's own log format (JSON lines stay JSON)."""
    return Supervisor(
        ctx.stream,
        grace=ctx.grace,
        json_lines=ctx.resolved_log_format() == "json",
        fields={"job": plan.name},
    )


def job_devices(plan: LocalPlan) -> list[str] | None:
    """Each trainer's ``CUDA_VISIBLE_DEVICES`` for ``trainers.gpus: 1`` (logged), None for
    0; a ConfigError when there is no CUDA device (:mod:`distgnn.local.gpus`)."""
    devices = gpu.trainer_devices(plan.gpus, plan.replicas)
    if devices is not None:
        shared = len(set(devices)) < len(devices)
        log.info(
            "trainers.gpus: one GPU per trainer, round-robin (CUDA_VISIBLE_DEVICES)%s",
            "; more trainers than GPUs: they share them" if shared else "",
            extra=kv(gpus=",".join(f"trainer-{i}={d}" for i, d in enumerate(devices))),
        )
    return devices


def run_job(plan: LocalPlan, ctx: RunContext, deadline: Deadline | None = None) -> dict[str, Any]:
    """Run a DistGNNJob plan; returns the final metrics or raises JobFailed."""
    from distgnn.local.plan import prepare_partitions

    deadline = deadline or Deadline(plan.active_deadline)
    devices = job_devices(plan)  # before anything starts: no GPU is a ConfigError (exit 2)
    ports = PortAllocator()
    started_servers = False
    try:
        with _rundir(ctx, plan.name) as tmp, _supervisor(ctx, plan) as sup:
            rundir = Path(tmp)
            token_path = rundir / "token"
            try:
                if plan.graph_server:
                    entry = ctx.registry.lookup(plan.graph_server)
                    log.info(
                        "attaching to local GraphServer",
                        extra=kv(graphserver=entry.name, servers=",".join(entry.servers)),
                    )
                    servers = Servers(entry.servers, entry.token_file, entry.manifest_url)
                else:
                    manifest_url = prepare_partitions(plan)
                    deadline.check("partitioning")
                    token = write_token(token_path)
                    started_servers = True
                    servers = start_servers(
                        sup,
                        ctx,
                        manifest_url,
                        plan.server_workers,
                        token,
                        rundir,
                        ports,
                        deadline,
                        owner=plan.name,
                        metrics=plan.metrics,
                        gather_threads=server_gather_threads(plan),
                    )
                metrics = run_trainers(sup, ctx, plan, servers, rundir, ports, deadline, devices)
            finally:
                # first thing, before the (up to --grace seconds) stop of the processes
                token_path.unlink(missing_ok=True)
            log.info(
                "job succeeded in %.1fs; stopping processes", time.monotonic() - deadline.t0,
                extra=kv(job=plan.name),
            )  # fmt: skip
    finally:
        if started_servers:
            sweep_shm()
    return metrics


def run_graphserver(plan: LocalPlan, ctx: RunContext) -> None:
    """Partition if needed, start the servers, register them; serve until interrupted."""
    from distgnn.local.plan import prepare_partitions

    ports = PortAllocator()
    registry = ctx.registry
    registry.sweep()
    try:
        existing: GraphServerEntry | None = registry.lookup(plan.name)
    except ConfigError:  # absent or stale: the name is free
        existing = None
    if existing is not None:
        raise ConfigError(
            f"metadata.name: GraphServer {plan.name!r} is already running (pid {existing.pid})"
        )
    manifest_url = prepare_partitions(plan)
    token = write_token(registry.token_path(plan.name))
    registered = False
    try:
        with _rundir(ctx, plan.name) as tmp, _supervisor(ctx, plan) as sup:
            try:
                rundir = Path(tmp)
                servers = start_servers(
                    sup,
                    ctx,
                    manifest_url,
                    plan.server_workers,
                    token,
                    rundir,
                    ports,
                    Deadline(None),
                    owner=plan.name,
                    metrics=plan.metrics,
                )
                entry = GraphServerEntry(
                    name=plan.name,
                    servers=servers.addresses,
                    token_file=str(token),
                    manifest_url=manifest_url,
                    pid=os.getpid(),
                    create_time=process_create_time(os.getpid()),
                )
                path = registry.register(entry)
                registered = True
                log.info(
                    "GraphServer up; stop it with Ctrl-C or SIGTERM",
                    extra=kv(
                        graphserver=plan.name,
                        registry=str(path),
                        servers=",".join(servers.addresses),
                    ),
                )
                _serve_until_stopped(sup, plan.name)
            finally:
                # first thing, before the (up to --grace seconds) stop of the processes
                if registered:
                    registry.remove(plan.name, pid=os.getpid())
                token.unlink(missing_ok=True)
    finally:
        token.unlink(missing_ok=True)
        sweep_shm()


def _serve_until_stopped(sup: Supervisor, name: str) -> None:
    names = list(sup.procs)
    while True:
        dead = sup.exited(names)
        if dead:
            p = dead[0]
            raise server_failure(
                p, f"{p.name} of GraphServer {name!r} died ({describe_exit(p.poll())})"
            )
        time.sleep(0.5)
