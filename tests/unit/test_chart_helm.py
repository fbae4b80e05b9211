"""The Helm chart, rendered by the real ``helm`` binary and checked offline.

Built-in kinds are validated by ``kubernetes-validate --strict`` (the schemas of the chart's
minimum Kubernetes version and of the newest one it ships), pods by the "restricted" Pod
Security checker, RBAC by the exact rules the operator and its users need.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import pod_security

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "distgnn"
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
KUBE_VERSION = CHART_YAML["kubeVersion"].removeprefix(">=").removesuffix("-0")
"""The chart's minimum Kubernetes version (``kubeVersion: >=X.Y.Z-0``): what we render for."""
RELEASE = "dg"
FULLNAME = f"{RELEASE}-distgnn"
NAMESPACE = "distgnn-system"
CRD_GROUP = "distgnn.dev"

Obj = dict[str, Any]

# Values that change every part of the chart at once (everything non-default).
NON_DEFAULT: Obj = {
    "ha": {"enabled": True, "replicas": 3, "lifetimeSeconds": 20},
    "watchNamespaces": ["team-a", "team-b"],
    "crds": {"enabled": False},
    "gangScheduling": {"enabled": True},
    "extraEnv": [
        {"name": "EXTRA_LITERAL", "value": "on"},
        {
            "name": "EXTRA_FROM_SECRET",
            "valueFrom": {"secretKeyRef": {"name": "extra", "key": "value"}},
        },
    ],
    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    "nodeSelector": {"kubernetes.io/os": "linux", "pool": "system"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}
    ],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": {"app.kubernetes.io/component": "operator"}
                        },
                    },
                }
            ]
        }
    },
    "podLabels": {"team": "ml-platform"},
    "podAnnotations": {"prometheus.io/scrape": "false"},
    "image": {"tag": "9.9.9", "pullSecrets": ["regcred"], "pullPolicy": "Always"},
    "runtimeImage": {
        "repository": "registry.example.com/distgnn-runtime",
        "tag": "cuda-1",
        "pullSecrets": ["regcred", "mirror.creds"],
    },
    "logFormat": "text",
    "logLevel": "DEBUG",
    "partitionsURL": "s3://distgnn-data/partitions",
    "health": {"port": 9090},
    "priorityClassName": "system-cluster-critical",
    "serviceAccount": {"name": "distgnn-op", "annotations": {"iam.example.com/role": "x"}},
}

SCENARIOS: dict[str, Obj] = {
    "default": {},
    "non-default": NON_DEFAULT,
    "ha-cluster-wide": {"ha": {"enabled": True}},
    "namespaced": {"watchNamespaces": ["team-a"]},
    "no-rbac-no-sa": {"rbac": {"create": False}, "serviceAccount": {"create": False}},
    "metrics": {
        "metrics": {
            "enabled": True,
            "serviceMonitor": {"enabled": True},
            "podMonitor": {"enabled": True},
            "dashboard": {"enabled": True},
        }
    },
}


def helm_binary() -> str:
    found = shutil.which("helm") or str(REPO / ".tools" / "bin" / "helm")
    if not os.access(found, os.X_OK):
        pytest.fail(
            "the helm binary is missing: run `make install` (it puts helm in .tools/bin) "
            "or put helm v3/v4 on PATH"
        )
    return found


def run_helm(*args: str, values: Obj | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [helm_binary(), *args]
    stdin = None
    if values is not None:
        cmd += ["-f", "-"]
        stdin = yaml.safe_dump(values)
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60, check=False)


@functools.cache
def _render_text(values_json: str) -> str:
    res = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        values=json.loads(values_json),
    )
    assert res.returncode == 0, f"helm template failed:\n{res.stderr}"
    return res.stdout


def render_text(values: Obj) -> str:
    return _render_text(json.dumps(values, sort_keys=True))


