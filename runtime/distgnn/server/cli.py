"""``distgnn serve``: run the graph server of one partition."""

from __future__ import annotations

import argparse
import os
import re
import signal
from collections.abc import Mapping

from distgnn import contract
from distgnn import log as dlog
from distgnn.errors import ConfigError

HELP = "serve one partition (features, writes, sampling) to trainers over TCP"


def error_status(e: BaseException) -> int:
    """The exit status of a DistGNN error: :data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2)
    for what a restart cannot cure: an option or variable, a partition manifest or file
    that is malformed or missing, object storage with no credentials at all or without the
    bucket or object named or with one too large or not a regular file, a port held by
    another process (the operator fails a job whose server exits 2 at once);
    :data:`~distgnn.contract.EXIT_FAILURE` (1) for the rest
    (object storage unreachable or refusing the credentials, a worker that cannot start),
    which the kubelet's restart of the container can cure."""
    from distgnn import storage
    from distgnn.errors import GraphFormatError, ManifestError, PartitionDataError
    from distgnn.server.server import PortUnavailable

    permanent = (ConfigError, ManifestError, PartitionDataError, GraphFormatError, PortUnavailable)
    return storage.exit_status(e, permanent)


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    v = env.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ConfigError(f"{name}={v!r} is not an integer") from None


def part_id_from_env(env: Mapping[str, str]) -> int | None:
    """``DISTGNN_PART_ID``, else the StatefulSet ordinal at the end of ``POD_NAME``."""
    v = env.get(contract.ENV_PART_ID)
    if v:
        return _env_int(env, contract.ENV_PART_ID, 0)
    pod = env.get(contract.ENV_POD_NAME, "")
    m = re.search(r"-(\d+)$", pod)
    return int(m.group(1)) if m else None


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ
    p.add_argument(
        "--manifest",
        default=env.get(contract.ENV_MANIFEST),
        help=f"partition manifest URL (env {contract.ENV_MANIFEST})",
    )
    p.add_argument(
        "--part-id",
        type=int,
        default=None,
        help=f"partition to serve (env {contract.ENV_PART_ID} or the POD_NAME ordinal)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"protocol port, 0 = any (env {contract.ENV_SERVER_PORT}, "
        f"default {contract.SERVER_PORT})",
    )
    p.add_argument(
        "--bind",
        default=None,
        help=f"bind address (env {contract.ENV_SERVER_BIND}, default 0.0.0.0)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=None,
        help=f"HTTP /healthz and /readyz port (env {contract.ENV_HEALTH_PORT}, "
        f"default {contract.SERVER_HEALTH_PORT})",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"worker processes sharing one copy of the data "
        f"(env {contract.ENV_SERVER_WORKERS}, default 1)",
    )
    p.add_argument(
        "--token-file",
        default=None,
        help=f"file holding the job token (env {contract.ENV_TOKEN_FILE} or {contract.ENV_TOKEN})",
    )
    p.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="accept clients without a token (development only)",
    )
    p.add_argument(
        "--ready-file",
        default=None,
        help=f"file written (JSON: ports, pid) once ready (env {contract.ENV_READY_FILE})",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help=f"serve Prometheus /metrics on this port, 0 = any (env {contract.ENV_METRICS_PORT}; "
        f"default off; Kubernetes: {contract.SERVER_METRICS_PORT})",
    )
    p.add_argument("--shm-dir", default=None, help="tmpfs folder for shared memory (/dev/shm)")
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds in-flight requests get after SIGTERM (default 30)",
    )


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> object:
    """Build the ServeConfig from options, falling back to the contract environment."""
    from distgnn.server.limits import ENV as LIMIT_ENV
    from distgnn.server.server import ServeConfig
    from distgnn.server.store import check_shm_root, default_shm_root

    limit_vars = set(LIMIT_ENV.values())

    e = os.environ if env is None else env
    if not args.manifest:
        raise ConfigError(f"--manifest (or {contract.ENV_MANIFEST}) is required")
    part = args.part_id if args.part_id is not None else part_id_from_env(e)
    if part is None:
        raise ConfigError(
            f"--part-id (or {contract.ENV_PART_ID}, or a POD_NAME ending in -ORDINAL) is required"
        )
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token: str | None = f.read().strip()
        except OSError as err:
            raise ConfigError(f"--token-file {args.token_file}: {err}") from err
    else:
        try:
            token = contract.read_token(e)
        except OSError as err:
            raise ConfigError(f"{contract.ENV_TOKEN_FILE}: {err}") from err
    if token is not None and not token and not args.insecure_no_token:
        raise ConfigError("the token is empty")
    try:
        metrics_port = (
            args.metrics_port
            if args.metrics_port is not None
            else contract.optional_port(contract.ENV_METRICS_PORT, e)
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return ServeConfig(
        manifest=args.manifest,
        part_id=part,
        port=args.port
        if args.port is not None
        else _env_int(e, contract.ENV_SERVER_PORT, contract.SERVER_PORT),
        bind=args.bind or e.get(contract.ENV_SERVER_BIND) or "0.0.0.0",
        health_port=args.health_port
        if args.health_port is not None
        else _env_int(e, contract.ENV_HEALTH_PORT, contract.SERVER_HEALTH_PORT),
        workers=args.workers
        if args.workers is not None
        else _env_int(e, contract.ENV_SERVER_WORKERS, 1),
        token=token,
        insecure=bool(args.insecure_no_token),
        ready_file=args.ready_file or e.get(contract.ENV_READY_FILE) or None,
        shm_dir=check_shm_root(args.shm_dir) if args.shm_dir else default_shm_root(),
        drain_timeout=args.drain_timeout,
        limit_env={k: v for k, v in e.items() if k in limit_vars},
        metrics_port=metrics_port,
    )


def main(args: argparse.Namespace) -> int:
    from distgnn.server.server import GraphServer, ServeConfig

    cfg = config_from_args(args)
    assert isinstance(cfg, ServeConfig)
    dlog.add_context(partition=cfg.part_id)
    server = GraphServer(cfg)
    signal.signal(signal.SIGTERM, server.request_stop)
    signal.signal(signal.SIGINT, server.request_stop)
    return server.run()
