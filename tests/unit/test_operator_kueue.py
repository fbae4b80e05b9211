"""The Kueue integration's pure part: the Workload built for a job and what its status
means (distgnn_operator.kueue)."""

from __future__ import annotations

import copy
from typing import Any

from distgnn import contract
from distgnn.api import parse_job
from distgnn_operator import kueue as kq
from distgnn_operator.desired import DesiredContext

GV = f"{contract.API_GROUP}/{contract.API_VERSION}"
CTX = DesiredContext(runtime_image="example.org/distgnn:test", partitions_url="s3://parts")
JOB: dict[str, Any] = {
    "apiVersion": GV,
    "kind": "DistGNNJob",
    "metadata": {
        "name": "cora",
        "namespace": "ml",
        "uid": "uid-job",
        "labels": {kq.QUEUE_LABEL: "team-a"},
    },
    "spec": {
        "graph": {"partitions": {"manifestURL": "s3://p/cora.json"}},
        "partitioning": {"numParts": 3},
        "servers": {
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
            "podTemplate": {
                "nodeSelector": {"pool": "mem"},
                "tolerations": [{"key": "mem", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        "trainers": {
            "replicas": 4,
            "resources": {"limits": {"cpu": 4, "memory": "8Gi"}},
            "app": {"name": "node-classification", "epochs": 1},
        },
        "runPolicy": {"suspend": True, "schedulingPolicy": {"priorityClassName": "high"}},
    },
}


def _job(**spec: Any) -> Any:
    obj = copy.deepcopy(JOB)
    obj["spec"].update(spec)
    return parse_job(obj)


def test_queue_name_is_the_label() -> None:
    assert kq.queue_name(JOB) == "team-a"
    assert kq.queue_name({"metadata": {"labels": {}}}) is None
    assert kq.queue_name({"metadata": {}}) is None


def test_workload_name_is_short_stable_and_per_incarnation() -> None:
    assert kq.workload_name("cora", "u1") == kq.workload_name("cora", "u1")
    assert kq.workload_name("cora", "u1") != kq.workload_name("cora", "u2")
    assert kq.workload_name("cora", "u1").startswith("distgnnjob-cora-")
    long = kq.workload_name("x" * 63, "u")
    assert len(long) == 63 and long.startswith("distgnnjob-xxx")


def test_workload_pod_sets_servers_and_trainers() -> None:
    wl = kq.workload(_job(), "team-a", CTX)
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1" and wl["kind"] == "Workload"
    md = wl["metadata"]
    assert md["name"] == kq.workload_name("cora", "uid-job") and md["namespace"] == "ml"
    (ref,) = md["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "DistGNNJob",
        "cora",
        "uid-job",
        True,
    )
    assert wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["priorityClassName"] == "high"
    servers, trainers = wl["spec"]["podSets"]
    assert (servers["name"], servers["count"]) == ("servers", 3)  # suspend does not count
    assert (trainers["name"], trainers["count"]) == ("trainers", 4)
    spod = servers["template"]["spec"]
    assert spod["nodeSelector"] == {"pool": "mem"}
    assert spod["tolerations"][0]["key"] == "mem"
    (sc,) = spod["containers"]
    assert sc["resources"]["requests"]["memory"] == "2Gi"
    assert set(sc) <= set(kq.CONTAINER_FIELDS)  # no env, probes, volumes, ...
    tc = trainers["template"]["spec"]["containers"][0]
    assert tc["resources"]["limits"]["memory"] == "8Gi"
    assert "volumes" not in trainers["template"]["spec"]


def test_workload_of_attached_and_colocated_jobs_has_only_trainers() -> None:
    attached = _job(graph={"graphServer": {"name": "papers"}})
    (only,) = kq.workload(attached, "q", CTX)["spec"]["podSets"]
    assert (only["name"], only["count"]) == ("trainers", 4)
    colocated = copy.deepcopy(JOB)
    colocated["spec"]["trainers"]["replicas"] = 3
    colocated["spec"]["trainers"]["colocate"] = True
    (only,) = kq.workload(parse_job(colocated), "q", CTX)["spec"]["podSets"]
    assert (only["name"], only["count"]) == ("trainers", 3)
    names = [c["name"] for c in only["template"]["spec"].get("initContainers", [])]
    assert names, "the server sidecar's resources count"
    plain = copy.deepcopy(JOB)
    del plain["spec"]["runPolicy"]
    assert "priorityClassName" not in kq.workload(parse_job(plain), "q", CTX)["spec"]


def _wl(*conds: tuple[str, str], admission: bool = False) -> dict[str, Any]:
    st: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": "R", "message": f"{t} msg"} for t, s in conds
        ]
    }
    if admission:
        st["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    return {"metadata": {"name": "wl"}, "status": st}


def test_decide_runs_only_when_admitted_and_not_evicted() -> None:
    assert not kq.decide(None, "q").run
    assert "waiting for Kueue to admit Workload" in kq.decide(_wl(), "q").message
    # quota reserved but admission checks pending: Admitted is not True yet
    assert not kq.decide(_wl(("QuotaReserved", "True")), "q").run
    assert kq.decide(_wl(("QuotaReserved", "True"), ("Admitted", "True")), "q").run
    evicted = kq.decide(
        _wl(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True),
        "q",
    )
    assert not evicted.run and evicted.release
    assert evicted.message.startswith("evicted by Kueue (R: Evicted msg)")
    released = kq.decide(_wl(("QuotaReserved", "False"), ("Evicted", "True")), "q")
    assert not released.run and not released.release and "again" in released.message


def test_release_status_clears_the_reservation() -> None:
    wl = _wl(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    patch = kq.release_status(wl, "2026-01-01T00:00:00Z")["status"]
    assert patch["admission"] is None
    conds = {c["type"]: c for c in patch["conditions"]}
    assert conds["QuotaReserved"]["status"] == "False"
    assert conds["QuotaReserved"]["reason"] == "Pending"
    assert conds["QuotaReserved"]["message"] == "Evicted msg"
    assert conds["Admitted"]["status"] == "False"
    assert conds["Evicted"]["status"] == "True"  # Kueue's, kept
    patched = {"metadata": wl["metadata"], "status": patch}
    assert not kq.decide(patched, "q").release


def test_finished_status() -> None:
    wl = _wl(("Admitted", "True"))
    conds = kq.finished_status(wl, False, "boom", "t")["status"]["conditions"]
    fin = next(c for c in conds if c["type"] == "Finished")
    assert (fin["status"], fin["reason"], fin["message"]) == ("True", "Failed", "boom")
    assert kq.condition({"status": {"conditions": conds}}, "Finished") is not None
    ok = kq.finished_status(wl, True, "done", "t")["status"]["conditions"]
    assert next(c for c in ok if c["type"] == "Finished")["reason"] == "Succeeded"


def test_workload_of_a_source_graph_has_the_partitioning_pod_set_first() -> None:
    wl = kq.workload(_job(graph={"source": {"url": "s3://g/cora.npz"}}), "q", CTX)
    part, servers, trainers = wl["spec"]["podSets"]
    assert (part["name"], part["count"]) == ("partition", 1)
    (pc,) = part["template"]["spec"]["containers"]
    assert pc["resources"]["requests"]["memory"] == "2Gi"  # the servers' resources
    assert part["template"]["spec"]["nodeSelector"] == {"pool": "mem"}
    assert (servers["name"], trainers["name"]) == ("servers", "trainers")


def test_workload_active_follows_suspend_and_its_hash_does_not() -> None:
    suspended = kq.workload(_job(), "q", CTX)
    running = kq.workload(_job(runPolicy={}), "q", CTX)
    assert suspended["spec"]["active"] is False and running["spec"]["active"] is True
    assert not kq.is_active(suspended) and kq.is_active(running)
    assert kq.is_active({"spec": {}})  # absent: active
    assert "priorityClassName" not in running["spec"]  # runPolicy {} has no priority
    again = kq.workload(_job(), "q", CTX)
    assert kq.matches(suspended, again)  # built from the same spec


def test_matches_tells_apart_changed_pod_sets_queue_and_older_workloads() -> None:
    wl = kq.workload(_job(), "q", CTX)
    more = copy.deepcopy(JOB)
    more["spec"]["trainers"]["replicas"] = 5
    assert not kq.matches(wl, kq.workload(parse_job(more), "q", CTX))
    bigger = copy.deepcopy(JOB)
    bigger["spec"]["servers"]["resources"]["requests"]["memory"] = "4Gi"
    assert not kq.matches(wl, kq.workload(parse_job(bigger), "q", CTX))
    assert not kq.matches(wl, kq.workload(_job(), "other-queue", CTX))
    older = copy.deepcopy(wl)
    del older["metadata"]["annotations"]
    assert not kq.matches(older, wl)


def test_reserved_is_a_quota_reservation_or_an_admission() -> None:
    assert not kq.reserved(None) and not kq.reserved(_wl())
    assert kq.reserved(_wl(("QuotaReserved", "True")))
    assert kq.reserved(_wl(("Admitted", "True")))
    assert kq.reserved(_wl(("QuotaReserved", "False"), admission=True))
    assert not kq.reserved(_wl(("QuotaReserved", "False"), ("Evicted", "True")))


def test_reclaim_status_gives_back_the_partitioning_pod_once() -> None:
    wl = kq.workload(_job(graph={"source": {"url": "s3://g/cora.npz"}}), "q", CTX)
    patch = kq.reclaim_status(wl)
    assert patch == {"status": {"reclaimablePods": [{"name": "partition", "count": 1}]}}
    wl["status"] = patch["status"]
    assert kq.reclaim_status(wl) is None  # already said: nothing to write
    assert kq.reclaim_status(kq.workload(_job(), "q", CTX)) is None  # no partition pod set


def test_finished_status_reason_failed_to_start() -> None:
    conds = kq.finished_status(_wl(), False, "conflict", "t", reason=kq.FAILED_TO_START)
    fin = conds["status"]["conditions"][-1]
    assert (fin["type"], fin["reason"], fin["message"]) == ("Finished", "FailedToStart", "conflict")


def test_prebuilt_is_the_label() -> None:
    obj = copy.deepcopy(JOB)
    assert kq.prebuilt(obj) is None
    obj["metadata"]["labels"][kq.PREBUILT_LABEL] = "distgnnjob-cora-abcde"
    assert kq.prebuilt(obj) == "distgnnjob-cora-abcde"


def test_equivalent_compares_counts_tolerations_and_resources_only() -> None:
    built = kq.workload(_job(), "team-a", CTX)
    stored = copy.deepcopy(built)
    assert kq.equivalent(stored, built)
    other_image = copy.deepcopy(built)  # another cluster's operator settings: same Workload
    for ps in other_image["spec"]["podSets"]:
        for c in ps["template"]["spec"]["containers"]:
            c["image"] = "mirror.example.org/distgnn:test"
    assert kq.equivalent(other_image, built)
    canonical = copy.deepcopy(built)  # quantities as a server may store them
    res = canonical["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["cpu"] = "1000m"
    assert kq.equivalent(canonical, built)
    for change in ("count", "resources", "tolerations", "name", "length"):
        bad = copy.deepcopy(built)
        ps = bad["spec"]["podSets"][1]
        spec = ps["template"]["spec"]
        if change == "count":
            ps["count"] += 1
        elif change == "resources":
            spec["containers"][0]["resources"] = {"limits": {"cpu": "5"}}
        elif change == "tolerations":
            spec["tolerations"] = [{"key": "x", "operator": "Exists"}]
        elif change == "name":
            ps["name"] = "workers"
        else:
            bad["spec"]["podSets"].pop()
        assert not kq.equivalent(bad, built), change


def test_adopt_patch_makes_the_job_its_controller_once() -> None:
    job = _job()
    wl: dict[str, Any] = {
        "metadata": {"name": "w", "labels": {"kueue.x-k8s.io/multikueue-origin": "m"}}
    }
    patch = kq.adopt_patch(wl, job)
    assert patch is not None
    (ref,) = patch["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("DistGNNJob", "uid-job", True)
    assert patch["metadata"]["labels"] == {
        contract.LABEL_MANAGED_BY: contract.MANAGED_BY,
        contract.LABEL_JOB: "cora",
        kq.JOB_UID_LABEL: "uid-job",
    }
    taken = copy.deepcopy(wl)
    taken["metadata"]["ownerReferences"] = patch["metadata"]["ownerReferences"]
    taken["metadata"]["labels"].update(patch["metadata"]["labels"])
    assert kq.adopt_patch(taken, job) is None
    assert kq.foreign_controller(taken, "uid-job") is None
    assert kq.foreign_controller(taken, "uid-other") == "DistGNNJob cora"
    assert kq.foreign_controller(wl, "uid-job") is None


def test_activation_follows_a_change_of_the_users_suspend_only() -> None:
    def wl(active: bool, recorded: str | None) -> dict[str, Any]:
        ann = {} if recorded is None else {kq.ANN_SUSPEND: recorded}
        return {"metadata": {"annotations": ann}, "spec": {"active": active}}

    # the user's suspend changed: flipped, and recorded
    assert kq.activation_patch(wl(True, "false"), True) == {
        "metadata": {"annotations": {kq.ANN_SUSPEND: "true"}},
        "spec": {"active": False},
    }
    assert kq.activation_patch(wl(False, "true"), False) == {
        "metadata": {"annotations": {kq.ANN_SUSPEND: "false"}},
        "spec": {"active": True},
    }
    # unchanged: nothing, whatever spec.active is (Kueue may have deactivated it)
    assert kq.activation_patch(wl(False, "false"), False) is None
    assert kq.activation_patch(wl(True, "false"), False) is None
    # an older operator's Workload (no record): spec.active follows the suspend
    assert kq.activation_patch(wl(True, None), False) is None
    assert kq.activation_patch(wl(True, None), True) is not None
    # finished or deleting: never
    done = wl(True, "false") | {"status": {"conditions": [{"type": "Finished", "status": "True"}]}}
    assert kq.activation_patch(done, True) is None
