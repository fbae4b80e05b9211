"""The operator's Prometheus metrics (``--metrics-port`` / ``DISTGNN_METRICS_PORT``).

One :class:`OperatorMetrics` per operator process, with its own registry: reconcile
passes by kind and outcome, their duration, resources by phase (from the last pass over
each resource), Kubernetes API errors by status code, and the progress reads of
running jobs. The handlers, the API client and the progress reader report to it through
small hooks; without ``--metrics-port`` none is created and the hooks do nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from distgnn.api.types import GRAPHSERVER_PHASES, JOB_PHASES

KINDS = {"DistGNNJob": JOB_PHASES, "GraphServer": GRAPHSERVER_PHASES}
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Phases(Collector):
    """``distgnn_operator_resources{kind, phase}`` from the last phase seen per resource."""

    def __init__(self) -> None:
        self.phase: dict[tuple[str, str, str], str] = {}

    def collect(self) -> Iterator[Any]:
        g = GaugeMetricFamily(
            "distgnn_operator_resources",
            "DistGNNJobs and GraphServers by phase (as of their last reconcile).",
            labels=["kind", "phase"],
        )
        counts: dict[tuple[str, str], int] = {}
        for (kind, _, _), phase in list(self.phase.items()):
            counts[(kind, phase)] = counts.get((kind, phase), 0) + 1
        for kind, phases in KINDS.items():
            for phase in phases:
                g.add_metric([kind, phase], float(counts.get((kind, phase), 0)))
        yield g


class OperatorMetrics:
    """The operator's metrics and the hooks that update them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reconciles = Counter(
            "distgnn_operator_reconciles",
            "Reconcile passes by kind and outcome (ok, error: an API error, retried).",
            ["kind", "outcome"],
            registry=r,
        )
        self.duration = Histogram(
            "distgnn_operator_reconcile_duration_seconds",
            "Duration of one reconcile pass.",
            ["kind"],
            buckets=BUCKETS,
            registry=r,
        )
        self.api_errors = Counter(
            "distgnn_operator_api_errors",
            "Kubernetes API answers that were errors, by HTTP status (0: no answer); "
            "404 and 409, which the operator expects, are not counted.",
            ["code"],
            registry=r,
        )
        self.progress_reads = Counter(
            "distgnn_operator_progress_reads",
            "Reads of rank 0's /progress by outcome (changed: status written, unchanged, "
            "unavailable: no running rank 0 or no answer).",
            ["outcome"],
            registry=r,
        )
        self.phases = _Phases()
        r.register(self.phases)
        for kind in KINDS:
            for outcome in ("ok", "error"):
                self.reconciles.labels(kind, outcome)
        for outcome in ("changed", "unchanged", "unavailable"):
            self.progress_reads.labels(outcome)

    def reconciled(self, kind: str, ns: str, name: str, seconds: float, phase: str | None) -> None:
        self.reconciles.labels(kind, "ok").inc()
        self.duration.labels(kind).observe(seconds)
        if phase:
            self.phases.phase[(kind, ns, name)] = phase

    def failed(self, kind: str, seconds: float) -> None:
        self.reconciles.labels(kind, "error").inc()
        self.duration.labels(kind).observe(seconds)

    def gone(self, kind: str, ns: str, name: str) -> None:
        self.phases.phase.pop((kind, ns, name), None)

    def api_error(self, status: int) -> None:
        if status not in (404, 409):
            self.api_errors.labels(str(status)).inc()
