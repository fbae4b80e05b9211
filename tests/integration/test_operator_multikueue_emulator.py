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
    _servers_ready,
    assert_settled,
    cluster,
    cond,
    job_manifest,
    make_args,
    st_msg,
)
from test_operator_kueue_emulator import NOW, QUEUE, _c, _workload
from test_operator_managed_by import CHILDREN, OPERATOR_AGENTS

from distgnn.api import parse_job
from distgnn_operator import kueue as kq
from distgnn_operator.desired import DesiredContext
from distgnn_operator.finalizer import FINALIZER

pytestmark = pytest.mark.timeout(180)

MULTIKUEUE = "kueue.x-k8s.io/multikueue"


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


PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN = "kueue.x-k8s.io/multikueue-origin"


def _copy(name: str, workload: str, **spec: Any) -> dict[str, Any]:
    """The worker's copy of a dispatched job, as MultiKueue's generic adapter creates it:
    ``spec.managedBy`` removed, the prebuilt Workload and origin labels added."""
    obj = _dispatched(name, **spec)
    del obj["spec"]["managedBy"]
    obj["metadata"]["labels"] |= {PREBUILT: workload, ORIGIN: "manager"}
    return obj


def _remote_workload(name: str, workload: str, **spec: Any) -> dict[str, Any]:
    """The worker's Workload as MultiKueue creates it: the manager's (built by the manager's
    operator for the job there), its name, labels and spec, no owner; origin label."""
    manager = _dispatched(name, **spec)
    manager["metadata"] |= {"namespace": "default", "uid": "manager-uid"}
    ctx = DesiredContext(runtime_image="example.org/distgnn:test", partitions_url="s3://parts")
    wl = kq.workload(parse_job(manager), "team-a", ctx)
    md = wl["metadata"]
    wl["metadata"] = {
        "name": workload,
        "namespace": md["namespace"],
        "labels": {**md["labels"], ORIGIN: "manager"},
        "annotations": md["annotations"],
    }
    return wl


async def test_worker_copy_runs_on_the_prebuilt_workload_and_finishes_it_after_its_status(
    cluster: Cluster,  # noqa: F811
) -> None:
    """On a worker cluster the copy's Workload is MultiKueue's (its label names it): the
    operator waits for it, takes it (owner reference) instead of building its own, runs the
    copy once it is admitted, and marks it Finished only after the copy's final status is
    written (MultiKueue copies that status back when it sees the Workload finished)."""
    c = cluster
    wname = "distgnnjob-mkw-0a1b2"
    async with Operator(make_args(1, "--kueue")):
        job = await c.create(_copy("mkw", wname))
        st = await c.reason("DistGNNJob", "mkw", "WaitingForAdmission")
        assert f"waiting for Workload {wname} ({PREBUILT}) to exist" in st_msg(st)
        await c.create(_remote_workload("mkw", wname))

        async def taken() -> dict[str, Any] | None:
            got = await c.get("Workload", wname)
            refs = (got or {}).get("metadata", {}).get("ownerReferences") or []
            return got if refs else None

        wl = await c.until("the prebuilt Workload taken", taken)
        (ref,) = wl["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (
            "DistGNNJob",
            job["metadata"]["uid"],
            True,
        )
        assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
        await c.reason("DistGNNJob", "mkw", "WaitingForAdmission")
        assert [w["metadata"]["name"] for w in await c.items("Workload")] == [wname]
        await assert_settled(c)  # waiting for the worker's Kueue: nothing written
        # the worker's Kueue admits it: the copy runs
        await c.patch("Workload", wname, {"status": ADMITTED}, "status")
        await _servers_ready(c, "mkw-server", 2)
        await c.child("Job", "mkw-trainers")
        done = {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}
        n = len(c.k.writes)
        await c.patch("Job", "mkw-trainers", {"status": done}, "status")

        async def finished() -> dict[str, Any] | None:
            got = await c.get("Workload", wname)
            fin = cond(got["status"], "Finished") if got else {}
            return got if fin.get("status") == "True" else None

        wl = await c.until("the prebuilt Workload Finished", finished)
        assert cond(wl["status"], "Finished")["reason"] == "Succeeded"
        assert (await c.status("DistGNNJob", "mkw"))["phase"] == "Succeeded"
        order = [
            w.plural
            for w in c.k.writes_since(n)
            if w.agent.startswith(OPERATOR_AGENTS)
            and w.path.endswith("/status")
            and w.plural in ("distgnnjobs", "workloads")
        ]
        assert order.index("distgnnjobs") < order.index("workloads"), order
        assert [w["metadata"]["name"] for w in await c.items("Workload")] == [wname]
        await assert_settled(c)  # finished: nothing more


async def test_worker_copy_whose_prebuilt_workload_is_out_of_sync_finishes_it(
    cluster: Cluster,  # noqa: F811
) -> None:
    """A prebuilt Workload whose pod sets are not the copy's (here 3 trainers for 2) is
    finished with reason OutOfSync, as Kueue's jobframework does; the copy never runs."""
    c = cluster
    wname = "distgnnjob-mko-0a1b2"
    async with Operator(make_args(1, "--kueue")):
        trainers = {"replicas": 3, "app": {"name": "node-classification", "epochs": 1}}
        wl = _remote_workload("mko", wname, trainers=trainers)
        wl["status"] = ADMITTED
        await c.create(wl)
        await c.patch("Workload", wname, {"status": ADMITTED}, "status")
        await c.create(_copy("mko", wname))

        async def finished() -> dict[str, Any] | None:
            got = await c.get("Workload", wname)
            fin = cond(got["status"], "Finished") if got else {}
            return got if fin.get("status") == "True" else None

        wl = await c.until("the prebuilt Workload Finished", finished)
        assert cond(wl["status"], "Finished")["reason"] == "OutOfSync"
        st = await c.reason("DistGNNJob", "mko", "WaitingForAdmission")
        assert "is finished (OutOfSync: The prebuilt workload is out of sync" in st_msg(st)
        await c.event("mko", "OutOfSync")
        assert await c.get("Job", "mko-trainers") is None
        sts = await c.get("StatefulSet", "mko-server")
        assert sts is None or sts["spec"]["replicas"] == 0
        await assert_settled(c)
