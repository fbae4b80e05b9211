"""``podTemplate.affinity`` is free-form in the CRD: parsing refuses what Kubernetes'
Affinity type does not have (the API server would prune it from the pods and the operator
re-send it every pass), naming the path; a full, valid affinity is kept as written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distgnn.api import parse_job
from distgnn.errors import ConfigError

SELECTOR = {
    "matchLabels": {"app": "x"},
    "matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}],
}
POD_TERM = {
    "labelSelector": SELECTOR,
    "namespaceSelector": SELECTOR,
    "namespaces": ["ml"],
    "topologyKey": "kubernetes.io/hostname",
    "matchLabelKeys": ["pod-template-hash"],
    "mismatchLabelKeys": ["tenant"],
}
NODE_TERM = {
    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
    "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}],
}
POD_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": [POD_TERM],
    "preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": POD_TERM}
    ],
}
FULL: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_TERM]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": NODE_TERM}],
    },
    "podAffinity": POD_AFFINITY,
    "podAntiAffinity": POD_AFFINITY,
}


def _job(affinity: Any, where: str = "trainers") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "graph": {"source": {"url": "data/g.npz"}},
        "trainers": {"replicas": 1, "app": {"name": "node-classification"}},
    }
    spec.setdefault(where, {})["podTemplate"] = {"affinity": affinity}
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "a"},
        "spec": spec,
    }


@pytest.mark.parametrize("where", ["trainers", "servers"])
def test_every_field_of_kubernetes_affinity_is_kept(where: str) -> None:
    job = parse_job(_job(copy.deepcopy(FULL), where))
    pt = getattr(job.spec, where).pod_template
    assert pt.affinity == FULL


@pytest.mark.parametrize(
    ("mutate", "path", "why"),
    [
        (
            lambda a: a["nodeAffinity"].update(requiredDuringScheduling={}),
            "affinity.nodeAffinity.requiredDuringScheduling",
            "not a field of Kubernetes' Affinity",
        ),
        (lambda a: a.update(podAfinity={}), "affinity.podAfinity", "not a field"),
        (
            lambda a: a["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                0
            ].update(topologykey="zone"),
            "requiredDuringSchedulingIgnoredDuringExecution[0].topologykey",
            "not a field",
        ),
        (
            lambda a: a["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0].update(
                weight="high"
            ),
            "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "must be an integer",
        ),
        (
            lambda a: a["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ][0]["matchExpressions"][0].update(values="a"),
            "matchExpressions[0].values",
            "must be a list of strings",
        ),
        (
            lambda a: a["nodeAffinity"].update(preferredDuringSchedulingIgnoredDuringExecution={}),
            "nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            "must be a list",
        ),
        (
            lambda a: a["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
                "labelSelector"
            ].update(matchLabels={"app": 1}),
            "labelSelector.matchLabels",
            "must be a mapping of strings",
        ),
    ],
)
def test_what_kubernetes_affinity_does_not_have_is_refused_naming_it(
    mutate: Any, path: str, why: str
) -> None:
    affinity = copy.deepcopy(FULL)
    mutate(affinity)
    with pytest.raises(ConfigError) as ei:
        parse_job(_job(affinity))
    msg = str(ei.value)
    assert f"spec.trainers.podTemplate.{path}" in msg or path in msg, msg
    assert why in msg, msg
