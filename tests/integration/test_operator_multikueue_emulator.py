"""MultiKueue on the manager cluster (``--kueue``) against the emulator: a job whose
``spec.managedBy`` is MultiKueue's gets its Workload from the operator and nothing else (no
child, no status, no finalizer); the test plays Kueue (admits, evicts) and MultiKueue's
generic adapter (copies the worker's status into the job), and the operator releases the
quota once the copied status says the copy stopped, and finishes the Workload once it
says the copy finished. Every pass over an unchanged state writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    cluster,
    cond,
    job_manifest,
    make_args,
)
from test_operator_managed_by import CHILDREN, OPERATOR_AGENTS

from distgnn_operator.finalizer import FINALIZER

pytestmark = pytest.mark.timeout(180)

QUEUE = "kueue.x-k8s.io/queue-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
NOW = "2026-01-01T00:00:00Z"


def _c(typ: str, status: str, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {
        "type": typ,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": NOW,
    }


ADMITTED = {
    "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "trainers"}]},
    "admissionChecks": [
        {
            "name": "multikueue",
            "state": "Ready",
            "message": 'The workload got reservation on "worker1"',
            "lastTransitionTime": NOW,
        }
    ],
    "conditions": [
        _c("QuotaReserved", "True", "QuotaReserved"),
        _c("Admitted", "True", "Admitted"),
    ],
}


def _mirror(phase: str, reason: str = "TrainersRunning", message: str = "") -> dict[str, Any]:
    """The worker's copy's status, as MultiKueue's adapter copies it into the job."""
    return {
        "phase": phase,
        "conditions": [
            _c("Running", "True" if phase == "Running" else "False", reason, message),
            _c("Succeeded", "True" if phase == "Succeeded" else "False", "NotFinished"),
        ],
        "trainers": {"active": 2 if phase == "Running" else 0},
    }


def _dispatched(name: str, **spec: Any) -> dict[str, Any]:
    obj = job_manifest(
        name, graph={"partitions": {"manifestURL": "s3://p/x.json"}}, managedBy=MULTIKUEUE, **spec
    )
    obj["metadata"]["labels"] = {QUEUE: "team-a"}
    return obj


async def _workload(c: Cluster) -> dict[str, Any]:
    async def one() -> dict[str, Any] | None:
        items = await c.items("Workload")
        return items[0] if items else None

    return dict(await c.until("the job's Workload", one))


async def quiet_pass(c: Cluster, name: str, poke: int) -> None:
    """A change of the job that means nothing to it (an annotation) runs a pass over it:
    the pass writes nothing (no object, no event). A dispatched job has no resync timer."""
    await asyncio.sleep(0.5)  # in-flight events of the last change
    n, calls = len(c.k.writes), len(c.k.calls)
    await c.patch("DistGNNJob", name, {"metadata": {"annotations": {"test/poke": str(poke)}}})

    async def passed() -> bool:
        return c.k.calls[calls:].count(("GET", c._url("DistGNNJob", name))) >= 1

    await c.until("a pass over the job", passed)
    await asyncio.sleep(0.5)
    writes = [w for w in c.k.writes_since(n) if w.agent.startswith(OPERATOR_AGENTS)]
    assert writes == [], writes


async def _left_alone(c: Cluster, name: str) -> None:
    """No child, no finalizer; the operator never wrote the job."""
    job = await c.get("DistGNNJob", name)
    assert job is not None
    assert FINALIZER not in (job["metadata"].get("finalizers") or []), job["metadata"]
    for kind, child in CHILDREN:
        assert await c.get(kind, child.format(name)) is None, (kind, child)
    wrote = [
        w
        for w in c.k.writes
        if w.agent.startswith(OPERATOR_AGENTS) and w.plural == "distgnnjobs" and w.name == name
    ]
    assert wrote == [], wrote


