"""Every kind of child the operator builds, from a few manifests that between them take
every path of :mod:`distgnn_operator.desired` (own servers with gang scheduling and
metrics, co-located trainers, a GraphServer, a job attached to it), for the tests that
check what a real cluster does with those children (RBAC, defaulting, admission)."""

from __future__ import annotations

import copy
from typing import Any

from distgnn import contract
from distgnn.api import parse_graphserver, parse_job
from distgnn_operator.desired import (
    DesiredContext,
    GraphServerInfo,
    desired_graphserver_children,
    desired_job_children,
)

GV = f"{contract.API_GROUP}/{contract.API_VERSION}"
CTX = DesiredContext(runtime_image="example.org/distgnn:1.0", partitions_url="s3://parts")
Obj = dict[str, Any]

JOB: Obj = {
    "apiVersion": GV,
    "kind": "DistGNNJob",
    "metadata": {"name": "cora", "namespace": "ml", "uid": "uid-job"},
    "spec": {
        "graph": {"source": {"url": "s3://graphs/cora.npz"}},
        "partitioning": {"numParts": 2},
        "storage": {"endpoint": "http://s3:8333", "credentialsSecret": {"name": "s3-creds"}},
        "servers": {
            "resources": {"requests": {"cpu": "1000m", "memory": "1024Mi"}},
            "podTemplate": {
                "env": [{"name": "EMPTY"}, {"name": "SET", "value": "1"}],
                "tolerations": [{"key": "mem", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        "trainers": {
            "replicas": 2,
            "gpus": 1,
            "resources": {"requests": {"cpu": "0.5"}, "limits": {"cpu": 2, "memory": "2048Mi"}},
            "app": {"name": "node-classification", "epochs": 2},
        },
        "runPolicy": {"schedulingPolicy": {"gang": {"enabled": True}}},
        "monitoring": {"metrics": True},
    },
}
GRAPHSERVER: Obj = {
    "apiVersion": GV,
    "kind": "GraphServer",
    "metadata": {"name": "papers", "namespace": "ml", "uid": "uid-gs"},
    "spec": {
        "graph": {"source": {"url": "s3://graphs/papers"}},
        "partitioning": {"numParts": 2},
        "servers": {"resources": {"limits": {"memory": "0.5Gi"}}},
        "monitoring": {"metrics": True},
    },
}
ATTACHED: Obj = {
    "apiVersion": GV,
    "kind": "DistGNNJob",
    "metadata": {"name": "lp", "namespace": "ml", "uid": "uid-lp"},
    "spec": {
        "graph": {"graphServer": {"name": "papers"}},
        "trainers": {"replicas": 2, "app": {"name": "link-prediction"}},
    },
}
GS_INFO = GraphServerInfo(
    name="papers",
    manifest_url="s3://parts/ml/papers/papers.json",
    num_parts=2,
    token_secret="papers-token",
)


def colocated() -> Obj:
    obj = copy.deepcopy(JOB)
    obj["metadata"] = {"name": "colo", "namespace": "ml", "uid": "uid-colo"}
    obj["spec"]["trainers"]["colocate"] = True
    return obj


def owners() -> dict[str, Obj]:
    """The owning resources by uid."""
    return {o["metadata"]["uid"]: o for o in (JOB, GRAPHSERVER, ATTACHED, colocated())}


def all_children() -> list[Obj]:
    """Every child of the manifests above, at the stage where each has all of them."""
    return [
        *desired_job_children(parse_job(JOB), CTX, token="t"),
        *desired_job_children(parse_job(colocated()), CTX, token="t"),
        *desired_graphserver_children(parse_graphserver(GRAPHSERVER), CTX, token="t"),
        *desired_job_children(parse_job(ATTACHED), CTX, graphserver=GS_INFO),
    ]