def render(values: Obj) -> list[Obj]:
    return [d for d in yaml.safe_load_all(render_text(values)) if d]


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[Obj], kind: str) -> Obj:
    found = of_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def env_of(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def app_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


# --- lint, schema, built-in kinds ----------------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "non-default", "metrics"])
def test_helm_lint_strict(scenario: str) -> None:
    res = run_helm("lint", "--strict", str(CHART), values=SCENARIOS[scenario])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 chart(s) failed" in res.stdout


def latest_kube_version() -> str:
    """The newest Kubernetes version kubernetes-validate has schemas for."""
    import kubernetes_validate

    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    found = {
        tuple(int(x) for x in m.group(1).split("."))
        for p in folder.iterdir()
        if (m := re.fullmatch(r"v(\d+\.\d+\.\d+)-local-strict", p.name))
    }
    return ".".join(map(str, max(found)))


@pytest.mark.parametrize("kube", [KUBE_VERSION, latest_kube_version()])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendered_built_in_kinds_validate_strict(scenario: str, kube: str, tmp_path: Path) -> None:
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(render_text(SCENARIOS[scenario]))
    exe = shutil.which("kubernetes-validate")
    assert exe, "kubernetes-validate is not installed (pip install -e .[test])"
    res = subprocess.run(
        [exe, "--strict", "-k", kube, str(rendered)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ERROR" not in res.stdout + res.stderr
    passed = (res.stdout + res.stderr).count(" passed for resource ")
    built_in = [o for o in render(SCENARIOS[scenario]) if "kopf.dev" not in o["apiVersion"]]
    assert passed == len(built_in)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"imagee": {"repository": "x"}}, "imagee"),
        ({"image": {"tga": "1.0"}}, "tga"),
        ({"ha": {"enabled": True, "replicas": "two"}}, "replicas"),
        ({"ha": {"replicas": 1}}, "replicas"),
        ({"logLevel": "LOUD"}, "logLevel"),
        ({"terminationGracePeriodSeconds": 5}, "terminationGracePeriodSeconds"),
        ({"graphServerWaitSeconds": 0}, "graphServerWaitSeconds"),
        ({"health": {"port": "8080"}}, "port"),
        ({"watchNamespaces": "team-a"}, "watchNamespaces"),
        ({"crds": {"enabled": "yes"}}, "enabled"),
        ({"securityContext": {"runAsUsr": 1000}}, "runAsUsr"),
        ({"tolerations": [{"key": "a", "operator": "Maybe"}]}, "operator"),
    ],
)
def test_schema_rejects_bad_values(values: Obj, needle: str) -> None:
    res = run_helm("template", RELEASE, str(CHART), values=values)
    assert res.returncode != 0, f"helm template accepted {values}"
    assert needle in res.stderr, res.stderr


# --- pod security ---------------------------------------------------------------------------


def pod_carriers(objs: list[Obj]) -> Iterator[Obj]:
    for o in objs:
        if o["kind"] in {"Pod", "Deployment", "StatefulSet", "Job", "DaemonSet", "CronJob"}:
            yield o


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_pod_passes_restricted(scenario: str) -> None:
    carriers = list(pod_carriers(render(SCENARIOS[scenario])))
    assert {o["kind"] for o in carriers} == {"Deployment", "Pod"}
    for o in carriers:
        assert pod_security.violations(o) == [], o["metadata"]["name"]


# --- the operator Deployment, Service and test hook ------------------------------------------


