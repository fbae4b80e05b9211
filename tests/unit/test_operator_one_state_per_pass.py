"""One pass computes each child Job's state once (:func:`reconcile.job_state`) and hands it
down (partition outcome, stuck trainer pods, cleanPodPolicy), so two readings of one Job
in one pass can never disagree."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any

import pytest

from distgnn_operator import reconcile
from distgnn_operator import status as s
from distgnn_operator.kube import ServerVersion
from distgnn_operator.reconcile import OperatorContext, Reconciler

Obj = dict[str, Any]
NOW = dt.datetime(2026, 11, 25, 18, 0, tzinfo=dt.UTC)
JOB_UID = "uid-job"


class _Api:
    """An in-memory API: objects by kind, listed by label subset; writes kept as sent."""

    def __init__(self, objs: list[Obj]) -> None:
        self.objs = objs

    async def server_version(self, *, refresh: bool = False) -> ServerVersion:
        return ServerVersion(1, 31, "v1.31.0")

    async def get(self, kind: str, ns: str, name: str) -> Obj | None:
        return next(
            (o for o in self.objs if o["kind"] == kind and o["metadata"]["name"] == name), None
        )

    async def list(self, kind: str, ns: str, labels: Any = None, fields: Any = None) -> list[Obj]:
        want = dict(labels or {})
        return [
            o
            for o in self.objs
            if o["kind"] == kind and want.items() <= (o["metadata"].get("labels") or {}).items()
        ]

    async def create(self, obj: Obj) -> Obj:
        self.objs.append(obj)
        return obj

    async def patch(self, kind: str, ns: str, name: str, patch: Obj, **_: Any) -> Obj:
        return {}

    async def delete(self, kind: str, ns: str, name: str) -> bool:
        return True


def _owned(kind: str, name: str, **extra: Any) -> Obj:
    labels = {"distgnn.dev/job-name": "j", "job-name": name}
    ref = {"kind": "DistGNNJob", "name": "j", "uid": JOB_UID, "controller": True}
    md = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels}
    return {"kind": kind, "metadata": {**md, "ownerReferences": [ref]}, **extra}


def _job(**spec: Any) -> Obj:
    base: Obj = {
        "graph": {"source": {"url": "s3://graphs/cora.npz"}},
        "partitioning": {"numParts": 2, "outputURL": "s3://parts/j"},
        "trainers": {"replicas": 2, "app": {"name": "node-classification"}},
    }
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "j", "namespace": "ml", "uid": JOB_UID, "generation": 1},
        "spec": {**base, **spec},
        "status": {"phase": "Starting", "startTime": "2026-11-25T17:00:00Z"},
    }


RUNNING = {"spec": {"completions": 2}, "status": {"active": 2, "ready": 1}}
FAILED = {"status": {"failed": 3, "conditions": [{"type": "Failed", "status": "True"}]}}
PARTS = {"partitions": {"manifestURL": "s3://p/j.json"}}
CASES = [
    pytest.param(
        _job(),
        [_owned("Job", "j-partition", status={"active": 1})],
        "Partitioning",
        id="partitioning",
    ),
    pytest.param(
        _job(), [_owned("Job", "j-partition", **FAILED)], "PartitioningFailed", id="part-failed"
    ),
    pytest.param(
        _job(graph=PARTS),
        [_owned("Job", "j-trainers", **RUNNING)],
        "ServersStarting",
        id="trainers-started",
    ),
    pytest.param(
        _job(runPolicy={"activeDeadlineSeconds": 60}),
        [
            _owned("Job", "j-partition", status={"succeeded": 1}),
            _owned("Job", "j-trainers", **RUNNING),
        ],
        "DeadlineExceeded",
        id="deadline-cleans-up",
    ),
]


@pytest.mark.parametrize(("body", "children", "reason"), CASES)
def test_each_child_jobs_state_is_computed_once_per_pass(
    body: Obj, children: list[Obj], reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: Counter[str] = Counter()
    real = reconcile.job_state

    def counted(job: Obj | None) -> str:
        if job is not None:
            seen[job["metadata"]["name"]] += 1
        return real(job)

    monkeypatch.setattr(reconcile, "job_state", counted)
    api = _Api(list(children))
    rec = Reconciler(OperatorContext(api=api, clock=lambda: NOW))  # type: ignore[arg-type]
    res = asyncio.run(rec.reconcile_job(body, lambda *_: None))
    assert s.phase_reason(res.status)[0] == reason
    assert seen == Counter({c["metadata"]["name"]: 1 for c in children})
