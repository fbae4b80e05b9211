"""``distgnn-operator``: run the kopf operator with DistGNN's settings.

Namespaces: ``--namespace`` (repeatable) or ``DISTGNN_WATCH_NAMESPACES`` (comma-separated);
all namespaces when neither is given. ``DISTGNN_RUNTIME_IMAGE`` sets the default image of
the pods, ``DISTGNN_IMAGE_PULL_SECRETS`` (``--image-pull-secret``) the Secrets they pull
images with, ``DISTGNN_PARTITIONS_URL`` the default partition output URL. ``--metrics-port``
(``DISTGNN_METRICS_PORT``) serves Prometheus metrics (default off).

HA (``--peering NAME``): replicas peer through kopf, and kopf pauses a replica that sees a
live peer of higher *or equal* priority. Each replica therefore takes a distinct priority,
its negated start time in microseconds unless ``--peering-priority`` /
``DISTGNN_PEERING_PRIORITY`` gives one: the longest-running replica is active, a new or
restarted one stands by (never preempts it). A standby takes over when the active replica's
peering record goes: at once on a clean shutdown, ``--peering-lifetime`` seconds after a crash.

Shutdown: after SIGTERM kopf stops its watches, runs the clean-up handlers and exits;
should any step hang, ``--exit-timeout`` (``DISTGNN_EXIT_TIMEOUT``, default 20 s; kopf's
own default is 10 minutes) after the signal the process kills itself. The chart keeps it
below the pod's ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Sequence

import kopf

from distgnn import contract
from distgnn import log as dlog
from distgnn.api.fields import DNS_SUBDOMAIN
from distgnn.metrics_http import serve
from distgnn_operator.desired import DesiredContext
from distgnn_operator.handlers import HandlerSettings, make_settings, register
from distgnn_operator.kube import KubeApi
from distgnn_operator.logs import compact_kopf_records, settings_summary
from distgnn_operator.metrics import OperatorMetrics
from distgnn_operator.reconcile import GRAPHSERVER_WAIT_SECONDS, OperatorContext

ENV_NAMESPACES = "DISTGNN_WATCH_NAMESPACES"
ENV_RUNTIME_IMAGE = "DISTGNN_RUNTIME_IMAGE"
ENV_PARTITIONS_URL = "DISTGNN_PARTITIONS_URL"
ENV_RESYNC = "DISTGNN_RESYNC_SECONDS"
ENV_PROGRESS = "DISTGNN_PROGRESS_SECONDS"
ENV_PEERING_PRIORITY = "DISTGNN_PEERING_PRIORITY"
ENV_PEERING_LIFETIME = "DISTGNN_PEERING_LIFETIME"
ENV_EXIT_TIMEOUT = "DISTGNN_EXIT_TIMEOUT"
ENV_GRAPHSERVER_WAIT = "DISTGNN_GRAPHSERVER_WAIT_SECONDS"
ENV_IMAGE_PULL_SECRETS = "DISTGNN_IMAGE_PULL_SECRETS"
ENV_KUEUE = "DISTGNN_KUEUE"
EXIT_TIMEOUT_SECONDS = 20.0
"""Default ``--exit-timeout``: under Kubernetes' default 30 s grace period."""


