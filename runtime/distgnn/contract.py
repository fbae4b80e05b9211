"""The torch-free contract between the operator, local mode and the runtime.

Environment variable names, default ports, DNS names and labels are written
once here. The operator sets them on pods; ``distgnn run`` sets them on local
processes; the runtime reads them. Nothing here imports torch or kopf.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distgnn.errors import ConfigError

API_GROUP = "distgnn.dev"
API_VERSION = "v1alpha1"

# --- ports -----------------------------------------------------------------
SERVER_PORT = 30050
"""Graph-server protocol port (TCP)."""
SERVER_HEALTH_PORT = 30051
"""Graph-server HTTP health port: ``/healthz`` (alive) and ``/readyz`` (partition loaded)."""
RENDEZVOUS_PORT = 29500
"""torch.distributed rendezvous port on trainer rank 0 (``MASTER_PORT``)."""
OPERATOR_HEALTH_PORT = 8080
"""kopf liveness endpoint of the operator."""
SERVER_METRICS_PORT = 30052
"""Graph-server Prometheus ``/metrics`` port (only when metrics are enabled)."""
TRAINER_PROGRESS_PORT = 30060
"""Trainer rank 0's HTTP ``/progress`` (JSON: epoch of total, loss, validation metric)."""
TRAINER_METRICS_PORT = 30061
"""Trainer Prometheus ``/metrics`` port, every rank (only when metrics are enabled)."""
OPERATOR_METRICS_PORT = 8081
"""Operator Prometheus ``/metrics`` port (only when metrics are enabled)."""
METRICS_PATH = "/metrics"
PROGRESS_PATH = "/progress"

# --- environment: graph servers ---------------------------------------------
ENV_MANIFEST = "DISTGNN_MANIFEST"
"""URL of the partition manifest (``NAME.json``), any fsspec URL."""
ENV_PART_ID = "DISTGNN_PART_ID"
"""Partition served by this server; in a StatefulSet the pod ordinal is used when unset."""
ENV_POD_NAME = "POD_NAME"
"""Downward-API pod name; ``<sts>-<ordinal>`` gives the partition when ENV_PART_ID is unset."""
ENV_SERVER_PORT = "DISTGNN_SERVER_PORT"
ENV_SERVER_BIND = "DISTGNN_SERVER_BIND"
ENV_HEALTH_PORT = "DISTGNN_HEALTH_PORT"
ENV_SERVER_WORKERS = "DISTGNN_SERVER_WORKERS"
ENV_READY_FILE = "DISTGNN_READY_FILE"
"""Optional path a server creates once its partition is loaded (for exec probes / local mode)."""

# --- environment: graph-server limits (docs/servers.md, "Limits and timeouts") ---
# Unset: derived from the server's memory and file-descriptor limit at start.
# Byte sizes accept a K/M/G/T suffix (powers of 1024); times are seconds.
ENV_SERVER_MAX_TENSORS = "DISTGNN_SERVER_MAX_TENSORS"
"""Named tensors created at run time (optimizer state included) per server."""
ENV_SERVER_MAX_TENSOR_BYTES = "DISTGNN_SERVER_MAX_TENSOR_BYTES"
"""Total bytes of the tensors created at run time per server."""
ENV_SERVER_MAX_REQUEST_BYTES = "DISTGNN_SERVER_MAX_REQUEST_BYTES"
"""Bytes of one request frame's buffers (IDs, values)."""
ENV_SERVER_MAX_IDS = "DISTGNN_SERVER_MAX_IDS"
"""IDs (rows, seeds, edges, nodes) in one request."""
ENV_SERVER_MAX_REPLY_BYTES = "DISTGNN_SERVER_MAX_REPLY_BYTES"
"""Bytes of one answer (a PULL's rows, a sampling result)."""
ENV_SERVER_MAX_SAMPLE_EDGES = "DISTGNN_SERVER_MAX_SAMPLE_EDGES"
"""Edges one SAMPLE_NEIGHBORS request may touch (seeds x fanout, or all in-edges)."""
ENV_SERVER_MAX_CONNECTIONS = "DISTGNN_SERVER_MAX_CONNECTIONS"
"""Open connections per worker process (beyond: an ERROR ``busy`` frame, then close)."""
ENV_SERVER_IDLE_TIMEOUT = "DISTGNN_SERVER_IDLE_TIMEOUT"
"""An authenticated connection with no request for this long is closed."""
ENV_SERVER_SEND_TIMEOUT = "DISTGNN_SERVER_SEND_TIMEOUT"
"""An answer that makes no progress for this long (a client that does not read) is dropped."""
ENV_HEALTH_MAX_CONNECTIONS = "DISTGNN_HEALTH_MAX_CONNECTIONS"
"""Concurrent connections on the health port (beyond: closed at once)."""
ENV_HEALTH_TIMEOUT = "DISTGNN_HEALTH_TIMEOUT"
"""Time a health client has to send its whole HTTP request."""

