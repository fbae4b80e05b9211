"""Observability pieces of the desired pods: endpoint ports, scrape annotations, the
NetworkPolicy rule letting a scraper reach the servers. Pure functions on plain dicts.

Every trainer pod declares rank 0's ``progress`` port (the operator reads the port of the
rank-0 pod by that name); with ``spec.monitoring.metrics`` the server and trainer pods
also get a ``metrics`` port, ``DISTGNN_METRICS_PORT`` and the usual
``prometheus.io/scrape|port|path`` annotations (the chart's PodMonitor selects the
``metrics`` port by name).
"""

from __future__ import annotations

from typing import Any

from distgnn import contract

PROGRESS_PORT_NAME = "progress"
METRICS_PORT_NAME = "metrics"
OPERATOR_POD_LABELS = {
    "app.kubernetes.io/part-of": "distgnn",
    "app.kubernetes.io/component": "operator",
}
"""Labels of the chart's operator pods (whatever the release or name override): the peer
allowed to read trainers' ``/progress`` where a NetworkPolicy guards the trainer pods."""


def _port(name: str, number: int) -> dict[str, Any]:
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def scrape_annotations(pmeta: dict[str, Any], port: int) -> None:
    """The conventional Prometheus scrape annotations on a pod template's metadata."""
    pmeta["annotations"] = {
        **pmeta.get("annotations", {}),
        contract.ANN_SCRAPE: "true",
        contract.ANN_SCRAPE_PORT: str(port),
        contract.ANN_SCRAPE_PATH: contract.METRICS_PATH,
    }


def server_metrics(container: dict[str, Any], pmeta: dict[str, Any], enabled: bool) -> None:
    """A server container's ``metrics`` port and its pod's scrape annotations."""
    if not enabled:
        return
    container["ports"] = [
        *container.get("ports", []),
        _port(METRICS_PORT_NAME, contract.SERVER_METRICS_PORT),
    ]
    scrape_annotations(pmeta, contract.SERVER_METRICS_PORT)


def trainer_endpoints(container: dict[str, Any], pmeta: dict[str, Any], enabled: bool) -> None:
    """A trainer container's ``progress`` port (always) and ``metrics`` port (enabled)."""
    ports = [*container.get("ports", []), _port(PROGRESS_PORT_NAME, contract.TRAINER_PROGRESS_PORT)]
    if enabled:
        ports.append(_port(METRICS_PORT_NAME, contract.TRAINER_METRICS_PORT))
        scrape_annotations(pmeta, contract.TRAINER_METRICS_PORT)
    container["ports"] = ports


def server_metrics_ingress(enabled: bool) -> list[dict[str, Any]]:
    """NetworkPolicy ingress rules for the servers' metrics port: from anywhere (the
    scraper's namespace is the cluster's business), only that port."""
    if not enabled:
        return []
    return [{"ports": [{"protocol": "TCP", "port": contract.SERVER_METRICS_PORT}]}]


def trainer_ingress(metrics: bool, metrics_ports: int) -> list[dict[str, Any]]:
    """NetworkPolicy ingress rules for a trainer pod's observability ports: ``progress``
    from the operator's pods (any namespace), and with ``metrics`` the ``metrics_ports``
    trainer metrics ports from anywhere (as for the servers)."""
    rules: list[dict[str, Any]] = [
        {
            "from": [
                {"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}
            ],
            "ports": [{"protocol": "TCP", "port": contract.TRAINER_PROGRESS_PORT}],
        }
    ]
    if metrics:
        ports = range(contract.TRAINER_METRICS_PORT, contract.TRAINER_METRICS_PORT + metrics_ports)
        rules.append({"ports": [{"protocol": "TCP", "port": p} for p in ports]})
    return rules
