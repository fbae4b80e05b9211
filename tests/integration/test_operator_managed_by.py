"""A DistGNNJob whose ``spec.managedBy`` names another controller (Kueue's
MultiKueue dispatches it to a worker cluster) is left alone, as a batch Job's
``spec.managedBy``: the operator creates no child and writes nothing to it (no status, no
event, no finalizer), even when its status says it runs (MultiKueue copies the worker's
status), and a GraphServer does not count it as attached."""

from __future__ import annotations

import argparse
import asyncio
import logging

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    _graphserver,
    cluster,
    job_manifest,
    operator_args,
)

from distgnn import contract
from distgnn_operator.finalizer import FINALIZER

pytestmark = pytest.mark.timeout(180)

MULTIKUEUE = "kueue.x-k8s.io/multikueue"
PARTS = {"partitions": {"manifestURL": "s3://p/x.json"}}
OPERATOR_AGENTS = ("kopf/", "distgnn-operator/")
CHILDREN = [
    ("Secret", "{}-token"),
    ("StatefulSet", "{}-server"),
    ("Service", "{}-server"),
    ("Service", "{}-trainers"),
    ("NetworkPolicy", "{}-server"),
    ("NetworkPolicy", "{}-trainers"),
    ("Job", "{}-partition"),
    ("Job", "{}-trainers"),
]


async def test_a_job_managed_by_another_controller_gets_no_write(
    cluster: Cluster,  # noqa: F811
    operator_args: argparse.Namespace,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = cluster
    caplog.set_level(logging.DEBUG, logger="distgnn_operator")
    async with Operator(operator_args):
        await c.create(_graphserver("gs", 2))
        await c.create(job_manifest("mk", managedBy=MULTIKUEUE))
        await c.create(
            job_manifest("mkgs", graph={"graphServer": {"name": "gs"}}, managedBy=MULTIKUEUE)
        )
        await c.create(
            job_manifest("ours", graph=PARTS, managedBy=contract.CONTROLLER_NAME)
        )  # named: still ours
        await c.create(job_manifest("ogs", graph={"graphServer": {"name": "gs"}}))

        async def reconciled() -> bool:
            job = await c.get("DistGNNJob", "ours")
            return bool(job and job.get("status") and FINALIZER in job["metadata"]["finalizers"])

        await c.until("the job naming this operator reconciled", reconciled)
        await c.child("Secret", "ours-token")

        async def attached() -> bool:
            return (await c.status("GraphServer", "gs")).get("attachedJobs") == ["ogs"]

        await c.until("the GraphServer's attachedJobs (ours only)", attached)
        # MultiKueue copies the worker cluster's status: a Running phase starts no timer
        await c.patch("DistGNNJob", "mk", {"status": {"phase": "Running"}}, "status")
        calls = len(c.k.calls)

        async def passed() -> bool:  # each pass GETs its job; the status event runs one of mk
            window = c.k.calls[calls:]
            n = {j: window.count(("GET", c._url("DistGNNJob", j))) for j in ("ours", "mk")}
            return n["ours"] >= 3 and n["mk"] >= 1

        await c.until("3 resyncs of ours, a pass of mk on its event", passed)
        await asyncio.sleep(1.0)  # progress timer ticks (every 5 s by default)
        for name in ("mk", "mkgs"):
            writes = [
                w
                for w in c.k.writes
                if w.agent.startswith(OPERATOR_AGENTS) and (w.name or "").startswith(name)
            ]
            assert writes == [], writes
            job = await c.get("DistGNNJob", name)
            assert job is not None
            assert not job["metadata"].get("finalizers"), job["metadata"]
            assert not (job["metadata"].get("annotations") or {}), job["metadata"]
            assert await c.events(name) == []
            for kind, child in CHILDREN:
                assert await c.get(kind, child.format(name)) is None, (kind, child)
        assert (await c.status("DistGNNJob", "mk")) == {"phase": "Running"}
        assert (await c.status("GraphServer", "gs")).get("attachedJobs") == ["ogs"]
    said = [
        r for r in caplog.records if r.getMessage() == "managed by another controller, left alone"
    ]
    assert sorted(r.fields["name"] for r in said) == ["mk", "mkgs"]  # type: ignore[attr-defined]