# --- environment: shared by servers and trainers ----------------------------
ENV_TOKEN = "DISTGNN_TOKEN"
"""The per-job token, given inline (local mode). Prefer ENV_TOKEN_FILE."""
ENV_TOKEN_FILE = "DISTGNN_TOKEN_FILE"
"""Path of a file holding the per-job token (a mounted Secret in Kubernetes)."""
ENV_REQUEST_TIMEOUT = "DISTGNN_REQUEST_TIMEOUT"
"""Client-side timeout in seconds for one request (default 60)."""
ENV_CONNECT_TIMEOUT = "DISTGNN_CONNECT_TIMEOUT"
"""How long a client keeps retrying to connect to a starting server (default 120 s)."""

# --- environment: trainers ----------------------------------------------------
ENV_SERVERS = "DISTGNN_SERVERS"
"""Comma-separated ``host:port`` of the graph servers, in partition order."""
ENV_LOCAL_PARTITION = "DISTGNN_LOCAL_PARTITION"
"""Co-located trainer (``trainers.colocate``): the partition of the server beside it."""
ENV_LOCAL_STORE = "DISTGNN_LOCAL_STORE"
"""Co-located trainer: that server's store folder, or the folder it creates it in
(its shared-memory ``--shm-dir``); local rows are read from there, read-only."""
ENV_LOCAL_SAMPLING = "DISTGNN_LOCAL_SAMPLING"
"""Co-located trainer: sample the local partition's seeds in-process from the server's
shared-memory graph (``1``, default) or send them to the server like the others (``0``)."""
ENV_NATIVE = "DISTGNN_NATIVE"
"""Servers and trainers: use the C kernels of sampling, relabelling and block CSRs when
built (``1``, default) or their NumPy reference (``0``); see :mod:`distgnn.native`."""
ENV_FEATURE_CACHE_MB = "DISTGNN_FEATURE_CACHE_MB"
"""Megabytes of hot ``DistTensor`` rows each trainer process caches (default 0: none);
writes by any trainer invalidate them (:mod:`distgnn.distributed.featcache`)."""
ENV_TRAINERS_PER_POD = "DISTGNN_TRAINERS_PER_POD"
"""Co-located trainers on Kubernetes: trainer containers per pod (rank = pod index * this
+ LOCAL_RANK)."""
ENV_NUM_SAMPLERS = "DISTGNN_NUM_SAMPLERS"
ENV_PREFETCH = "DISTGNN_PREFETCH"
"""Built-in apps: pull the next batch's features in a thread while this one trains:
``auto`` (default: only when the trainer has a CPU beyond its torch threads), ``on``,
``off``."""
ENV_DEFER_ALLREDUCE = "DISTGNN_DEFER_ALLREDUCE"
"""Built-in apps: all-reduce the gradients after the backward and make the next batch
while waiting for the other trainers (:mod:`distgnn.train.gradsync`): ``auto`` (default:
with batches made in turn), ``on``, ``off`` (DDP's all-reduce inside the backward)."""
ENV_METRICS_FILE = "DISTGNN_METRICS_FILE"
"""Where rank 0 writes the final metrics JSON (local mode)."""
ENV_TERMINATION_LOG = "DISTGNN_TERMINATION_LOG"
"""Where a failing or finishing trainer writes its root cause / metrics (Kubernetes:
``/dev/termination-log``, which becomes the container's termination message)."""
ENV_CHECKPOINT_URL = "DISTGNN_CHECKPOINT_URL"
ENV_JOB_NAME = "DISTGNN_JOB_NAME"
ENV_LOG_FORMAT = "DISTGNN_LOG_FORMAT"
"""``text`` (default on a terminal) or ``json``."""
ENV_LOG_LEVEL = "DISTGNN_LOG_LEVEL"
ENV_METRICS_PORT = "DISTGNN_METRICS_PORT"
"""Serve Prometheus metrics on this port (servers, trainers); unset or empty: off."""
ENV_PROGRESS_PORT = "DISTGNN_PROGRESS_PORT"
"""Port of trainer rank 0's ``/progress`` endpoint (default TRAINER_PROGRESS_PORT; ``off``)."""
ENV_HTTP_BIND = "DISTGNN_HTTP_BIND"
"""Bind address of a trainer's /progress and /metrics endpoints (default 0.0.0.0)."""
ENV_METRICS_LINGER = "DISTGNN_METRICS_LINGER_SECONDS"
"""Seconds a finished trainer keeps ``/metrics`` up so a scraper sees the final counts."""
# torch.distributed's own names, set by the operator and by local mode.
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
"""Trainers sharing this machine's (or container's) CPUs (torchrun's name; default 1)."""
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
"""Set by Kubernetes on pods of an Indexed Job; used as RANK when RANK is unset."""