def test_default_deployment() -> None:
    objs = render({})
    dep = one(objs, "Deployment")
    assert dep["metadata"]["namespace"] == NAMESPACE
    spec = dep["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == f"ghcr.io/distgnn/distgnn-operator:{app_version()}"
    assert c["command"] == ["distgnn-operator"]
    env = env_of(c)
    assert env["DISTGNN_RUNTIME_IMAGE"] == f"ghcr.io/distgnn/distgnn-runtime:{app_version()}"
    assert env["DISTGNN_WATCH_NAMESPACES"] == ""
    assert env["DISTGNN_LOG_FORMAT"] == "json"
    assert env["DISTGNN_LOG_LEVEL"] == "INFO"
    assert env["POD_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "DISTGNN_PARTITIONS_URL" not in env
    assert "DISTGNN_IMAGE_PULL_SECRETS" not in env  # the job pods pull without a Secret
    assert "DISTGNN_PEERING_LIFETIME" not in env  # standalone
    assert c["args"] == [  # no --peering: standalone
        "--liveness=http://0.0.0.0:8080/healthz",
        "--exit-timeout=25",
        "--graphserver-wait-seconds=300",
    ]
    assert pod["terminationGracePeriodSeconds"] == 30
    assert c["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["serviceAccountName"] == f"{RELEASE}-distgnn"
    labels = spec["template"]["metadata"]["labels"]
    for key in ("name", "instance", "version", "managed-by", "component", "part-of"):
        assert f"app.kubernetes.io/{key}" in labels
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert "app.kubernetes.io/version" not in selector  # selectors must survive upgrades


def test_health_service_and_test_hook_reach_the_operator() -> None:
    objs = render({"health": {"port": 9090}})
    dep = one(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["ports"][0]["containerPort"] == 9090
    assert c["args"][0] == "--liveness=http://0.0.0.0:9090/healthz"
    svc = one(objs, "Service")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"] == [
        {"name": "health", "port": 9090, "targetPort": "health", "protocol": "TCP"}
    ]
    test_pod = one(objs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = " ".join(test_pod["spec"]["containers"][0]["command"])
    url = f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:9090/healthz"
    assert url in script
    assert test_pod["spec"]["restartPolicy"] == "Never"
    assert test_pod["spec"]["automountServiceAccountToken"] is False


def test_test_hook_script_is_valid_python() -> None:
    test_pod = one(render({}), "Pod")
    cmd = test_pod["spec"]["containers"][0]["command"]
    assert cmd[:2] == ["python", "-c"]
    compile(cmd[2], "helm-test", "exec")


def test_non_default_values_reach_the_deployment() -> None:
    objs = render(NON_DEFAULT)
    dep = one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert c["image"] == "ghcr.io/distgnn/distgnn-operator:9.9.9"
    assert c["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    env = env_of(c)
    assert env["DISTGNN_RUNTIME_IMAGE"] == "registry.example.com/distgnn-runtime:cuda-1"
    assert env["DISTGNN_WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["DISTGNN_LOG_FORMAT"] == "text"
    assert env["DISTGNN_LOG_LEVEL"] == "DEBUG"
    assert env["DISTGNN_PARTITIONS_URL"] == "s3://distgnn-data/partitions"
    assert env["DISTGNN_IMAGE_PULL_SECRETS"] == "regcred,mirror.creds"
    assert c["args"][:2] == [
        "--liveness=http://0.0.0.0:9090/healthz",
        f"--peering={RELEASE}-distgnn",
    ]
    assert env["DISTGNN_PEERING_LIFETIME"] == "20"
    assert env["EXTRA_LITERAL"] == "on"
    assert env["EXTRA_FROM_SECRET"] == {"secretKeyRef": {"name": "extra", "key": "value"}}
    assert c["resources"] == NON_DEFAULT["resources"]
    assert pod["nodeSelector"] == NON_DEFAULT["nodeSelector"]
    assert pod["tolerations"] == NON_DEFAULT["tolerations"]
    assert pod["affinity"] == NON_DEFAULT["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["serviceAccountName"] == "distgnn-op"
    assert dep["spec"]["template"]["metadata"]["labels"]["team"] == "ml-platform"
    assert dep["spec"]["template"]["metadata"]["annotations"] == NON_DEFAULT["podAnnotations"]
    sa = one(objs, "ServiceAccount")
    assert sa["metadata"]["name"] == "distgnn-op"
    assert sa["metadata"]["annotations"] == {"iam.example.com/role": "x"}


# --- RBAC -----------------------------------------------------------------------------------

# Derived from what distgnn_operator does (reconcile.py, handlers.py, progress.py, kube.py)
# and what kopf 1.x does (list+watch what it serves, JSON/merge-patch its finalizer and
# annotations, POST core/v1 events, list+watch CRDs); nothing more. The emulator tests
# check the other direction (every request the operator makes is granted:
# tests/integration/test_operator_emulator.py's cluster fixture).
# observed by label, created, drift-patched, pruned; "get": who holds a name a create found taken
APPLIED = {"get", "list", "create", "patch", "delete"}
CREATED_ONCE = {"get", "list", "create", "delete"}  # never patched (Secret data, Job templates)
NAMESPACED_RULES = {
    (CRD_GROUP, "distgnnjobs"): {"get", "list", "watch", "patch", "delete"},
    (CRD_GROUP, "graphservers"): {"get", "list", "watch", "patch"},
    (CRD_GROUP, "distgnnjobs/status"): {"patch"},
    (CRD_GROUP, "graphservers/status"): {"patch"},
    # blockOwnerDeletion on the children (OwnerReferencesPermissionEnforcement)
    (CRD_GROUP, "distgnnjobs/finalizers"): {"update"},
    (CRD_GROUP, "graphservers/finalizers"): {"update"},
    ("", "pods"): {"list", "delete"},  # termination messages, rank 0's address; restarts
    ("", "services"): APPLIED | {"watch"},
    ("networking.k8s.io", "networkpolicies"): APPLIED | {"watch"},
    ("apps", "statefulsets"): APPLIED | {"watch"},
    # the token Secret, read by name: no list/watch of the namespaces' Secrets
    ("", "secrets"): {"get", "create", "delete"},
    ("batch", "jobs"): CREATED_ONCE | {"watch"},
    # kopf and the operator POST events; the operator lists a child's FailedCreate events
    ("", "events"): {"create", "list"},
}
KOPF_CLUSTER_RULES = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
PODGROUPS = {("scheduling.x-k8s.io", "podgroups"): CREATED_ONCE}
KUEUE = {
    # one Workload per queued job (watched: its admission re-runs the job's pass)
    # (delete: the API server's OwnerReferencesPermissionEnforcement asks it of whoever
    # sets an ownerReference); the status is only patched (quota released, Finished)
    # (patch: spec.active follows the job's suspend)
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch", "create", "patch", "delete"},
    ("kueue.x-k8s.io", "workloads/status"): {"patch"},
}
FLAVORS = {("kueue.x-k8s.io", "resourceflavors"): {"get"}}
"""Cluster-scoped: in the ClusterRole whatever namespaces are watched."""


def rules_of(role: Obj) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs; fails on wildcards and duplicate grants."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"], rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                assert (group, res) not in out, f"{group}/{res} granted twice"
                out[group, res] = set(rule["verbs"])
    return out


def operator_cluster_role(objs: list[Obj]) -> Obj:
    """The operator's own ClusterRole (the others are the users' aggregated roles)."""
    (role,) = [r for r in of_kind(objs, "ClusterRole") if r["metadata"]["name"] == FULLNAME]
    return role


def test_rbac_cluster_wide_is_exactly_what_the_operator_needs() -> None:
    objs = render({})
    assert of_kind(objs, "Role") == [] and of_kind(objs, "RoleBinding") == []
    role = operator_cluster_role(objs)
    assert rules_of(role) == {**NAMESPACED_RULES, **KOPF_CLUSTER_RULES}
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = one(objs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]


def test_rbac_gang_scheduling_adds_podgroups_only_when_enabled() -> None:
    role = operator_cluster_role(render({"gangScheduling": {"enabled": True}}))
    assert rules_of(role) == {**NAMESPACED_RULES, **KOPF_CLUSTER_RULES, **PODGROUPS}


def test_kueue_adds_the_flag_and_workloads_only_when_enabled() -> None:
    objs = render({"kueue": {"enabled": True}})
    assert rules_of(operator_cluster_role(objs)) == {
        **NAMESPACED_RULES,
        **KOPF_CLUSTER_RULES,
        **KUEUE,
        **FLAVORS,
    }
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--kueue" in c["args"]
    scoped = render({"kueue": {"enabled": True}, "watchNamespaces": ["a"]})
    for role in of_kind(scoped, "Role"):
        assert rules_of(role) == {**NAMESPACED_RULES, **KUEUE}
    flavors = ("kueue.x-k8s.io", "resourceflavors")
    assert rules_of(operator_cluster_role(scoped))[flavors] == FLAVORS[flavors]
    (c,) = one(render({}), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--kueue" not in c["args"]


def test_rbac_watch_namespaces_uses_a_role_per_namespace() -> None:
    objs = render({"watchNamespaces": ["team-a", "team-b"]})
    cluster = rules_of(operator_cluster_role(objs))
    assert cluster == {**KOPF_CLUSTER_RULES, ("", "namespaces"): {"list", "watch"}}
    roles = of_kind(objs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rules_of(role) == NAMESPACED_RULES
    bindings = of_kind(objs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["roleRef"]["kind"] == "Role"
        assert b["subjects"][0]["namespace"] == NAMESPACE


def _operator_roles(values: Obj) -> list[Obj]:
    """The operator's Roles (per watched namespace) or its ClusterRole (all namespaces)."""
    objs = render(values)
    return of_kind(objs, "Role") or [operator_cluster_role(objs)]


@pytest.mark.parametrize(
    "values",
    [{}, {"watchNamespaces": ["ml", "team-b"]}, {"gangScheduling": {"enabled": True}}],
    ids=["all-namespaces", "watch-namespaces", "gang"],
)
def test_rbac_lets_the_operator_set_what_its_children_carry(values: Obj) -> None:
    """OwnerReferencesPermissionEnforcement (OpenShift, hardened clusters) refuses a child
    whose ownerReference has ``blockOwnerDeletion`` unless its creator may ``update`` the
    owner's ``finalizers`` subresource, and any ownerReferences unless it may ``delete``
    the child. Both are derived here from the children the operator builds."""
    from tests.support.children import all_children

    from distgnn_operator.kube import RESOURCES

    children = all_children()
    blocking = {
        ref["kind"]
        for o in children
        for ref in o["metadata"]["ownerReferences"]
        if ref.get("blockOwnerDeletion")
    }
    assert blocking == {"DistGNNJob", "GraphServer"}
    gang = bool(values.get("gangScheduling"))
    for role in _operator_roles(values):
        rules = rules_of(role)
        for kind in blocking:
            plural = RESOURCES[kind][1]
            assert "update" in rules.get((CRD_GROUP, f"{plural}/finalizers"), set()), (
                role["metadata"],
                kind,
            )
        for o in children:
            if o["kind"] == "PodGroup" and not gang:
                continue  # without the chart's gang scheduling a gang job is held
            group = o["apiVersion"].rpartition("/")[0]
            plural = RESOURCES[o["kind"]][1]
            assert {"create", "delete"} <= rules.get((group, plural), set()), o["kind"]


def test_rbac_and_service_account_can_be_disabled() -> None:
    objs = render(SCENARIOS["no-rbac-no-sa"])
    kinds = {o["kind"] for o in objs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert "ServiceAccount" not in kinds
    dep = one(objs, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "default"


# What Kubernetes' built-in user-facing roles gain through aggregation (a ClusterRole with
# the label rbac.authorization.k8s.io/aggregate-to-ROLE: "true" is merged into ROLE).
USER_READ = {"get", "list", "watch"}
USER_WRITE = {"create", "update", "patch", "delete", "deletecollection"}
USER_ROLES = {
    "view": {
        (CRD_GROUP, "distgnnjobs"): USER_READ,
        (CRD_GROUP, "graphservers"): USER_READ,
        (CRD_GROUP, "distgnnjobs/status"): USER_READ,
        (CRD_GROUP, "graphservers/status"): USER_READ,
    },
    "edit": {
        (CRD_GROUP, "distgnnjobs"): USER_READ | USER_WRITE,
        (CRD_GROUP, "graphservers"): USER_READ | USER_WRITE,
        (CRD_GROUP, "distgnnjobs/status"): USER_READ,
        (CRD_GROUP, "graphservers/status"): USER_READ,
    },
}
USER_ROLES["admin"] = USER_ROLES["edit"]


def aggregated(objs: list[Obj], builtin: str) -> dict[tuple[str, str], set[str]]:
    """What the built-in ClusterRole ``builtin`` gains from the rendered ClusterRoles."""
    label = f"rbac.authorization.k8s.io/aggregate-to-{builtin}"
    out: dict[tuple[str, str], set[str]] = {}
    for role in of_kind(objs, "ClusterRole"):
        if role["metadata"]["labels"].get(label) == "true":
            for key, verbs in rules_of(role).items():
                out.setdefault(key, set()).update(verbs)
    return out


@pytest.mark.parametrize("builtin", sorted(USER_ROLES))
def test_user_roles_aggregate_into_view_edit_admin(builtin: str) -> None:
    """A namespace user bound to view/edit/admin can read/create DistGNN resources."""
    objs = render({})
    assert aggregated(objs, builtin) == USER_ROLES[builtin]
    user_roles = [r for r in of_kind(objs, "ClusterRole") if r["metadata"]["name"] != FULLNAME]
    assert sorted(r["metadata"]["name"] for r in user_roles) == [
        f"{FULLNAME}-edit",
        f"{FULLNAME}-view",
    ]
    # users never write status: that is the operator's
    for role in user_roles:
        for (_, res), verbs in rules_of(role).items():
            assert not (res.endswith("/status") and verbs - USER_READ), role["metadata"]["name"]


def test_user_roles_follow_their_value_and_rbac_create() -> None:
    assert aggregated(render({"watchNamespaces": ["team-a"]}), "edit") == USER_ROLES["edit"]
    for values in (
        {"rbac": {"aggregateToDefaultRoles": False}},
        {"rbac": {"create": False}},
    ):
        objs = render(values)
        for builtin in USER_ROLES:
            assert aggregated(objs, builtin) == {}, values


# --- HA: kopf peering -------------------------------------------------------------------------

PEERING_VERBS = {"list", "watch", "patch", "create"}
"""kopf lists, watches and patches its peering object (never GETs it by name); the operator
creates it when missing (distgnn_operator.peering)."""


def no_peering_objects(objs: list[Obj]) -> None:
    """The chart ships no peering object, as a hook or otherwise: Helm deletes a hook's
    object and creates it again on every upgrade (before-hook-creation), which wiped the
    running replicas' records and made every standby resume."""
    for kind in ("ClusterKopfPeering", "KopfPeering"):
        assert of_kind(objs, kind) == [], kind
    hooked = [
        o for o in objs if "helm.sh/hook" in ((o.get("metadata") or {}).get("annotations") or {})
    ]
    assert not [o for o in hooked if o.get("apiVersion", "").startswith("kopf.dev")]


def test_ha_cluster_wide_ships_cluster_peering_crd_and_rbac() -> None:
    objs = render({"ha": {"enabled": True}})
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    (peering_name,) = [a.split("=", 1)[1] for a in args if a.startswith("--peering=")]
    assert peering_name == f"{RELEASE}-distgnn"
    crd = next(o for o in of_kind(objs, "CustomResourceDefinition") if "kopf" in o["spec"]["group"])
    assert crd["metadata"]["name"] == "clusterkopfpeerings.kopf.dev"
    assert crd["spec"]["scope"] == "Cluster"
    no_peering_objects(objs)
    rules = rules_of(operator_cluster_role(objs))
    assert rules[("kopf.dev", "clusterkopfpeerings")] == PEERING_VERBS
    assert ("kopf.dev", "kopfpeerings") not in rules


def test_ha_namespaced_ships_the_namespaced_peering_crd_and_roles() -> None:
    objs = render({"ha": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]})
    crd = next(o for o in of_kind(objs, "CustomResourceDefinition") if "kopf" in o["spec"]["group"])
    assert crd["metadata"]["name"] == "kopfpeerings.kopf.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    no_peering_objects(objs)
    roles = of_kind(objs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rules_of(role)[("kopf.dev", "kopfpeerings")] == PEERING_VERBS
    assert ("kopf.dev", "clusterkopfpeerings") not in rules_of(operator_cluster_role(objs))


def test_ha_peering_crd_can_be_left_to_another_operator() -> None:
    objs = render({"ha": {"enabled": True, "createPeeringCRD": False}})
    assert of_kind(objs, "CustomResourceDefinition") == [
        o for o in of_kind(objs, "CustomResourceDefinition") if o["spec"]["group"] == CRD_GROUP
    ]
    no_peering_objects(objs)


def test_no_kopf_peering_without_ha() -> None:
    for scenario in ("default", "namespaced"):
        objs = render(SCENARIOS[scenario])
        assert not [o for o in objs if "kopf.dev" in json.dumps(o)], scenario


# --- CRDs -------------------------------------------------------------------------------------


def source_crds() -> dict[str, Obj]:
    files = sorted((REPO / "crds").glob("*.yaml"))
    if not files:
        pytest.fail("crds/ is empty: run `make generate` (python -m distgnn.api.generate)")
    return {f.name: yaml.safe_load(f.read_text()) for f in files}


def test_chart_crd_files_equal_crds_folder() -> None:
    expected = source_crds()
    chart = {
        f.name: yaml.safe_load(f.read_text()) for f in (CHART / "files" / "crds").glob("*.yaml")
    }
    assert chart == expected


def _distgnn_crds(objs: list[Obj]) -> dict[str, Obj]:
    return {
        o["metadata"]["name"]: o
        for o in of_kind(objs, "CustomResourceDefinition")
        if o["spec"]["group"] == CRD_GROUP
    }


def _ints(x: Any) -> Any:
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, dict):
        return {k: _ints(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_ints(v) for v in x]
    return x


def test_rendered_crds_equal_crds_folder_and_are_kept() -> None:
    text = render_text({})
    assert not re.search(r":\s*-?[0-9.]+e[+-]?[0-9]+\s*$", text, re.M), "exponent numbers"
    expected = {c["metadata"]["name"]: c for c in source_crds().values()}
    rendered = _distgnn_crds(render({}))
    assert sorted(rendered) == sorted(expected)
    for name, crd in rendered.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        # fromYaml/toYaml turns every number into a float64 and writes integral ones as
        # integers (0.0 -> 0); the API server reads both alike. Compare modulo that only.
        assert _ints(crd["spec"]) == _ints(expected[name]["spec"])
        assert (
            crd["metadata"]["labels"].items()
            >= (expected[name]["metadata"].get("labels") or {}).items()
        )
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_crds_keep_false_drops_the_annotation() -> None:
    source_crds()
    rendered = _distgnn_crds(render({"crds": {"keep": False}}))
    assert rendered
    for crd in rendered.values():
        assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


def test_crds_disabled_renders_none() -> None:
    assert _distgnn_crds(render({"crds": {"enabled": False}})) == {}
    assert _distgnn_crds(render(NON_DEFAULT)) == {}


# --- NOTES ------------------------------------------------------------------------------------


def test_notes_tell_the_user_what_to_do_next() -> None:
    res = run_helm(
        "install",
        RELEASE,
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        values={"watchNamespaces": ["team-a"], "crds": {"enabled": False}},
    )
    assert res.returncode == 0, res.stderr
    notes = res.stdout.split("NOTES:", 1)[1]
    assert f"helm test {RELEASE} -n {NAMESPACE}" in notes
    assert "kubectl get distgnnjobs" in notes
    assert "team-a" in notes
    assert "crds.enabled=false" in notes
    assert "s3-credentials" in notes


# --- the chart speaks the operator's interface ---------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "non-default", "metrics"])
def test_operator_accepts_the_rendered_command_line_and_env(scenario: str) -> None:
    main = pytest.importorskip("distgnn_operator.__main__")
    dep = one(render(SCENARIOS[scenario]), "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    old = dict(os.environ)
    try:
        os.environ.update({k: v for k, v in env.items() if isinstance(v, str)})
        args = main.build_parser().parse_args(c["args"])
        assert main.namespaces(args, dict(os.environ)) == list(
            SCENARIOS[scenario].get("watchNamespaces", [])
        )
    finally:
        os.environ.clear()
        os.environ.update(old)
    port = SCENARIOS[scenario].get("health", {}).get("port", 8080)
    assert args.liveness == f"http://0.0.0.0:{port}/healthz"
    assert args.runtime_image == env["DISTGNN_RUNTIME_IMAGE"]
    assert args.partitions_url == env.get("DISTGNN_PARTITIONS_URL")
    pull = SCENARIOS[scenario].get("runtimeImage", {}).get("pullSecrets", [])
    os.environ.update({k: v for k, v in env.items() if isinstance(v, str)})
    try:
        assert main.image_pull_secrets(args) == tuple(pull)
    finally:
        os.environ.clear()
        os.environ.update(old)
    ha = SCENARIOS[scenario].get("ha", {}).get("enabled", False)
    assert (args.peering is not None) is ha
    assert args.peering_lifetime == SCENARIOS[scenario].get("ha", {}).get("lifetimeSeconds", 60)
    assert args.peering_priority is None  # each replica ranks itself by its start time
    metrics = SCENARIOS[scenario].get("metrics", {}).get("enabled", False)
    assert args.metrics_port == (8081 if metrics else None)
    # Every DISTGNN_* variable the chart sets is read by the operator or the log setup.
    files = [*(REPO / "operator" / "distgnn_operator").glob("*.py")]
    files.append(REPO / "runtime" / "distgnn" / "contract.py")
    sources = " ".join(p.read_text() for p in files)
    for name in env:
        if name.startswith("DISTGNN_"):
            assert f'"{name}"' in sources, f"{name} is read by nobody"


def test_operator_pods_carry_the_labels_trainer_policies_admit() -> None:
    """Co-located trainer pods admit ``/progress`` reads from pods with
    ``OPERATOR_POD_LABELS`` (``distgnn_operator.monitoring``): the chart's operator pods
    carry them, also under another release and name."""
    from distgnn_operator.monitoring import OPERATOR_POD_LABELS

    for values in ({}, {"nameOverride": "gnn", "fullnameOverride": "x-op"}):
        dep = one(render(values), "Deployment")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert OPERATOR_POD_LABELS.items() <= labels.items(), labels


def test_shutdown_and_graphserver_wait_values_reach_the_operator() -> None:
    """The rendered arguments, parsed by the operator itself: kopf's exit timeout stays 5 s
    under the pod's grace period, and the GraphServer wait is the value given."""
    from distgnn_operator.__main__ import build_parser, setup

    values = {"terminationGracePeriodSeconds": 90, "graphServerWaitSeconds": 1200}
    dep = one(render(values), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 90
    _, settings, octx = setup(build_parser().parse_args(pod["containers"][0]["args"]))
    assert settings.process.ultimate_exiting_timeout == 85
    assert octx.graphserver_wait_seconds == 1200
