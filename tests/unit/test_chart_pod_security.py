"""The "restricted" Pod Security checker (tests/support/pod_security.py) on good and bad pods."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.pod_security import pod_of, violations

Obj = dict[str, Any]


def good_pod_spec() -> Obj:
    return {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [{"name": "init", "image": "x", "securityContext": _good_csc()}],
        "containers": [
            {
                "name": "main",
                "image": "x",
                "ports": [{"containerPort": 8080}],
                "securityContext": _good_csc(),
            }
        ],
        "volumes": [
            {"name": "tmp", "emptyDir": {}},
            {"name": "token", "secret": {"secretName": "t"}},
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
            {"name": "proj", "projected": {"sources": []}},
        ],
    }


def _good_csc() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_good_pod_spec_passes() -> None:
    assert violations(good_pod_spec()) == []


def test_container_level_settings_replace_pod_level_ones() -> None:
    spec = good_pod_spec()
    spec["securityContext"] = {}
    for c in spec["initContainers"] + spec["containers"]:
        c["securityContext"].update(
            runAsNonRoot=True, seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}
        )
    assert violations(spec) == []


def test_net_bind_service_may_be_added() -> None:
    spec = good_pod_spec()
    spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert violations(spec) == []


@pytest.mark.parametrize(
    "kind",
    ["Pod", "Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet", "CronJob"],
)
def test_workloads_are_unwrapped(kind: str) -> None:
    spec = good_pod_spec()
    bad = copy.deepcopy(spec)
    bad["hostNetwork"] = True
    for s, expected in ((spec, []), (bad, ["spec.hostNetwork must not be true"])):
        template = {"metadata": {"labels": {"a": "b"}}, "spec": s}
        if kind == "Pod":
            obj: Obj = {"kind": kind, "metadata": {}, "spec": s}
        elif kind == "CronJob":
            obj = {"kind": kind, "spec": {"jobTemplate": {"spec": {"template": template}}}}
        else:
            obj = {"kind": kind, "spec": {"template": template}}
        assert pod_of(obj)[1] is s
        assert violations(obj) == expected


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="ConfigMap"):
        violations({"kind": "ConfigMap", "data": {}})


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def mutate(spec: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for p in parents:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _del(path: str) -> Callable[[Obj], None]:
    def mutate(spec: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = spec
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[last]

    return mutate


C0 = "containers.0.securityContext"
I0 = "initContainers.0.securityContext"

BAD: list[tuple[str, Callable[[Obj], None], str]] = [
    ("hostNetwork", _set("hostNetwork", True), "hostNetwork"),
    ("hostPID", _set("hostPID", True), "hostPID"),
    ("hostIPC", _set("hostIPC", True), "hostIPC"),
    ("privileged", _set(f"{C0}.privileged", True), "privileged"),
    ("privilege escalation", _set(f"{C0}.allowPrivilegeEscalation", True), "allowPrivilege"),
    ("privilege escalation unset (init)", _del(f"{I0}.allowPrivilegeEscalation"), "initContainers"),
    ("no drop ALL", _set(f"{C0}.capabilities", {"drop": ["NET_RAW"]}), "drop must include ALL"),
    ("added capability", _set(f"{C0}.capabilities.add", ["SYS_ADMIN"]), "SYS_ADMIN"),
    ("root user (pod)", _set("securityContext.runAsUser", 0), "runAsUser"),
    ("root user (container)", _set(f"{C0}.runAsUser", 0), "runAsUser"),
    ("runAsNonRoot unset", _del("securityContext.runAsNonRoot"), "runAsNonRoot"),
    ("runAsNonRoot false (container)", _set(f"{C0}.runAsNonRoot", False), "runAsNonRoot"),
    ("seccomp unset", _del("securityContext.seccompProfile"), "seccompProfile"),
    (
        "seccomp unconfined (container)",
        _set(f"{C0}.seccompProfile", {"type": "Unconfined"}),
        "Unconfined",
    ),
    ("hostPath volume", _set("volumes.0", {"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
    ("nfs volume", _set("volumes.0", {"name": "n", "nfs": {"server": "s"}}), "'nfs'"),
    ("hostPort", _set("containers.0.ports.0.hostPort", 80), "hostPort"),
    (
        "unsafe sysctl",
        _set("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        "kernel.msgmax",
    ),
    ("procMount", _set(f"{C0}.procMount", "Unmasked"), "procMount"),
    (
        "AppArmor unconfined (field)",
        _set(f"{C0}.appArmorProfile", {"type": "Unconfined"}),
        "appArmorProfile",
    ),
    (
        "SELinux custom type",
        _set("securityContext.seLinuxOptions", {"type": "spc_t"}),
        "seLinuxOptions.type",
    ),
    ("SELinux user", _set(f"{C0}.seLinuxOptions", {"user": "system_u"}), "seLinuxOptions.user"),
    (
        "Windows HostProcess",
        _set("securityContext.windowsOptions", {"hostProcess": True}),
        "hostProcess",
    ),
    ("writable root filesystem", _set(f"{C0}.readOnlyRootFilesystem", False), "readOnlyRoot"),
    ("no containers", _set("containers", []), "containers is empty"),
]


@pytest.mark.parametrize(("mutate", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_pod_is_reported(mutate: Callable[[Obj], None], needle: str) -> None:
    spec = good_pod_spec()
    mutate(spec)
    found = violations(spec)
    assert found, "no violation reported"
    assert any(needle in v for v in found), found


def test_ephemeral_containers_are_checked() -> None:
    spec = good_pod_spec()
    spec["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    found = violations(spec)
    assert any(v.startswith("ephemeralContainers[debug]") for v in found), found


def test_apparmor_annotations() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/main"
    for value, ok in (("runtime/default", True), ("localhost/p", True), ("unconfined", False)):
        pod = {"kind": "Pod", "metadata": {"annotations": {key: value}}, "spec": good_pod_spec()}
        assert (violations(pod) == []) is ok, value


def test_read_only_root_is_our_rule_not_the_standard() -> None:
    spec = good_pod_spec()
    spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
    assert violations(spec, read_only_root=False) == []
    assert violations(spec) != []