# --- environment: object storage (standard names, read by s3fs/botocore) ----
ENV_S3_ENDPOINT = "AWS_ENDPOINT_URL_S3"
ENV_S3_ENDPOINT_GENERIC = "AWS_ENDPOINT_URL"
ENV_S3_KEY = "AWS_ACCESS_KEY_ID"
ENV_S3_SECRET = "AWS_SECRET_ACCESS_KEY"
ENV_S3_REGION = "AWS_DEFAULT_REGION"

# --- labels -------------------------------------------------------------------
LABEL_PREFIX = "distgnn.dev"
LABEL_JOB = f"{LABEL_PREFIX}/job-name"
LABEL_GRAPHSERVER = f"{LABEL_PREFIX}/graphserver-name"
LABEL_ROLE = f"{LABEL_PREFIX}/role"
"""One of ROLE_* below."""
ROLE_PARTITIONER = "partitioner"
ROLE_SERVER = "server"
ROLE_TRAINER = "trainer"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "distgnn-operator"

# --- which controller runs a DistGNNJob (spec.managedBy) -----------------------
CONTROLLER_NAME = f"{API_GROUP}/operator"
"""``spec.managedBy`` naming this operator (as does leaving it out). Any other value names
the controller that runs the job instead (Kueue's MultiKueue: ``kueue.x-k8s.io/multikueue``,
whose adapter for custom jobs reads ``spec.managedBy``); this operator and ``distgnn run``
then leave it alone, like a batch Job's controller."""


def job_manager(spec: Mapping[str, Any] | None) -> str:
    """The controller of a DistGNNJob by its raw ``spec``: ``spec.managedBy``, or
    :data:`CONTROLLER_NAME` when it is absent (also for a malformed spec)."""
    value = spec.get("managedBy") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) and value else CONTROLLER_NAME


def managed_elsewhere(spec: Mapping[str, Any] | None) -> str | None:
    """The other controller a DistGNNJob's raw ``spec`` names, or None when it is ours."""
    who = job_manager(spec)
    return None if who == CONTROLLER_NAME else who


# --- Prometheus scrape annotations (set on pods when metrics are enabled) --------
ANN_SCRAPE = "prometheus.io/scrape"
ANN_SCRAPE_PORT = "prometheus.io/port"
ANN_SCRAPE_PATH = "prometheus.io/path"


