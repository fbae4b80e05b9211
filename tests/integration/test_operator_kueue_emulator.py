"""The Kueue integration (``--kueue``) against the emulator: the job's Workload, admission,
eviction and the Finished condition, with Kueue's part played by the test (it patches the
Workload's status as Kueue's controllers do)."""

from __future__ import annotations

import argparse
from typing import Any

from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    _servers_ready,
    assert_settled,
    cluster,
    cond,
    job_manifest,
    make_args,
    operator_args,
    phase_reason,
    st_msg,
)

QUEUE = "kueue.x-k8s.io/queue-name"
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
    "conditions": [
        _c("QuotaReserved", "True", "QuotaReserved"),
        _c("Admitted", "True", "Admitted"),
    ],
}


def _queued(name: str) -> dict[str, Any]:
    obj = job_manifest(name, graph={"partitions": {"manifestURL": "s3://p/x.json"}})
    obj["metadata"]["labels"] = {QUEUE: "team-a"}
    return obj


async def _workload(c: Cluster) -> dict[str, Any]:
    async def one() -> dict[str, Any] | None:
        items = await c.items("Workload")
        return items[0] if items else None

    return dict(await c.until("the job's Workload", one))


async def _stopped(c: Cluster, name: str) -> bool:
    sts = await c.get("StatefulSet", f"{name}-server")
    return await c.get("Job", f"{name}-trainers") is None and (
        sts is None or sts["spec"]["replicas"] == 0
    )


async def test_kueue_workload_admission_eviction_and_finish(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
) -> None:
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        job = await c.create(_queued("kq"))
        wl = await _workload(c)
        name = wl["metadata"]["name"]
        assert name.startswith("distgnnjob-kq-")
        (ref,) = wl["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (
            "DistGNNJob",
            job["metadata"]["uid"],
            True,
        )
        assert wl["spec"]["queueName"] == "team-a"
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("servers", 2),
            ("trainers", 2),
        ]
        # held until admitted: no pods
        st = await c.reason("DistGNNJob", "kq", "WaitingForAdmission")
        assert st["phase"] == "Suspended" and "LocalQueue team-a" in st_msg(st)
        assert cond(st, "Suspended")["status"] == "True"
        assert await _stopped(c, "kq")
        await assert_settled(c)  # a waiting job's passes write nothing
        # Kueue admits it: the job runs as if never suspended
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await _servers_ready(c, "kq-server", 2)
        await c.child("Job", "kq-trainers")
        st = await c.phase("DistGNNJob", "kq", "Starting")
        assert cond(st, "Suspended")["status"] == "False"
        # Kueue evicts it (preempted): stopped, and its quota reservation released
        evicted = {
            "conditions": [
                *ADMITTED["conditions"],
                _c("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
            ]
        }
        await c.patch("Workload", name, {"status": evicted}, "status")
        await c.until("the job stopped", lambda: _stopped(c, "kq"))

        async def released() -> dict[str, Any] | None:
            got = await c.get("Workload", name)
            qr = cond(got["status"], "QuotaReserved") if got else {}
            ok = got and not got["status"].get("admission") and qr["status"] == "False"
            return got if ok else None

        wl = await c.until("quota released", released)
        assert cond(wl["status"], "QuotaReserved")["reason"] == "Pending"
        assert cond(wl["status"], "Admitted")["status"] == "False"
        st = await c.reason("DistGNNJob", "kq", "WaitingForAdmission")
        assert "evicted by Kueue (Preempted" in st_msg(st) and st["phase"] == "Suspended"
        # admitted again; the trainers succeed: the Workload is Finished, once
        again = {
            "admission": ADMITTED["admission"],
            "conditions": [*ADMITTED["conditions"], _c("Evicted", "False", "QuotaReserved")],
        }
        await c.patch("Workload", name, {"status": again}, "status")
        await _servers_ready(c, "kq-server", 2)
        await c.child("Job", "kq-trainers")
        done = {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}
        await c.patch("Job", "kq-trainers", {"status": done}, "status")
        st = await c.phase("DistGNNJob", "kq", "Succeeded")
        wl = await c.get("Workload", name)
        assert wl is not None
        fin = cond(wl["status"], "Finished")
        assert (fin["status"], fin["reason"]) == ("True", "Succeeded")
        assert phase_reason(st) != "WaitingForAdmission"
        await assert_settled(c)  # finished: the Workload is not written again


async def test_queue_label_is_ignored_without_kueue(
    cluster: Cluster,  # noqa: F811
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(_queued("plain"))
        await _servers_ready(c, "plain-server", 2)
        await c.child("Job", "plain-trainers")
        assert await c.items("Workload") == []
