"""The chart's monitoring: ServiceMonitor / PodMonitor only when asked (and when the
cluster serves monitoring.coreos.com/v1), the operator's metrics port, and the Grafana
dashboard, whose queries may only name metrics the code registers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from test_chart_helm import CHART, KUBE_VERSION, NAMESPACE, RELEASE, Obj, of_kind, one, run_helm

from distgnn.api import parse_job
from distgnn.server.metrics import ServerState, server_registry
from distgnn.train.telemetry import TrainerMetrics
from distgnn_operator.desired import DesiredContext, desired_job_children
from distgnn_operator.metrics import OperatorMetrics

MONITORING_API = "monitoring.coreos.com/v1"
ALL_ON: Obj = {
    "metrics": {
        "enabled": True,
        "port": 9100,
        "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "prom"}},
        "podMonitor": {"enabled": True, "interval": "15s"},
        "dashboard": {"enabled": True, "namespace": "grafana"},
    }
}
DASHBOARD = CHART / "files" / "dashboards" / "distgnn.json"


def render(values: Obj, *extra: str) -> tuple[list[Obj], str]:
    res = run_helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--kube-version", KUBE_VERSION, *extra, values=values,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d], res.stdout


def notes(values: Obj) -> str:
    """NOTES.txt as ``helm install --dry-run`` prints it (no monitoring API offline)."""
    res = run_helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
        values=values,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.split("NOTES:", 1)[1]


# --- what the Prometheus Operator accepts (the fields we use, no others) -----------------

_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
DURATION = "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
"""The Prometheus Operator's Duration pattern (the units the chart's schema allows)."""
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string", "pattern": "^/"},
        "interval": {"type": "string", "pattern": DURATION},
        "relabelings": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "sourceLabels": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                    },
                    "targetLabel": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                },
            },
        },
    },
}  # fmt: skip
_NS_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": {"type": "string"}},
    },
}


def monitor_schema(kind: str, endpoints: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": MONITORING_API},
            "kind": {"const": kind},
            "metadata": {"type": "object", "required": ["name", "namespace"]},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", endpoints],
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": _NS_SELECTOR,
                    endpoints: {"type": "array", "minItems": 1, "items": _ENDPOINT},
                },
            },
        },
    }


def matches(selector: Obj, labels: dict[str, str]) -> bool:
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        assert e["operator"] == "In"
        ok = ok and labels.get(e["key"]) in e["values"]
    return ok


def prom_label(k8s_label: str) -> str:
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k8s_label)


# --- rendering ------------------------------------------------------------------------------


def test_nothing_monitoring_by_default() -> None:
    objs, _ = render({}, "--api-versions", MONITORING_API)
    assert not of_kind(objs, "ServiceMonitor") and not of_kind(objs, "PodMonitor")
    assert not of_kind(objs, "ConfigMap")
    dep = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not any(a.startswith("--metrics-port") for a in dep["args"])
    assert [p["name"] for p in one(objs, "Service")["spec"]["ports"]] == ["health"]


def test_monitors_need_the_prometheus_operator_api() -> None:
    objs, _ = render(ALL_ON)  # the cluster does not serve monitoring.coreos.com/v1
    assert not of_kind(objs, "ServiceMonitor") and not of_kind(objs, "PodMonitor")
    assert len(of_kind(objs, "ConfigMap")) == 1  # the dashboard needs no CRD
    assert "no monitor was created" in notes(ALL_ON)
    assert "no monitor was created" not in notes({})


def test_monitors_when_asked_select_what_exists() -> None:
    objs, _ = render(ALL_ON, "--api-versions", MONITORING_API)
    sm, pm = one(objs, "ServiceMonitor"), one(objs, "PodMonitor")
    jsonschema.validate(sm, monitor_schema("ServiceMonitor", "endpoints"))
    jsonschema.validate(pm, monitor_schema("PodMonitor", "podMetricsEndpoints"))
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["interval"] == "30s"

    # the ServiceMonitor selects the operator's Service and its metrics port
    svc = one(objs, "Service")
    assert matches(sm["spec"]["selector"], svc["metadata"]["labels"])
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    sport = {p["name"]: p for p in svc["spec"]["ports"]}["metrics"]
    assert sport["port"] == 9100 and sport["targetPort"] == "metrics"
    c = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-port=9100" in c["args"]
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in c["ports"]

    # the PodMonitor selects the server and trainer pods the operator creates with
    # spec.monitoring.metrics, by their "metrics" port; relabelings read their labels
    job = parse_job(
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "DistGNNJob",
            "metadata": {"name": "j", "namespace": "ml", "uid": "u"},
            "spec": {
                "graph": {"partitions": {"manifestURL": "s3://p/j.json"}},
                "trainers": {"replicas": 2, "app": {"name": "node-classification"}},
                "monitoring": {"metrics": True},
            },
        }
    )
    templates = [
        o["spec"]["template"]
        for o in desired_job_children(job, DesiredContext())
        if o["kind"] in ("StatefulSet", "Job")
    ]
    assert len(templates) == 2
    ep = pm["spec"]["podMetricsEndpoints"][0]
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    for tpl in templates:
        labels = tpl["metadata"]["labels"]
        assert matches(pm["spec"]["selector"], labels)
        names = {p["name"] for p in tpl["spec"]["containers"][0]["ports"]}
        assert ep["port"] in names and ep["path"] == "/metrics"
    sources = {r["sourceLabels"][0]: r["targetLabel"] for r in ep["relabelings"]}
    assert sources[prom_label("distgnn.dev/job-name")] == "distgnn_job"
    assert sources[prom_label("distgnn.dev/role")] == "distgnn_role"

    cm = one(objs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["distgnn.json"]) == json.loads(DASHBOARD.read_text())


def test_pod_monitor_follows_watch_namespaces() -> None:
    values = {"watchNamespaces": ["team-a"], "metrics": {"podMonitor": {"enabled": True}}}
    objs, _ = render(values, "--api-versions", MONITORING_API)
    assert one(objs, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    assert not of_kind(objs, "ServiceMonitor")  # metrics.enabled is off


def test_built_in_kinds_of_the_monitoring_render_validate_strict(tmp_path: Path) -> None:
    objs, _ = render(ALL_ON, "--api-versions", MONITORING_API)
    built_in = [o for o in objs if o["apiVersion"] != MONITORING_API]
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(built_in))
    exe = shutil.which("kubernetes-validate")
    assert exe, "kubernetes-validate is not installed"
    res = subprocess.run(
        [exe, "--strict", "-k", KUBE_VERSION, str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert (res.stdout + res.stderr).count(" passed for resource ") == len(built_in)


@pytest.mark.parametrize("values", [{"metrics": {"podMonitor": {"interval": "soon"}}},
                                    {"metrics": {"port": 80}},
                                    {"metrics": {"dashboard": {"enable": True}}}])  # fmt: skip
def test_schema_rejects_bad_monitoring_values(values: Obj) -> None:
    res = run_helm("template", RELEASE, str(CHART), values=values)
    assert res.returncode != 0


# --- the dashboard ----------------------------------------------------------------------------


def registered_metric_names() -> set[str]:
    """Every sample name the code can expose (families from the real registries)."""
    trainer = TrainerMetrics()
    regs = [
        server_registry(ServerState(part_id=0)),
        trainer.registry,
        OperatorMetrics().registry,
    ]
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_sum", "_count"],
        "gauge": [""],
    }
    out: set[str] = set()
    for reg in regs:
        for fam in reg.collect():
            out |= {fam.name + s for s in suffixes[fam.type]}
    return out


def test_dashboard_parses_and_names_only_metrics_that_exist() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {m for e in exprs for m in re.findall(r"\bdistgnn_[a-z_]+\b", e)}
    # target labels the chart's PodMonitor adds (distgnn_job, ...) are not metrics
    objs, _ = render(
        {"metrics": {"podMonitor": {"enabled": True}}}, "--api-versions", MONITORING_API
    )
    ep = one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    labels = {r["targetLabel"] for r in ep["relabelings"]}
    assert "distgnn_job" in used
    used -= labels
    known = registered_metric_names()
    assert used and used <= known, sorted(used - known)
    # what the dashboard is for: throughput, the step-time split, server load
    joined = "\n".join(exprs)
    assert "distgnn_trainer_samples_total" in joined
    assert "distgnn_trainer_step_seconds_sum" in joined and "by (phase)" in joined
    assert "distgnn_server_requests_total" in joined
    assert "distgnn_server_request_duration_seconds_bucket" in joined
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]


def test_observability_doc_lists_every_metric() -> None:
    doc = (CHART.parents[1] / "docs" / "observability.md").read_text()
    trainer = TrainerMetrics()
    for reg in (
        server_registry(ServerState(part_id=0)),
        trainer.registry,
        OperatorMetrics().registry,
    ):
        for fam in reg.collect():
            name = fam.name + ("_total" if fam.type == "counter" else "")
            assert f"| `{name}` |" in doc, name
