"""MultiKueue on the manager cluster: which jobs are dispatched, and what the mirrored status
of one means for its Workload (distgnn_operator.multikueue)."""

from __future__ import annotations

from typing import Any

from distgnn import contract
from distgnn_operator import kueue as kq
from distgnn_operator import multikueue as mk

NOW = "2026-01-01T00:00:00Z"


def _c(typ: str, status: str = "True", reason: str = "R", message: str = "") -> dict[str, Any]:
    return {"type": typ, "status": status, "reason": reason, "message": message}


def _wl(*conds: dict[str, Any], partition: bool = False) -> dict[str, Any]:
    sets = [{"name": "servers", "count": 2}, {"name": "trainers", "count": 2}]
    if partition:
        sets.insert(0, {"name": "partition", "count": 1})
    st: dict[str, Any] = {"conditions": list(conds)}
    if any(c["type"] == "QuotaReserved" and c["status"] == "True" for c in conds):
        st["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    return {"metadata": {"name": "wl", "namespace": "ml"}, "spec": {"podSets": sets}, "status": st}


ADMITTED = (_c("QuotaReserved"), _c("Admitted"))
EVICTED = (*ADMITTED, _c("Evicted", reason="Preempted", message="Preempted by w2"))


def _job(managed_by: str | None, queue: str | None) -> dict[str, Any]:
    spec = {} if managed_by is None else {"managedBy": managed_by}
    labels = {} if queue is None else {kq.QUEUE_LABEL: queue}
    return {"metadata": {"name": "j", "labels": labels}, "spec": spec}


def test_dispatched_is_multikueues_job_with_a_queue() -> None:
    assert mk.dispatched(_job(mk.CONTROLLER, "team-a"))
    assert not mk.dispatched(_job(mk.CONTROLLER, None))  # no queue: nothing to admit
    assert not mk.dispatched(_job("example.com/other", "team-a"))
    assert not mk.dispatched(_job(None, "team-a"))  # ours: the whole integration
    assert not mk.dispatched(_job(contract.CONTROLLER_NAME, "team-a"))


def test_remote_active_by_the_mirrored_phase() -> None:
    assert not mk.remote_active(None)  # not copied back yet
    assert not mk.remote_active({})
    for idle in ("Suspended", "Succeeded", "Failed"):
        assert not mk.remote_active({"phase": idle})
    for busy in ("Pending", "Partitioning", "Starting", "Running"):
        assert mk.remote_active({"phase": busy})


def test_finished_copy_finishes_the_workload_once() -> None:
    failed = {
        "phase": "Failed",
        "conditions": [_c("Failed", reason="BackoffLimitExceeded", message="trainer exit 1")],
    }
    p = mk.plan(_wl(*ADMITTED), failed, NOW)
    assert p.finish is not None and p.release is None and p.reclaim is None
    (fin,) = [c for c in p.finish["status"]["conditions"] if c["type"] == "Finished"]
    assert (fin["status"], fin["reason"], fin["message"]) == ("True", "Failed", "trainer exit 1")
    done = mk.plan(_wl(*ADMITTED), {"phase": "Succeeded"}, NOW).finish
    assert done is not None
    assert [c["reason"] for c in done["status"]["conditions"] if c["type"] == "Finished"] == [
        "Succeeded"
    ]
    # evicted, yet finished: Finished wins (the quota goes back with it)
    assert mk.plan(_wl(*EVICTED), {"phase": "Succeeded"}, NOW).finish is not None
    assert mk.plan(_wl(*ADMITTED, _c("Finished")), {"phase": "Succeeded"}, NOW).patches == []


def test_eviction_releases_the_quota_only_once_the_copy_stopped() -> None:
    assert mk.plan(_wl(*EVICTED), {"phase": "Running"}, NOW).patches == []
    for idle in (None, {"phase": "Suspended"}):
        p = mk.plan(_wl(*EVICTED), idle, NOW)
        assert p.release is not None and p.finish is None
        qr = next(c for c in p.release["status"]["conditions"] if c["type"] == "QuotaReserved")
        want = ("False", "Pending", "Preempted by w2")
        assert (qr["status"], qr["reason"], qr["message"]) == want
        assert p.release["status"]["admission"] is None
    # released already (no reservation left): nothing more
    released = _wl(_c("QuotaReserved", "False"), _c("Evicted", reason="Preempted"))
    assert mk.plan(released, {"phase": "Suspended"}, NOW).patches == []


def test_waiting_or_running_writes_nothing_but_the_partitioning_pods_reclaim() -> None:
    assert mk.plan(_wl(), None, NOW).patches == []  # not admitted
    assert mk.plan(_wl(*ADMITTED), {"phase": "Running"}, NOW).patches == []
    parted = {"phase": "Running", "conditions": [_c("Partitioned", reason="PartitionsReady")]}
    p = mk.plan(_wl(*ADMITTED, partition=True), parted, NOW)
    assert p.reclaim == {"status": {"reclaimablePods": [{"name": "partition", "count": 1}]}}
    assert mk.plan(_wl(partition=True), parted, NOW).patches == []  # not admitted
    reclaimed = _wl(*ADMITTED, partition=True)
    reclaimed["status"]["reclaimablePods"] = [{"name": "partition", "count": 1}]
    assert mk.plan(reclaimed, parted, NOW).patches == []
    running = {"phase": "Running", "conditions": [_c("Partitioned", "False", "Partitioning")]}
    assert mk.plan(_wl(*ADMITTED, partition=True), running, NOW).patches == []
