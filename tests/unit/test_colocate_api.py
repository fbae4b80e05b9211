"""``trainers.colocate``: refused with a GraphServer and with replicas that do not divide
evenly over the partitions, alike at admission (CEL) and in local mode (Python)."""

from __future__ import annotations

from typing import Any

import pytest
from test_crd_cel import _rule, cel

from distgnn.api import parse_job, to_dict
from distgnn.errors import ConfigError


def job(graph: dict[str, Any], replicas: int, num_parts: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "cora"},
        "spec": {
            "graph": graph,
            "partitioning": {"numParts": num_parts},
            "trainers": {
                "replicas": replicas,
                "colocate": True,
                "app": {"name": "node-classification"},
            },
        },
    }


SOURCE = {"source": {"url": "s3://graphs/cora.npz"}}


def test_colocate_is_off_by_default_and_parses_with_a_multiple_of_the_partitions() -> None:
    plain = job(SOURCE, 3)
    del plain["spec"]["trainers"]["colocate"]
    assert parse_job(plain).spec.trainers.colocate is False
    spec = parse_job(job(SOURCE, 4)).spec
    assert spec.trainers.colocate is True
    rule = _rule("DistGNNJob", ".spec", "multiple of partitioning.numParts")
    assert cel(rule["rule"], to_dict(spec)) is True


def test_replicas_not_a_multiple_of_the_partitions_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"spec\.trainers.*multiple of partitioning\.numParts"):
        parse_job(job(SOURCE, 3))
    rule = _rule("DistGNNJob", ".spec", "multiple of partitioning.numParts")
    bad = to_dict(parse_job(job(SOURCE, 4)).spec)
    bad["trainers"]["replicas"] = 3
    assert cel(rule["rule"], bad) is False


def test_a_graphserver_job_cannot_colocate() -> None:
    with pytest.raises(ConfigError, match=r"spec\.trainers.*not graph\.graphServer"):
        parse_job(job({"graphServer": {"name": "shared"}}, 2))
    rule = _rule("DistGNNJob", ".spec", "not graph.graphServer")
    spec = to_dict(parse_job(job(SOURCE, 2)).spec)
    assert cel(rule["rule"], spec) is True
    spec["graph"] = {"graphServer": {"name": "shared"}}
    assert cel(rule["rule"], spec) is False