# --- exit statuses ---------------------------------------------------------------
EXIT_CONFIG_ERROR = 2
"""A user's mistake: the CLI printed one ``distgnn CMD: error: ...`` line. From a trainer
(``distgnn train``) it means a mistake in the job's configuration only (see
:func:`distgnn.train.cli.error_status`): the operator and ``distgnn run`` fail the job at
once instead of restarting the trainer group, as retrying cannot help. From the
partitioner (``distgnn partition``) likewise: the operator's partitioning Job fails at once
on it (a ``podFailurePolicy`` rule) instead of using up its ``backoffLimit``."""
EXIT_FAILURE = 1
"""Any other failure; a trainer's is retried up to ``runPolicy.backoffLimit`` times."""


def is_config_error_exit(code: object) -> bool:
    """Whether a trainer's or the partitioner's exit status means a configuration mistake
    (never retried)."""
    return isinstance(code, int) and not isinstance(code, bool) and code == EXIT_CONFIG_ERROR


TERMINATION_LOG_PATH = "/dev/termination-log"
TOKEN_MOUNT_DIR = "/var/run/distgnn/token"
TOKEN_KEY = "token"


def server_dns_name(sts_name: str, ordinal: int, service: str, namespace: str) -> str:
    """Stable DNS name of one partition server behind its headless Service."""
    return f"{sts_name}-{ordinal}.{service}.{namespace}.svc"


def parse_servers(value: str) -> list[tuple[str, int]]:
    """Parse ``host:port,...`` (ENV_SERVERS) into pairs; ValueError names the bad item."""
    out: list[tuple[str, int]] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{ENV_SERVERS}: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"{ENV_SERVERS} is empty")
    return out


def format_servers(addrs: list[tuple[str, int]]) -> str:
    """Inverse of :func:`parse_servers`."""
    return ",".join(f"{h}:{p}" for h, p in addrs)


@dataclass(frozen=True)
class TrainerEnv:
    """What a trainer process learns from its environment."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TrainerEnv:
        e = os.environ if env is None else env
        return cls(
            rank=_int(ENV_RANK, trainer_rank(e) or "0"),
            world_size=_int(ENV_WORLD_SIZE, e.get(ENV_WORLD_SIZE) or "1"),
            master_addr=e.get(ENV_MASTER_ADDR, "127.0.0.1"),
            master_port=_int(ENV_MASTER_PORT, e.get(ENV_MASTER_PORT) or str(RENDEZVOUS_PORT)),
        )


def _int(name: str, value: str) -> int:
    """``value`` of variable ``name`` as an int; ConfigError naming it otherwise."""
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value[:40]!r} is not an integer") from None


def trainer_rank(env: Mapping[str, str]) -> str | None:
    """RANK; else, in an Indexed Job's pod, ``JOB_COMPLETION_INDEX * k + LOCAL_RANK`` with
    ``k`` = ENV_TRAINERS_PER_POD (co-located trainers: k trainer containers per pod)."""
    if env.get(ENV_RANK):
        return env[ENV_RANK]
    index = env.get(ENV_JOB_COMPLETION_INDEX)
    if not index:
        return None
    per_pod = env.get(ENV_TRAINERS_PER_POD)
    if not per_pod:
        return index
    rank = _int(ENV_JOB_COMPLETION_INDEX, index) * _int(ENV_TRAINERS_PER_POD, per_pod)
    return str(rank + _int(ENV_LOCAL_RANK, env.get(ENV_LOCAL_RANK) or "0"))


def read_token(env: Mapping[str, str] | None = None) -> str | None:
    """The per-job token from ENV_TOKEN_FILE (preferred) or ENV_TOKEN; None if neither is set."""
    e = os.environ if env is None else env
    path = e.get(ENV_TOKEN_FILE)
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return e.get(ENV_TOKEN) or None


def optional_port(
    name: str, env: Mapping[str, str] | None = None, default: int | None = None
) -> int | None:
    """Port in variable ``name``: ``default`` when unset or empty, None when ``off``
    (0 = any free port); ValueError names the variable."""
    e = os.environ if env is None else env
    v = (e.get(name) or "").strip()
    if not v:
        return default
    if v.lower() == "off":
        return None
    if not v.isdigit() or not 0 <= int(v) < 65536:
        raise ValueError(f"{name}={v!r} is not a port number (or 'off')")
    return int(v)
