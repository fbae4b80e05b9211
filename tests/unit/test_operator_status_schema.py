"""Every status the operator writes is one a real API server stores unchanged.

The CRDs' status schemas are structural, so the API server *prunes* a field they do not
declare and *refuses* (422) a value past a bound (``maxLength``, ``maxItems``, ``minimum``)
or a body that is not JSON (``NaN``). kmock stores anything. A pruned field makes the
stored status differ from the one the operator computes, so ``same_status`` sees a change
and the status is patched on every pass; a refused one fails every pass. Here each status
is checked against the schema with every undeclared field forbidden, as JSON, and read back.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import jsonschema
import pytest
from tests.support.crd_schema import closed
from tests.unit.test_operator_status import BASE, TABLE

from distgnn.api import schema
from distgnn.api.progress import progress_status
from distgnn_operator import status as s
from distgnn_operator.reconcile import parse_metrics

Obj = dict[str, Any]
NOW = "2026-01-01T00:00:00Z"
LONG = "é" * 3000  # multi-byte: bounds count characters, as the API server does


def _validator(crd: Obj) -> jsonschema.Draft4Validator:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft4Validator(closed(copy.deepcopy(root["properties"]["status"])))


JOB = _validator(schema.job_crd())
GS = _validator(schema.graphserver_crd())


def stored_unchanged(v: jsonschema.Draft4Validator, st: Obj) -> None:
    text = json.dumps(st, allow_nan=False)  # NaN / Infinity are not JSON: a 400
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(st)]
    assert not errors, errors[:5]
    assert s.same_status(json.loads(text), st)  # read back: no patch on the next pass


def obs(**kw: Any) -> s.JobObservation:
    return dataclasses.replace(BASE, **kw)


JOB_CASES = [o for o, _, _ in TABLE] + [
    obs(invalid=LONG),
    obs(partition="failed", partition_message=LONG),
    obs(trainer_job="failed", restarts=3, failure_message=LONG),
    obs(
        trainer_job="succeeded", metrics=parse_metrics('{"acc": 0.5, "loss": NaN, "x": -Infinity}')
    ),
    obs(trainer_job="succeeded", output_url="s3://out/" + "a" * 2000, manifest_url="s3://m"),
    obs(graph_server="g" * 63, waiting_for_graphserver="g" * 63, partition_needed=False),
    obs(trainer_job="absent", pods_not_created=LONG),
    obs(trainer_job="absent", servers_ready=1, servers_stuck=LONG),
    obs(trainer_job="absent", servers_ready=1, server_config_error=LONG),
    obs(conflict=LONG, taken=tuple(("StatefulSet", "n" * 250 + f"{i:03}") for i in range(20))),
]


@pytest.mark.parametrize("o", JOB_CASES, ids=range(len(JOB_CASES)))
def test_job_status_is_stored_unchanged(o: s.JobObservation) -> None:
    first = s.job_status(o, None, NOW)
    stored_unchanged(JOB, first)
    stored_unchanged(JOB, s.job_status(o, first, NOW))


def test_metrics_that_are_not_finite_are_left_out() -> None:
    got = parse_metrics('{"acc": 0.5, "loss": NaN, "big": Infinity, "small": -Infinity}')
    assert got == {"acc": 0.5}
    assert parse_metrics('{"loss": NaN}') is None


def test_progress_is_stored_unchanged() -> None:
    snap = {
        "completedEpochs": 3,
        "totalEpochs": 10,
        "loss": -0.5,  # a loss may be negative; times and rates may not
        "validationMetric": "m" * 100,
        "validationValue": 0.7,
        "epochSeconds": -1.0,
        "samplesPerSecond": float("inf"),
    }
    p = progress_status(snap)
    assert p is not None and "epochSeconds" not in p and "samplesPerSecond" not in p
    st = s.job_status(obs(), None, NOW)
    st["progress"] = {**p, "updateTime": NOW}
    stored_unchanged(JOB, st)


GS_CASES = [
    s.GraphServerObservation(num_parts=2, servers_ready=2, partition="succeeded"),
    s.GraphServerObservation(invalid=LONG),
    s.GraphServerObservation(partition="failed", partition_message=LONG),
    s.GraphServerObservation(num_parts=2, partition="succeeded", pods_not_created=LONG),
    s.GraphServerObservation(num_parts=2, partition="succeeded", servers_stuck=LONG),
    s.GraphServerObservation(num_parts=2, partition="succeeded", server_config_error=LONG),
    s.GraphServerObservation(num_parts=2, conflict=LONG, taken=(("Service", "s" * 253),)),
    s.GraphServerObservation(
        num_parts=1024,
        endpoints=[f"p-server-{i}.p-server.ns.svc:30050" for i in range(1024)],
        attached_jobs=[f"job-{i}" for i in range(300)],  # more than the schema's 256
        manifest_url="s3://m/" + "a" * 2000,
        token_secret="t" * 253,
    ),
]


@pytest.mark.parametrize("o", GS_CASES, ids=range(len(GS_CASES)))
def test_graphserver_status_is_stored_unchanged(o: s.GraphServerObservation) -> None:
    first = s.graphserver_status(o, None, NOW)
    stored_unchanged(GS, first)
    stored_unchanged(GS, s.graphserver_status(o, first, NOW))
    term = s.graphserver_terminating(first, o.attached_jobs or ["j"], NOW, 1)
    stored_unchanged(GS, term)
