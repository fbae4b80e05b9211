"""Every child's name passes the API server's name validation for its kind (kmock checks
none), for the longest and the oddest names a DistGNNJob or GraphServer may have.

apimachinery: a Service name is an RFC 1035 label (a letter first, at most 63); other
names are RFC 1123 subdomains (at most 253); a Job's name goes into its pods'
``batch.kubernetes.io/job-name`` label (at most 63); a StatefulSet's pods carry
``controller-revision-hash: NAME-<10 characters>`` (so NAME at most 52); an Indexed Job's
pod hostname ``NAME-INDEX`` is a label (at most 63); label values at most 63.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from tests.support import children as ch

from distgnn.api import parse_graphserver, parse_job
from distgnn.api.validate import JOB_NAME_MAX
from distgnn_operator.desired import desired_graphserver_children, desired_job_children

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_PARTS = 1024


def _named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out


NAMES = ["a" * JOB_NAME_MAX, "z9-" + "0" * (JOB_NAME_MAX - 4) + "x", "a"]


def children_named(name: str) -> list[dict[str, Any]]:
    gs = _named(ch.GRAPHSERVER, name)
    gs["spec"]["partitioning"]["numParts"] = MAX_PARTS
    job = _named(ch.JOB, name)
    job["spec"]["partitioning"]["numParts"] = MAX_PARTS
    colo = _named(ch.colocated(), name)
    return [
        *desired_job_children(parse_job(job), ch.CTX, token="t"),
        *desired_job_children(parse_job(colo), ch.CTX, token="t"),
        *desired_graphserver_children(parse_graphserver(gs), ch.CTX, token="t"),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_every_child_name_is_valid_for_its_kind(name: str) -> None:
    for o in children_named(name):
        n = o["metadata"]["name"]
        assert DNS_1123_SUBDOMAIN.fullmatch(n) and len(n) <= 253, (o["kind"], n)
        if o["kind"] == "Service":
            assert DNS_1035.fullmatch(n) and len(n) <= 63, n
        if o["kind"] == "Job":
            assert len(n) <= 63, n
            if o["spec"].get("completionMode") == "Indexed":
                host = f"{n}-{o['spec']['completions'] - 1}"
                assert DNS_1123_LABEL.fullmatch(host) and len(host) <= 63, host
        if o["kind"] == "StatefulSet":
            assert len(n) <= 52, n
            last = f"{n}-{o['spec']['replicas'] - 1}"  # pod name = hostname: a label
            assert DNS_1123_LABEL.fullmatch(last) and len(last) <= 63, last
        for k, v in {**o["metadata"]["labels"], **_template_labels(o)}.items():
            assert len(v) <= 63 and LABEL_VALUE.fullmatch(v), (k, v)


def _template_labels(o: dict[str, Any]) -> dict[str, str]:
    return dict(((o.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {}))
