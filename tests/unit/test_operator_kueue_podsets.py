"""The flavors Kueue assigns, put on a job's pod templates (distgnn_operator.kueue_podsets):
pure builders, as Kueue's podset.FromAssignment and podset.Merge."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distgnn.api import parse_job
from distgnn_operator import desired as d
from distgnn_operator import kueue_podsets as kp
from distgnn_operator.desired import DesiredContext

CTX = DesiredContext(runtime_image="example.org/distgnn:test", partitions_url="s3://parts")
TOL = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS: dict[str, dict[str, Any]] = {
    "spot": {"spec": {"nodeLabels": {"spot": "true", "zone": "a"}, "tolerations": [TOL]}},
    "gpu": {"spec": {"nodeLabels": {"zone": "b", "gpu": "a100"}}},
    "plain": {"spec": {}},
}


def _wl(*sets: tuple[str, dict[str, str]]) -> dict[str, Any]:
    psa = [{"name": n, "flavors": fl, "count": 1} for n, fl in sets]
    return {"status": {"admission": {"clusterQueue": "cq", "podSetAssignments": psa}}}


def test_flavor_names_each_once_and_none_without_admission() -> None:
    wl = _wl(("servers", {"cpu": "spot", "memory": "spot"}), ("trainers", {"gpu": "gpu"}))
    assert kp.flavor_names(wl) == ["spot", "gpu"]
    assert kp.flavor_names(None) == [] and kp.flavor_names({"status": {}}) == []


def test_pod_set_infos_merge_flavors_first_wins_and_append_tolerations() -> None:
    # resource order: cpu (spot) before nvidia.com/gpu (gpu): spot's zone wins
    wl = _wl(
        ("trainers", {"nvidia.com/gpu": "gpu", "cpu": "spot"}),
        ("servers", {"cpu": "plain"}),
    )
    infos = kp.pod_set_infos(wl, FLAVORS)
    assert infos["trainers"].node_selector == {"spot": "true", "zone": "a", "gpu": "a100"}
    assert infos["trainers"].tolerations == [TOL]
    assert infos["servers"] == kp.PodSetInfo()


def test_merge_keeps_the_users_fields_and_refuses_a_conflict() -> None:
    info = kp.PodSetInfo({"spot": "true"}, [TOL])
    pod = {"nodeSelector": {"pool": "mem", "spot": "true"}, "tolerations": [TOL], "x": 1}
    out = kp.merge(pod, info, "servers")
    assert out == {"nodeSelector": {"pool": "mem", "spot": "true"}, "tolerations": [TOL], "x": 1}
    assert kp.merge({}, info, "servers") == {"nodeSelector": {"spot": "true"}, "tolerations": [TOL]}
    assert kp.merge({}, kp.PodSetInfo(), "servers") == {}
    with pytest.raises(kp.PodSetConflict, match="spot=false of pod set trainers"):
        kp.merge({"nodeSelector": {"spot": "false"}}, info, "trainers")


def test_a_toleration_two_flavors_share_goes_on_the_pod_once() -> None:
    # cpu on spot, nvidia.com/gpu on a GPU flavor tolerating the same spot taint: Kueue's
    # PodSetInfo.Merge appends each toleration once
    flavors = {**FLAVORS, "spot-gpu": {"spec": {"tolerations": [dict(TOL)]}}}
    wl = _wl(("trainers", {"cpu": "spot", "nvidia.com/gpu": "spot-gpu"}))
    info = kp.pod_set_infos(wl, flavors)["trainers"]
    assert info.tolerations == [TOL]
    assert kp.merge({}, kp.PodSetInfo({}, [TOL, dict(TOL)]), "trainers") == {"tolerations": [TOL]}


def test_check_names_the_first_conflicting_pod_set() -> None:
    sets = [
        {"name": "servers", "template": {"spec": {"nodeSelector": {"zone": "a"}}}},
        {"name": "trainers", "template": {"spec": {"nodeSelector": {"zone": "c"}}}},
    ]
    infos = {"servers": kp.PodSetInfo({"zone": "a"}), "trainers": kp.PodSetInfo({"zone": "b"})}
    why = kp.check(sets, infos)
    assert why is not None and "zone=c of pod set trainers" in why and "zone=b" in why
    assert kp.check(sets, {"servers": infos["servers"]}) is None


def _children(source: bool) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {
        "graph": {"source": {"url": "s3://g/x.npz"}}
        if source
        else {"partitions": {"manifestURL": "s3://p/x.json"}},
        "partitioning": {"numParts": 2},
        "servers": {"podTemplate": {"nodeSelector": {"pool": "mem"}}},
        "trainers": {"replicas": 2, "app": {"name": "node-classification", "epochs": 1}},
    }
    job = parse_job(
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "DistGNNJob",
            "metadata": {"name": "j", "namespace": "ml", "uid": "u"},
            "spec": spec,
        }
    )
    return d.desired_job_children(job, CTX)


def test_inject_puts_each_pod_sets_info_on_its_child_only() -> None:
    kids = _children(source=True)
    before = copy.deepcopy(kids)
    infos = {
        "servers": kp.PodSetInfo({"spot": "true"}, [TOL]),
        "trainers": kp.PodSetInfo({"gpu": "a100"}),
        "partition": kp.PodSetInfo({"zone": "a"}),
    }
    out = kp.inject(kids, infos, "j")
    assert kids == before  # the input is not changed
    by = {(k["kind"], k["metadata"]["name"]): k for k in out}

    def pod(kind: str, name: str) -> dict[str, Any]:
        return dict(by[(kind, name)]["spec"]["template"]["spec"])

    assert pod("StatefulSet", "j-server")["nodeSelector"] == {"pool": "mem", "spot": "true"}
    assert pod("StatefulSet", "j-server")["tolerations"] == [TOL]
    assert pod("Job", "j-trainers")["nodeSelector"] == {"gpu": "a100"}
    assert pod("Job", "j-partition")["nodeSelector"] == {"pool": "mem", "zone": "a"}
    others = [k for k in out if kp.pod_set_of(k, "j") is None]
    assert others and all(k in before for k in others)  # Services, Secret, policies
    assert kp.inject(kids, {}, "j") == before


def test_inject_raises_on_a_conflict() -> None:
    with pytest.raises(kp.PodSetConflict):
        kp.inject(_children(source=False), {"servers": kp.PodSetInfo({"pool": "cpu"})}, "j")
