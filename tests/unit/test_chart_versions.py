"""The chart's minimum Kubernetes version is the real one.

``Chart.yaml`` declares ``kubeVersion``; these tests show that Helm refuses a cluster one
minor below it with a clear message (instead of failing half-way through an install), that
the chart renders at the minimum, and that the minimum is needed: the CRDs use
``x-kubernetes-validations[].fieldPath``, which the CustomResourceDefinition schema of
Kubernetes 1.27 does not have (the API server accepts it from 1.28). The operator's own
children are validated against the minimum's schemas too.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.unit.test_chart_helm import CHART, KUBE_VERSION, RELEASE, latest_kube_version, run_helm

from distgnn.api import parse_graphserver, parse_job, schema
from distgnn_operator.desired import (
    DesiredContext,
    desired_graphserver_children,
    desired_job_children,
)

REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]


def _minor_below(version: str) -> str:
    major, minor, _ = (int(x) for x in version.split("."))
    return f"{major}.{minor - 1}.99"


def test_declared_minimum_is_1_28() -> None:
    # fieldPath in the CRDs' CEL rules: accepted by the API server from 1.28
    assert KUBE_VERSION == "1.28.0"


def test_helm_refuses_a_cluster_below_the_minimum() -> None:
    below = _minor_below(KUBE_VERSION)
    res = run_helm("template", RELEASE, str(CHART), "--kube-version", below)
    assert res.returncode != 0
    assert f"chart requires kubeVersion: >={KUBE_VERSION}-0" in res.stderr, res.stderr
    assert f"incompatible with Kubernetes v{below}" in res.stderr, res.stderr


@pytest.mark.parametrize("kube", [KUBE_VERSION, latest_kube_version()])
def test_helm_renders_at_the_minimum_and_the_latest(kube: str) -> None:
    res = run_helm("template", RELEASE, str(CHART), "--kube-version", kube)
    assert res.returncode == 0, res.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(res.stdout) if d}
    assert {"Deployment", "CustomResourceDefinition", "ClusterRole"} <= kinds


def _crds() -> list[Obj]:
    return [schema.job_crd(), schema.graphserver_crd()]


def test_crds_need_the_minimum() -> None:
    """The minimum is not arbitrary: one minor below, the DistGNNJob CRD itself is invalid."""
    refused = {}
    for crd in _crds():
        kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)
        kubernetes_validate.validate(crd, latest_kube_version(), strict=True)
        try:
            kubernetes_validate.validate(crd, _minor_below(KUBE_VERSION), strict=True)
        except kubernetes_validate.ValidationError as e:
            refused[crd["metadata"]["name"]] = str(e)
    assert list(refused) == ["distgnnjobs.distgnn.dev"]
    assert "'fieldPath' was unexpected" in refused["distgnnjobs.distgnn.dev"]


# Functions of CEL's standard library and Kubernetes' CEL libraries that CRD rules may use
# on every supported version (Kubernetes 1.25+: base CEL, list, regex and URL libraries).
# A newer function (quantity, CIDR/IP, format, ...) must raise the minimum first.
CEL_FUNCTIONS_AT_MINIMUM = {
    "size", "has", "matches", "startsWith", "endsWith", "contains", "exists", "all",
    "exists_one", "map", "filter", "int", "uint", "double", "string", "bool", "duration",
    "timestamp", "isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "find", "findAll",
    "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
    "getQuery",
}  # fmt: skip
# Fields of a validation rule and the version whose CRD schema first has them.
RULE_FIELDS_SINCE = {"rule": "1.25", "message": "1.25", "messageExpression": "1.27",
                     "reason": "1.28", "fieldPath": "1.28", "optionalOldSelf": "1.30"}  # fmt: skip


def _rules(node: Any) -> list[Obj]:
    out: list[Obj] = []
    if isinstance(node, dict):
        out += node.get("x-kubernetes-validations", [])
        for v in node.values():
            out += _rules(v)
    elif isinstance(node, list):
        for v in node:
            out += _rules(v)
    return out


def test_cel_rules_use_only_what_the_minimum_has() -> None:
    rules = [r for crd in _crds() for r in _rules(crd)]
    assert rules
    minimum = tuple(int(x) for x in KUBE_VERSION.split(".")[:2])
    for r in rules:
        called = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", r["rule"]))
        assert called <= CEL_FUNCTIONS_AT_MINIMUM, r
        for key in r:
            since = tuple(int(x) for x in RULE_FIELDS_SINCE[key].split("."))
            assert since <= minimum, (key, r)


def _examples() -> list[Obj]:
    docs = []
    for p in sorted((REPO / "examples" / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(p.read_text()) if d]
    return [d for d in docs if d.get("kind") in {"DistGNNJob", "GraphServer"}]


BUILT_IN_GROUPS = ("v1", "batch/", "apps/", "networking.k8s.io/", "policy/")


def _as_published(child: dict[str, Any], kube: str) -> dict[str, Any]:
    """``child`` as the published OpenAPI schema of ``kube`` takes it. Before 1.29 that
    schema marks a podFailurePolicy rule's ``onPodConditions`` required (an error of the
    schema, fixed in 1.29: the API server's validation asks for one of ``onExitCodes``
    and ``onPodConditions``, each by ``len``), so an ``onExitCodes`` rule gets the empty
    list the API server reads as absent."""
    if child["kind"] != "Job" or tuple(map(int, kube.split(".")[:2])) >= (1, 29):
        return child
    out = copy.deepcopy(child)
    for rule in (out["spec"].get("podFailurePolicy") or {}).get("rules") or []:
        rule.setdefault("onPodConditions", [])
    return out


@pytest.mark.parametrize("kube", [KUBE_VERSION, latest_kube_version()])
def test_operator_children_validate_at_the_minimum(kube: str) -> None:
    """What the operator creates (Jobs, StatefulSets, Services, ...) exists at the minimum."""
    ctx = DesiredContext(runtime_image="example.org/distgnn:test", partitions_url="s3://parts")
    kinds = set()
    for example in _examples():
        obj = {**example, "metadata": {**example["metadata"], "namespace": "ml", "uid": "u-1"}}
        if obj["kind"] == "DistGNNJob":
            children = desired_job_children(parse_job(obj), ctx, token="t")
        else:
            children = desired_graphserver_children(parse_graphserver(obj), ctx, token="t")
        for child in children:
            if child["apiVersion"].startswith(BUILT_IN_GROUPS):  # not PodGroup (a CRD)
                kubernetes_validate.validate(_as_published(child, kube), kube, strict=True)
                kinds.add(child["kind"])
    assert {"Job", "StatefulSet", "Service", "Secret"} <= kinds