async def test_multikueue_job_gets_its_workload_quota_release_and_finish(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
) -> None:
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        job = await c.create(_dispatched("mk"))
        wl = await _workload(c)
        name = wl["metadata"]["name"]
        assert name.startswith("distgnnjob-mk-")
        (ref,) = wl["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (
            "DistGNNJob",
            job["metadata"]["uid"],
            True,
        )
        assert wl["spec"]["queueName"] == "team-a" and wl["spec"]["active"] is True
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("servers", 2),
            ("trainers", 2),
        ]
        assert await c.status("DistGNNJob", "mk") == {}
        await quiet_pass(c, "mk", 1)  # waiting for admission
        # Kueue admits it (MultiKueue's check Ready), MultiKueue copies the running status
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await c.patch("DistGNNJob", "mk", {"status": _mirror("Running")}, "status")
        await quiet_pass(c, "mk", 2)
        assert (await c.status("DistGNNJob", "mk"))["phase"] == "Running"
        # Kueue evicts it: the copy still runs, so the quota stays reserved
        evicted = {
            "conditions": [
                *ADMITTED["conditions"],
                _c("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
            ]
        }
        await c.patch("Workload", name, {"status": evicted}, "status")
        await quiet_pass(c, "mk", 3)
        got = await c.get("Workload", name)
        assert got is not None and got["status"].get("admission")
        # the worker's operator stopped the copy; MultiKueue copies that back: released
        stopped = _mirror("Suspended", "WaitingForAdmission", "evicted by Kueue (Preempted)")
        await c.patch("DistGNNJob", "mk", {"status": stopped}, "status")

        async def released() -> dict[str, Any] | None:
            got = await c.get("Workload", name)
            qr = cond(got["status"], "QuotaReserved") if got else {}
            ok = got and not got["status"].get("admission") and qr["status"] == "False"
            return got if ok else None

        wl = await c.until("quota released", released)
        assert cond(wl["status"], "QuotaReserved")["reason"] == "Pending"
        assert cond(wl["status"], "Admitted")["reason"] == "NoReservation"
        await c.event("mk", "QuotaReleased")
        await quiet_pass(c, "mk", 4)  # released: nothing more
        # admitted again; the copy runs, then succeeds: the Workload is Finished, once
        again = {
            "admission": ADMITTED["admission"],
            "conditions": [*ADMITTED["conditions"], _c("Evicted", "False", "QuotaReserved")],
        }
        await c.patch("Workload", name, {"status": again}, "status")
        await c.patch("DistGNNJob", "mk", {"status": _mirror("Running")}, "status")
        await quiet_pass(c, "mk", 5)
        await c.patch("DistGNNJob", "mk", {"status": _mirror("Succeeded")}, "status")

        async def finished() -> dict[str, Any] | None:
            got = await c.get("Workload", name)
            fin = cond(got["status"], "Finished") if got else {}
            return got if fin.get("status") == "True" else None

        wl = await c.until("the Workload Finished", finished)
        assert cond(wl["status"], "Finished")["reason"] == "Succeeded"
        await quiet_pass(c, "mk", 6)  # finished: the Workload is not written again
        await _left_alone(c, "mk")


async def test_multikueue_job_suspended_deactivates_its_workload(
    cluster: Cluster,  # noqa: F811
) -> None:
    """Suspended by its user on the manager cluster: the Workload is deactivated (Kueue
    evicts it; MultiKueue then evicts and deletes the worker's copy); resumed, it is
    queued again. A job of another controller, or of MultiKueue's without a queue, gets
    nothing."""
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        await c.create(_dispatched("mks"))
        other = _dispatched("other")
        other["spec"]["managedBy"] = "example.com/other"
        await c.create(other)
        noqueue = _dispatched("noqueue")
        noqueue["metadata"]["labels"] = {}
        await c.create(noqueue)
        wl = await _workload(c)
        name = wl["metadata"]["name"]
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await c.patch("DistGNNJob", "mks", {"status": _mirror("Running")}, "status")
        await c.patch("DistGNNJob", "mks", {"spec": {"runPolicy": {"suspend": True}}})

        async def deactivated() -> bool:
            got = await c.get("Workload", name)
            return bool(got) and got["spec"]["active"] is False

        await c.until("the Workload deactivated", deactivated)
        await c.event("mks", "Deactivated")
        await quiet_pass(c, "mks", 1)
        await c.patch("DistGNNJob", "mks", {"spec": {"runPolicy": {"suspend": False}}})

        async def reactivated() -> bool:
            got = await c.get("Workload", name)
            return bool(got) and got["spec"]["active"] is True

        await c.until("the Workload active again", reactivated)
        await _left_alone(c, "mks")
        assert [w["metadata"]["name"] for w in await c.items("Workload")] == [name]
        for job in ("other", "noqueue"):
            assert await c.status("DistGNNJob", job) == {}
            assert await c.events(job) == []
            await _left_alone(c, job)
