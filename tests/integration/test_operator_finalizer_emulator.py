"""kopf's finalizer lands on resources created without it, also when every one of kopf's
own attempts loses to a concurrent write, and a GraphServer's deletion is then held by
its attached jobs.

kopf adds the finalizer only with a JSON patch tested against the resourceVersion of the
event it is handling, retried at the object's next event: under steady writes every
attempt can lose. The reconcile pass adds it right after it read the resource
(``distgnn_operator.finalizer``); docs/operator.md ("kopf's finalizer").
"""

from __future__ import annotations

import argparse

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    _graphserver,
    cluster,
    job_manifest,
    make_args,
)

from distgnn_operator.finalizer import FINALIZER

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def resync1() -> argparse.Namespace:
    return make_args(1)


async def finalized(c: Cluster, kind: str, name: str) -> bool:
    obj = await c.get(kind, name)
    return FINALIZER in ((obj or {}).get("metadata") or {}).get("finalizers", [])


async def test_finalizer_lands_under_concurrent_writes_and_holds_the_graphserver(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    resync1: argparse.Namespace,
) -> None:
    """A GraphServer and a job attached to it, created without finalizers, get kopf's
    finalizer although another client writes each just before every patch of kopf's
    arrives (so each of those fails: tested against a version already replaced, as kopf
    keeps losing under steady writes); then deleting the GraphServer is held (phase
    Terminating) until the job is deleted. A resync every second adds passes meanwhile.
    Without the pass adding it, kopf retries at every event its failed patch causes and
    the finalizer never lands."""
    c = cluster
    c.k.racing |= {"graphservers", "distgnnjobs"}
    objs = [("GraphServer", "gs"), ("DistGNNJob", "att")]
    async with Operator(resync1):
        await c.create(_graphserver("gs", 2))
        await c.create(job_manifest("att", graph={"graphServer": {"name": "gs"}}))

        async def both() -> bool:
            return all([await finalized(c, k, n) for k, n in objs])

        await c.until("the finalizer on both", both, timeout=30)
        c.k.racing.clear()  # kopf removes it (after the delete handler) the same way
        await c.reason("DistGNNJob", "att", "GraphServerNotReady")

        async def attached() -> bool:
            return bool((await c.status("GraphServer", "gs")).get("attachedJobs") == ["att"])

        await c.until("attachedJobs current", attached)
        await c.delete("GraphServer", "gs")
        await c.phase("GraphServer", "gs", "Terminating")  # held: the emulator keeps it
        await c.event("gs", "AttachedJobs")
        await c.delete("DistGNNJob", "att")

        async def gone() -> bool:
            return await c.get("GraphServer", "gs") is None

        await c.until("GraphServer deleted once its job is", gone)
