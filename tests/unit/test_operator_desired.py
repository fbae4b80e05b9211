"""Desired children: golden files, the restricted Pod Security profile, built-in schemas.

Regenerate the golden files with
``DISTGNN_UPDATE_GOLDEN=1 pytest tests/unit/test_operator_desired.py``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.support.children import ATTACHED
from tests.support.netpol import Peer, admits, selects
from tests.support.pod_security import violations

from distgnn import contract
from distgnn.api import parse_graphserver, parse_job
from distgnn_operator.desired import (
    DesiredContext,
    GraphServerInfo,
    Stage,
    desired_graphserver_children,
    desired_job_children,
)
from distgnn_operator.monitoring import OPERATOR_POD_LABELS

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DISTGNN_UPDATE_GOLDEN") == "1"
CTX = DesiredContext(runtime_image="example.org/distgnn:1.0", partitions_url="s3://parts")
GV = f"{contract.API_GROUP}/{contract.API_VERSION}"

FULL_JOB: dict[str, Any] = {
    "apiVersion": GV,
    "kind": "DistGNNJob",
    "metadata": {"name": "cora", "namespace": "ml", "uid": "uid-job"},
    "spec": {
        "graph": {"source": {"url": "s3://graphs/cora.npz"}},
        "partitioning": {"numParts": 2, "outputURL": "s3://graphs/parts"},
        "storage": {
            "endpoint": "http://s3:8333",
            "region": "us-east-1",
            "credentialsSecret": {"name": "s3-creds"},
        },
        "servers": {
            "workers": 2,
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
            "podTemplate": {
                "nodeSelector": {"pool": "mem"},
                "tolerations": [{"key": "mem", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        "trainers": {
            "replicas": 3,
            "numSamplers": 1,
            "gpus": 1,
            "resources": {"limits": {"cpu": 4, "memory": "8Gi"}},
            "podTemplate": {"labels": {"team": "gnn"}, "env": [{"name": "X", "value": "1"}]},
            "checkpoint": {"url": "s3://graphs/ckpt"},
            "app": {
                "name": "node-classification",
                "epochs": 5,
                "weightDecay": 0.0005,
                "inferAfterTraining": True,
                "outputURL": "s3://graphs/embeddings",
            },
        },
        "runPolicy": {
            "schedulingPolicy": {
                "gang": {"enabled": True},
                "priorityClassName": "gnn-high",
                "queue": "gpu",
            }
        },
        "monitoring": {"metrics": True},
    },
}
GS: dict[str, Any] = {
    "apiVersion": GV,
    "kind": "GraphServer",
    "metadata": {"name": "papers", "namespace": "ml", "uid": "uid-gs"},
    "spec": {
        "graph": {"source": {"url": "s3://graphs/papers"}},
        "partitioning": {"numParts": 4, "method": "random"},
        "storage": {"credentialsSecret": {"name": "s3-creds"}},
    },
}
GS_INFO = GraphServerInfo(
    name="papers",
    manifest_url="s3://parts/ml/papers/papers.json",
    num_parts=4,
    token_secret="papers-token",
)


def colocated_job() -> dict[str, Any]:
    """FULL_JOB with co-located trainers: 4 trainers beside 2 servers, 2 per pod."""
    obj = copy.deepcopy(FULL_JOB)
    obj["spec"]["trainers"]["replicas"] = 4
    obj["spec"]["trainers"]["colocate"] = True
    return obj


def cases() -> dict[str, list[dict[str, Any]]]:
    return {
        "job-full": desired_job_children(parse_job(FULL_JOB), CTX, token="golden-token"),
        "graphserver": desired_graphserver_children(
            parse_graphserver(GS), CTX, token="golden-token"
        ),
        "job-attached": desired_job_children(parse_job(ATTACHED), CTX, graphserver=GS_INFO),
        "job-colocated": desired_job_children(
            parse_job(colocated_job()), CTX, token="golden-token"
        ),
    }


@pytest.mark.parametrize("name", ["job-full", "graphserver", "job-attached", "job-colocated"])
def test_golden(name: str) -> None:
    got = yaml.safe_dump_all(cases()[name], sort_keys=True)
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with DISTGNN_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{name} differs from {path} (DISTGNN_UPDATE_GOLDEN=1)"


def pod_specs(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objs:
        tpl = (o.get("spec") or {}).get("template")
        if tpl:
            yield f"{o['kind']}/{o['metadata']['name']}", tpl["spec"]


def check_restricted(where: str, pod: dict[str, Any]) -> None:
    """The "restricted" Pod Security Standard plus a read-only root (the shared checker),
    and what our pods need on top: writable /tmp and /dev/shm, credentials by reference."""
    assert violations(pod) == [], where
    for c in pod["containers"] + pod.get("initContainers", []):
        mounts = {m["mountPath"] for m in c.get("volumeMounts") or []}
        assert {"/tmp", "/dev/shm"} <= mounts, where
        for e in c.get("env") or []:  # credentials only by reference
            if e["name"] in (contract.ENV_S3_KEY, contract.ENV_S3_SECRET):
                assert "value" not in e and "secretKeyRef" in e["valueFrom"], where


@pytest.mark.parametrize("name", ["job-full", "graphserver", "job-attached", "job-colocated"])
def test_every_pod_passes_restricted_profile_and_schemas(name: str) -> None:
    objs = cases()[name]
    pods = list(pod_specs(objs))
    assert pods
    for where, pod in pods:
        check_restricted(where, pod)
    for o in objs:
        if o["kind"] != "PodGroup":
            kubernetes_validate.validate(o, "1.30.0", strict=True)
        ref = o["metadata"]["ownerReferences"][0]
        assert ref["controller"] is True and ref["uid"].startswith("uid-")


def test_job_children_wiring() -> None:
    job = parse_job(FULL_JOB)
    objs = {(o["kind"], o["metadata"]["name"]): o for o in desired_job_children(job, CTX)}
    sts = objs[("StatefulSet", "cora-server")]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "cora-server"
    svc = objs[("Service", "cora-server")]["spec"]
    assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
    server = sts["spec"]["template"]["spec"]["containers"][0]
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e for e in server["env"]}
    assert env[contract.ENV_POD_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env[contract.ENV_MANIFEST]["value"] == "s3://graphs/parts/cora.json"
    tjob = objs[("Job", "cora-trainers")]
    spec = tjob["spec"]
    assert spec["completionMode"] == "Indexed" and spec["backoffLimit"] == 0
    assert spec["completions"] == spec["parallelism"] == 3
    pod = spec["template"]["spec"]
    tenv = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert tenv[contract.ENV_MASTER_ADDR].startswith(f"cora-trainers-0.{pod['subdomain']}.ml")
    assert tenv[contract.ENV_WORLD_SIZE] == "3" and tenv["X"] == "1"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["schedulerName"] and pod["priorityClassName"] == "gnn-high"
    labels = spec["template"]["metadata"]["labels"]
    assert labels["scheduling.x-k8s.io/pod-group"] == "cora" and labels["team"] == "gnn"
    assert objs[("PodGroup", "cora")]["spec"]["minMember"] == 3 + 2
    netpol = objs[("NetworkPolicy", "cora-server")]["spec"]
    peer = netpol["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert set(peer.items()) <= set(labels.items())  # the trainers are the allowed peers


PODGROUP_SPEC = {"minMember", "minResources", "scheduleTimeoutSeconds"}
"""scheduler-plugins' ``PodGroupSpec`` (scheduling.x-k8s.io/v1alpha1): its structural CRD
prunes any other field."""


@pytest.mark.parametrize("name", ["job-full", "job-colocated"])
def test_podgroup_sets_only_fields_its_crd_declares(name: str) -> None:
    (pg,) = [o for o in cases()[name] if o["kind"] == "PodGroup"]
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert set(pg["spec"]) <= PODGROUP_SPEC and pg["spec"]["minMember"] >= 1
    assert set(pg) == {"apiVersion", "kind", "metadata", "spec"}


def _kinds(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_stages() -> None:
    job = parse_job(FULL_JOB)
    full = _kinds(desired_job_children(job, CTX))
    waiting = desired_job_children(job, CTX, stage=Stage(partitioned=False, servers_ready=False))
    assert ("Job", "cora-trainers") not in _kinds(waiting)
    sts = next(o for o in waiting if o["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == 0
    suspended_spec = copy.deepcopy(FULL_JOB)
    suspended_spec["spec"]["runPolicy"]["suspend"] = True
    sus = desired_job_children(parse_job(suspended_spec), CTX)
    assert _kinds(sus) == full - {("Job", "cora-trainers")}
    all_policy = copy.deepcopy(FULL_JOB)
    all_policy["spec"]["runPolicy"]["cleanPodPolicy"] = "All"
    done = desired_job_children(parse_job(all_policy), CTX, stage=Stage(finished=True))
    assert ("Job", "cora-trainers") not in _kinds(done)
    assert next(o for o in done if o["kind"] == "StatefulSet")["spec"]["replicas"] == 0
    # the restart counter is visible on the trainer Job
    restarted = desired_job_children(job, CTX, stage=Stage(restarts=2))
    tjob = next(
        o for o in restarted if o["metadata"]["name"] == "cora-trainers" and o["kind"] == "Job"
    )
    assert tjob["metadata"]["annotations"]["distgnn.dev/restarts"] == "2"


def test_attached_job_without_ready_graphserver_has_no_pods() -> None:
    objs = desired_job_children(parse_job(ATTACHED), CTX)
    assert not list(pod_specs(objs))


def test_token_is_random_unless_given() -> None:
    job = parse_job(FULL_JOB)
    a = next(o for o in desired_job_children(job, CTX) if o["kind"] == "Secret")
    b = next(o for o in desired_job_children(job, CTX) if o["kind"] == "Secret")
    assert a["stringData"]["token"] != b["stringData"]["token"]
    assert len(a["stringData"]["token"]) >= 32


def test_colocated_job_runs_each_server_beside_its_partitions_trainers() -> None:
    objs = desired_job_children(parse_job(colocated_job()), CTX, token="t")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    # no server StatefulSet, Service or NetworkPolicy: the servers are pod sidecars
    assert not any(k == "StatefulSet" or n == "cora-server" for k, n in kinds)
    job = next(o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == "cora-trainers")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2  # one pod per part
    pod = job["spec"]["template"]["spec"]
    (server,) = pod["initContainers"]
    assert server["restartPolicy"] == "Always" and server["startupProbe"]["httpGet"]["path"] == (
        "/readyz"
    )
    assert [c["name"] for c in pod["containers"]] == ["trainer", "trainer-1"]
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    for c in [server, *pod["containers"]]:  # the pod's memory volume is shared
        shm = next(m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm")
        assert shm["name"] == "dshm"
    assert {"name": "DISTGNN_PART_ID", "valueFrom": {"fieldRef": {"fieldPath": index}}} in (
        server["env"]
    )
    for j, c in enumerate(pod["containers"]):
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
        assert env["DISTGNN_LOCAL_PARTITION"] == {"fieldRef": {"fieldPath": index}}
        assert env["DISTGNN_LOCAL_STORE"] == "/dev/shm"
        assert (env["LOCAL_RANK"], env["DISTGNN_TRAINERS_PER_POD"]) == (str(j), "2")
        assert env["WORLD_SIZE"] == "4"
        assert env["DISTGNN_SERVERS"] == ",".join(
            f"cora-trainers-{i}.cora-trainers.ml.svc:{contract.SERVER_PORT}" for i in range(2)
        )
    svc = next(
        o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "cora-trainers"
    )
    assert {p["port"] for p in svc["spec"]["ports"]} == {
        contract.RENDEZVOUS_PORT,
        contract.SERVER_PORT,
    }


def test_rank_of_a_colocated_trainer_container() -> None:
    env = {"JOB_COMPLETION_INDEX": "1", "DISTGNN_TRAINERS_PER_POD": "2", "LOCAL_RANK": "1"}
    assert contract.TrainerEnv.from_env(env).rank == 3
    assert contract.TrainerEnv.from_env({"JOB_COMPLETION_INDEX": "1"}).rank == 1
    assert contract.TrainerEnv.from_env({**env, "RANK": "0"}).rank == 0


def test_colocated_pods_admit_only_their_job_the_operator_and_scrapers() -> None:
    """The co-located pods' NetworkPolicy: the other partitions' trainers of the job reach
    the server's rpc port, rank 0's rendezvous and the DDP peers' ephemeral ports; the
    operator only ``progress``; scrapers only the metrics ports; nobody else anything."""
    objs = desired_job_children(parse_job(colocated_job()), CTX, token="t")
    (pol,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert pol["metadata"]["name"] == "cora-trainers"
    job = next(o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == "cora-trainers")
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert selects(pol, pod_labels)
    peer = Peer(pod_labels, "ml")  # another partition's pod of the job (same template)
    for port in (contract.SERVER_PORT, contract.RENDEZVOUS_PORT, 41234):
        assert admits(pol, peer, port), port
    others = [
        Peer({**pod_labels, contract.LABEL_JOB: "other"}, "ml"),  # another job's trainers
        Peer(pod_labels, "elsewhere"),  # the same labels in another namespace
        Peer({"app": "x"}, "ml"),
    ]
    operator = Peer(dict(OPERATOR_POD_LABELS), "distgnn-system", {"team": "platform"})
    for port in (contract.SERVER_PORT, contract.SERVER_HEALTH_PORT, contract.RENDEZVOUS_PORT):
        assert not any(admits(pol, p, port) for p in [*others, operator]), port
    assert admits(pol, operator, contract.TRAINER_PROGRESS_PORT)
    assert not any(admits(pol, p, contract.TRAINER_PROGRESS_PORT) for p in others)
    # metrics on (FULL_JOB): each trainer container's metrics port, from anywhere
    for port in (contract.TRAINER_METRICS_PORT, contract.TRAINER_METRICS_PORT + 1):
        assert all(admits(pol, p, port) for p in others), port
    assert not admits(pol, others[2], contract.TRAINER_METRICS_PORT + 2)
    off = colocated_job()
    off["spec"]["monitoring"]["metrics"] = False
    (pol_off,) = [
        o
        for o in desired_job_children(parse_job(off), CTX, token="t")
        if o["kind"] == "NetworkPolicy"
    ]
    assert not admits(pol_off, others[2], contract.TRAINER_METRICS_PORT)


def _template_labels(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    (o,) = [o for o in objs if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    return dict(o["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("metrics", [True, False])
@pytest.mark.parametrize("topology", ["own-servers", "graphserver"])
def test_trainer_pods_admit_only_their_job_the_operator_and_scrapers(
    topology: str, metrics: bool
) -> None:
    """Trainer pods of a job that is not co-located get ``NAME-trainers`` too: the job's
    trainers reach rendezvous and the DDP peers' ephemeral ports, the operator only
    ``progress``, scrapers only the metrics port (when on); servers are not selected."""
    spec = copy.deepcopy(FULL_JOB if topology == "own-servers" else ATTACHED)
    spec["spec"]["monitoring"] = {"metrics": metrics}
    info = GS_INFO if topology == "graphserver" else None
    name = spec["metadata"]["name"]
    objs = desired_job_children(parse_job(spec), CTX, token="t", graphserver=info)
    (pol,) = [
        o
        for o in objs
        if (o["kind"], o["metadata"]["name"]) == ("NetworkPolicy", f"{name}-trainers")
    ]
    assert pol["metadata"]["ownerReferences"][0]["uid"] == spec["metadata"]["uid"]
    trainer = _template_labels(objs, "Job", f"{name}-trainers")
    assert selects(pol, trainer)
    other = copy.deepcopy(spec)
    other["metadata"] |= {"name": "other", "uid": "uid-other"}
    other_objs = desired_job_children(parse_job(other), CTX, token="t", graphserver=info)
    gs_objs = desired_graphserver_children(parse_graphserver(GS), CTX, token="t")
    not_selected = [
        _template_labels(other_objs, "Job", "other-trainers"),  # another job's trainers
        _template_labels(gs_objs, "StatefulSet", "papers-server"),  # a GraphServer's pods
        _template_labels(gs_objs, "Job", "papers-partition"),
    ]
    if topology == "own-servers":
        not_selected += [
            _template_labels(objs, "StatefulSet", "cora-server"),  # the job's own servers
            _template_labels(objs, "Job", "cora-partition"),
        ]
    for labels in not_selected:
        assert not selects(pol, labels), labels
    mine = Peer(trainer, "ml")  # another rank of the job (same template)
    for port in (contract.RENDEZVOUS_PORT, 41234, contract.TRAINER_PROGRESS_PORT):
        assert admits(pol, mine, port), port
    others = [Peer(labels, "ml") for labels in not_selected] + [
        Peer(trainer, "elsewhere"),  # the same labels in another namespace
        Peer({"app": "x"}, "ml"),
    ]
    operator = Peer(dict(OPERATOR_POD_LABELS), "distgnn-system", {"team": "platform"})
    for port in (contract.RENDEZVOUS_PORT, 41234, contract.SERVER_PORT):
        assert not any(admits(pol, p, port) for p in [*others, operator]), port
    assert admits(pol, operator, contract.TRAINER_PROGRESS_PORT)
    assert not any(admits(pol, p, contract.TRAINER_PROGRESS_PORT) for p in others)
    assert all(admits(pol, p, contract.TRAINER_METRICS_PORT) is metrics for p in others)
    assert not admits(pol, others[-1], contract.TRAINER_METRICS_PORT + 1)  # one container


def _jobs() -> Iterator[tuple[str, dict[str, Any]]]:
    for case, objs in cases().items():
        for o in objs:
            if o["kind"] == "Job":
                yield f"{case}/{o['metadata']['name']}", o


@pytest.mark.parametrize(("where", "job"), list(_jobs()), ids=[w for w, _ in _jobs()])
def test_pod_failure_policies_pass_the_api_servers_rules(where: str, job: dict[str, Any]) -> None:
    """What the API server's Job validation asks of a ``podFailurePolicy`` (checked there,
    not in its OpenAPI schema): pods with ``restartPolicy: Never``; each rule with exactly
    one of ``onExitCodes`` / ``onPodConditions``; exit codes sorted, unique, no 0 with
    ``In``; a ``containerName`` that names a container of the template; known actions."""
    spec = job["spec"]
    policy = spec.get("podFailurePolicy")
    assert policy is not None, f"{where}: no podFailurePolicy"
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    names = {c["name"] for c in pod["containers"] + pod.get("initContainers", [])}
    assert 0 < len(policy["rules"]) <= 20
    for rule in policy["rules"]:
        assert rule["action"] in ("FailJob", "Ignore", "Count")
        assert ("onExitCodes" in rule) != ("onPodConditions" in rule), rule
        codes = rule.get("onExitCodes")
        if codes is not None:
            values = codes["values"]
            assert values == sorted(set(values)) and 0 < len(values) <= 255
            assert codes["operator"] in ("In", "NotIn")
            assert not (codes["operator"] == "In" and 0 in values)
            assert codes.get("containerName", next(iter(names))) in names
        for pattern in rule.get("onPodConditions") or []:
            assert pattern["status"] in ("True", "False", "Unknown") and pattern["type"]


def test_partitioning_fails_at_once_on_a_configuration_error_and_ignores_disruptions() -> None:
    """The partitioning Job: the partitioner's exit status 2 fails it (no retry), a
    disrupted pod does not count against ``backoffLimit``; the trainer Job fails at once
    on a disruption too (the operator restarts the group without counting it)."""
    jobs = dict(_jobs())
    for where in ("job-full/cora-partition", "graphserver/papers-partition"):
        pj = jobs[where]
        assert pj["spec"]["backoffLimit"] == 2
        exit_rule, disrupt_rule = pj["spec"]["podFailurePolicy"]["rules"]
        assert exit_rule == {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "partition",
                "operator": "In",
                "values": [contract.EXIT_CONFIG_ERROR],
            },
        }
        assert disrupt_rule == {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }
        assert pj["spec"]["template"]["spec"]["containers"][0]["name"] == "partition"
    for where in ("job-full/cora-trainers", "job-colocated/cora-trainers"):
        assert jobs[where]["spec"]["podFailurePolicy"]["rules"] == [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]


def _pods(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objs
        if o["kind"] in ("Job", "StatefulSet")
    }


def test_image_pull_secrets_on_every_pod_unless_the_pod_template_replaces_them() -> None:
    """The operator's default (the chart's runtimeImage.pullSecrets) goes on every pod it
    creates; a pod template's list replaces it for its pods ([] for none); names once."""
    ctx = DesiredContext(
        runtime_image="registry.example.com/distgnn:1.0",
        partitions_url="s3://parts",
        image_pull_secrets=("regcred", "mirror", "regcred"),
    )
    default = [{"name": "regcred"}, {"name": "mirror"}]
    for objs in (
        desired_job_children(parse_job(FULL_JOB), ctx, token="t"),
        desired_job_children(parse_job(colocated_job()), ctx, token="t"),
        desired_graphserver_children(parse_graphserver(GS), ctx, token="t"),
        desired_job_children(parse_job(ATTACHED), ctx, graphserver=GS_INFO),
    ):
        pods = _pods(objs)
        assert pods and all(p["imagePullSecrets"] == default for p in pods.values()), pods
    job = copy.deepcopy(FULL_JOB)
    job["spec"]["servers"]["podTemplate"]["imagePullSecrets"] = []
    job["spec"]["trainers"]["podTemplate"]["imagePullSecrets"] = [{"name": "team-registry"}]
    pods = _pods(desired_job_children(parse_job(job), ctx, token="t"))
    assert "imagePullSecrets" not in pods["StatefulSet/cora-server"]
    assert "imagePullSecrets" not in pods["Job/cora-partition"]  # the servers' template
    assert pods["Job/cora-trainers"]["imagePullSecrets"] == [{"name": "team-registry"}]
    plain = _pods(desired_job_children(parse_job(FULL_JOB), CTX, token="t"))
    assert all("imagePullSecrets" not in p for p in plain.values())  # no default: none
