"""``distgnn-operator``: run the kopf operator with DistGNN's settings.

Namespaces: ``--namespace`` (repeatable) or ``DISTGNN_WATCH_NAMESPACES`` (comma-separated);
all namespaces when neither is given. ``DISTGNN_RUNTIME_IMAGE`` sets the default image of
the pods, ``DISTGNN_PARTITIONS_URL`` the default partition output URL. ``--metrics-port``
(``DISTGNN_METRICS_PORT``) serves Prometheus metrics (default off).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import kopf

from distgnn import contract
from distgnn import log as dlog
from distgnn.metrics_http import serve
from distgnn_operator.desired import DesiredContext
from distgnn_operator.handlers import HandlerSettings, make_settings, register
from distgnn_operator.kube import KubeApi
from distgnn_operator.metrics import OperatorMetrics
from distgnn_operator.reconcile import OperatorContext

ENV_NAMESPACES = "DISTGNN_WATCH_NAMESPACES"
ENV_RUNTIME_IMAGE = "DISTGNN_RUNTIME_IMAGE"
ENV_PARTITIONS_URL = "DISTGNN_PARTITIONS_URL"
ENV_RESYNC = "DISTGNN_RESYNC_SECONDS"
ENV_PROGRESS = "DISTGNN_PROGRESS_SECONDS"


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
        "--progress-seconds",
        type=float,
        default=float(os.environ.get(ENV_PROGRESS, "5")),
        help="how often running jobs' rank-0 progress is read (default 5)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=_metrics_port(),
        help=f"serve Prometheus /metrics on this port (env {contract.ENV_METRICS_PORT}; "
        f"default off; the chart uses {contract.OPERATOR_METRICS_PORT})",
    )
    return p


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
    )
    metrics = OperatorMetrics() if args.metrics_port is not None else None
    api = KubeApi()
    if metrics is not None:
        api.on_error = metrics.api_error
    octx = OperatorContext(
        api=api,
        desired=DesiredContext(
            runtime_image=args.runtime_image, partitions_url=args.partitions_url
        ),
        metrics=metrics,
    )
    registry = kopf.OperatorRegistry()
    register(registry, octx, hs)
    return registry, make_settings(hs), octx


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dlog.setup()
    registry, settings, octx = setup(args)
    if octx.metrics is not None and args.metrics_port is not None:
        serve(octx.metrics.registry, args.metrics_port)
    ns = namespaces(args, dict(os.environ))
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