def start_priority() -> int:
    """The peering priority of a replica starting now: earlier starts rank higher."""
    return -(time.time_ns() // 1000)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        raise SystemExit(f"distgnn-operator: {name}: must be an integer (got {raw!r})") from None


def _seconds(raw: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds (got {raw!r})")
    return value


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        return _seconds(raw) if raw else default
    except argparse.ArgumentTypeError as e:
        raise SystemExit(f"distgnn-operator: {name}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="distgnn-operator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="namespace to watch (repeatable; default: all)",
    )
    p.add_argument("--peering", default=None, help="kopf peering name (HA); default standalone")
    p.add_argument(
        "--peering-priority",
        type=int,
        default=_env_int(ENV_PEERING_PRIORITY),
        help="peering priority; the highest live replica is active "
        "(default: minus the start time in microseconds, so the oldest replica)",
    )
    p.add_argument(
        "--peering-lifetime",
        type=int,
        default=_env_int(ENV_PEERING_LIFETIME) or 60,
        help="seconds a replica's peering record stays valid without a keep-alive: "
        "how long a crashed active replica blocks the standby ones (default 60)",
    )
    p.add_argument(
        "--liveness",
        default=f"http://0.0.0.0:{contract.OPERATOR_HEALTH_PORT}/healthz",
        help="liveness endpoint URL ('' to disable)",
    )
    p.add_argument("--resync-seconds", type=float, default=float(os.environ.get(ENV_RESYNC, "30")))
    p.add_argument(
        "--runtime-image", default=os.environ.get(ENV_RUNTIME_IMAGE) or DesiredContext.runtime_image
    )
    p.add_argument("--partitions-url", default=os.environ.get(ENV_PARTITIONS_URL) or None)
    p.add_argument(
        "--image-pull-secret",
        dest="image_pull_secrets",
        action="append",
        type=_secret_name,
        default=None,
        metavar="NAME",
        help="Secret every pod the operator creates pulls its images with, unless its "
        "podTemplate.imagePullSecrets says otherwise (repeatable; env "
        f"{ENV_IMAGE_PULL_SECRETS}, comma-separated; the chart's runtimeImage.pullSecrets)",
    )
    p.add_argument(
        "--progress-seconds",
        type=float,
        default=float(os.environ.get(ENV_PROGRESS, "5")),
        help="how often running jobs' rank-0 progress is read (default 5)",
    )
    p.add_argument(
        "--exit-timeout",
        type=_seconds,
        default=_env_seconds(ENV_EXIT_TIMEOUT, EXIT_TIMEOUT_SECONDS),
        help="seconds after SIGTERM/SIGINT after which a shutdown that has not finished is "
        f"ended by SIGKILL (env {ENV_EXIT_TIMEOUT}; default {EXIT_TIMEOUT_SECONDS:g}; "
        "keep it below the pod's terminationGracePeriodSeconds)",
    )
    p.add_argument(
        "--graphserver-wait-seconds",
        type=_seconds,
        default=_env_seconds(ENV_GRAPHSERVER_WAIT, GRAPHSERVER_WAIT_SECONDS),
        help="how long a job referencing a GraphServer that does not exist waits (Pending) "
        f"before it fails (env {ENV_GRAPHSERVER_WAIT}; default {GRAPHSERVER_WAIT_SECONDS:g})",
    )
    p.add_argument(
        "--kueue",
        action="store_true",
        default=os.environ.get(ENV_KUEUE, "").strip().lower() in ("1", "true", "yes"),
        help="Kueue integration: a DistGNNJob labelled kueue.x-k8s.io/queue-name gets a "
        "Workload and stays suspended until Kueue admits it (env "
        f"{ENV_KUEUE}=1; the chart's kueue.enabled)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=_metrics_port(),
        help=f"serve Prometheus /metrics on this port (env {contract.ENV_METRICS_PORT}; "
        f"default off; the chart uses {contract.OPERATOR_METRICS_PORT})",
    )
    return p


def _secret_name(v: str) -> str:
    if not re.fullmatch(DNS_SUBDOMAIN, v) or len(v) > 253:
        raise argparse.ArgumentTypeError(f"{v!r} is not a Secret name (a DNS subdomain)")
    return v


def image_pull_secrets(args: argparse.Namespace) -> tuple[str, ...]:
    """``--image-pull-secret`` names, else those of ``DISTGNN_IMAGE_PULL_SECRETS``."""
    if args.image_pull_secrets is not None:
        return tuple(args.image_pull_secrets)
    names = [n.strip() for n in os.environ.get(ENV_IMAGE_PULL_SECRETS, "").split(",")]
    try:
        return tuple(_secret_name(n) for n in names if n)
    except argparse.ArgumentTypeError as e:
        raise SystemExit(f"distgnn-operator: {ENV_IMAGE_PULL_SECRETS}: {e}") from None


def _metrics_port() -> int | None:
    try:
        return contract.optional_port(contract.ENV_METRICS_PORT)
    except ValueError as e:
        raise SystemExit(f"distgnn-operator: {e}") from None


def namespaces(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    if args.namespace:
        return list(args.namespace)
    return [n.strip() for n in env.get(ENV_NAMESPACES, "").split(",") if n.strip()]


def setup(
    args: argparse.Namespace,
) -> tuple[kopf.OperatorRegistry, kopf.OperatorSettings, OperatorContext]:
    """Registry, settings and context for ``args`` (also used by the tests)."""
    hs = HandlerSettings(
        resync_seconds=args.resync_seconds,
        peering=args.peering,
        progress_seconds=args.progress_seconds,
        namespaces=tuple(namespaces(args, dict(os.environ))),
        kueue=args.kueue,
    )
    metrics = OperatorMetrics() if args.metrics_port is not None else None
    api = KubeApi()
    if metrics is not None:
        api.on_error = metrics.api_error
    octx = OperatorContext(
        api=api,
        desired=DesiredContext(
            runtime_image=args.runtime_image,
            partitions_url=args.partitions_url,
            image_pull_secrets=image_pull_secrets(args),
        ),
        metrics=metrics,
        graphserver_wait_seconds=args.graphserver_wait_seconds,
        kueue=args.kueue,
    )
    registry = kopf.OperatorRegistry()
    register(registry, octx, hs)
    settings = make_settings(hs)
    prio = args.peering_priority
    settings.peering.priority = start_priority() if prio is None else prio
    settings.peering.lifetime = args.peering_lifetime
    settings.process.ultimate_exiting_timeout = args.exit_timeout
    return registry, settings, octx


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dlog.setup()
    compact_kopf_records()
    registry, settings, octx = setup(args)
    if octx.metrics is not None and args.metrics_port is not None:
        serve(octx.metrics.registry, args.metrics_port)
    ns = namespaces(args, dict(os.environ))
    logging.getLogger("distgnn_operator").info(
        "starting",
        extra={
            "fields": settings_summary(
                settings,
                namespaces=",".join(ns) or "*",
                resync_s=args.resync_seconds,
                runtime_image=args.runtime_image,
                image_pull_secrets=",".join(image_pull_secrets(args)),
                partitions_url=args.partitions_url,
                metrics_port=args.metrics_port,
                graphserver_wait_s=args.graphserver_wait_seconds,
                kueue=args.kueue,
            )
        },
    )
    kopf.run(
        registry=registry,
        settings=settings,
        standalone=args.peering is None,
        peering_name=args.peering,
        clusterwide=not ns,
        namespaces=ns,
        liveness_endpoint=args.liveness or None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
