"""Trainer pods that cannot start, on the Kubernetes API emulator (the test plays the Job
controller and the kubelet): the job's status names the lowest-index stuck trainer pod;
a co-located pod's crash-looping server sidecar is named as its servers are, and its
exit 2 fails the job (ServerConfigError), while its trainer container that cannot start
is the trainers' (TrainersPending, the container named); a job attached to a Failed
GraphServer names that failure while it waits, and its activeDeadlineSeconds still fails
it; a job attached to a GraphServer Starting with a stuck server pod names that pod."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    PROMPT,
    SERVE_NO_OBJECT,
    SERVE_UNREACHABLE,
    Cluster,
    Operator,
    _graphserver,
    _servers_ready,
    _succeed_partition,
    assert_settled,
    cluster,
    cond,
    crash_looping_status,
    job_manifest,
    operator_args,
    phase_reason,
    server_pod,
    st_msg,
)

from distgnn import contract

pytestmark = pytest.mark.timeout(120)

IMAGE = "example.org/distgnn:test"
NO_KEY = "couldn't find key token in Secret default/stk-token"


def waiting_status(reason: str, message: str) -> dict[str, Any]:
    """A trainer pod whose trainer container the kubelet cannot create or pull."""
    return {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": IMAGE,
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ],
    }


def sidecar_crash_status(exit_code: int, log_tail: str, restarts: int) -> dict[str, Any]:
    """A co-located trainer pod while its server sidecar (an init container with
    restartPolicy Always) crash-loops: the pod is Pending, not initialized, its trainer
    container waits (PodInitializing), the sidecar's state is in initContainerStatuses."""
    server = crash_looping_status(exit_code, log_tail, restarts)["containerStatuses"][0]
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ],
        "initContainerStatuses": [server],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": IMAGE,
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }
        ],
    }


def colocated_status(trainer: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    """A co-located trainer pod whose server sidecar is ready (its partition loaded), its
    trainer container in state ``trainer`` (ready or not)."""
    server = {
        "name": "server",
        "image": IMAGE,
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": "2026-11-25T14:00:00Z"}},
    }
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": str(ready), "reason": "ContainersNotReady"}],
        "initContainerStatuses": [server],
        "containerStatuses": [
            {
                "name": "trainer",
                "image": IMAGE,
                "ready": ready,
                "started": ready,
                "restartCount": 0,
                "state": trainer,
            }
        ],
    }


async def trainer_pod(
    c: Cluster,
    job: str,
    index: int,
    status: dict[str, Any],
    colocated: bool = False,
    trainer: dict[str, Any] | None = None,
) -> str:
    """A pod of the Indexed trainer Job ``job`` as the Job controller creates it (its
    trainer container with the fields ``trainer`` more); its status as the kubelet writes
    it. Returns its name."""
    tjob = await c.child("Job", job)
    name = f"{job}-{index}-q7x{index}z"
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": IMAGE, **(trainer or {})}],
    }
    if colocated:
        spec["initContainers"] = [{"name": "server", "image": IMAGE, "restartPolicy": "Always"}]
    await c.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {"job-name": job, "batch.kubernetes.io/job-completion-index": str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job,
                        "uid": tjob["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }
    )
    await c.patch("Pod", name, {"status": status})
    return name


async def test_a_stuck_trainer_pod_is_named_in_trainers_pending(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """Trainer pods that cannot start (a key missing from a Secret, an image that cannot
    be pulled) change nothing the trainer Job reports but ``ready``: the job's status
    names the lowest-index one and why, and drops it when the pod runs."""
    c = cluster
    async with Operator(operator_args):
        await c.create(job_manifest("stk", graph={"partitions": {"manifestURL": "s3://p/s.json"}}))
        await _servers_ready(c, "stk-server", 2)
        await c.child("Job", "stk-trainers")
        pull = f'Back-off pulling image "{IMAGE}"'
        p1 = await trainer_pod(c, "stk-trainers", 1, waiting_status("ImagePullBackOff", pull))
        p0 = await trainer_pod(
            c, "stk-trainers", 0, waiting_status("CreateContainerConfigError", NO_KEY)
        )
        await c.patch("Job", "stk-trainers", {"status": {"active": 2, "ready": 0}}, "status")
        want = (
            f"0/2 trainer pod(s) running, 2 pending; pod {p0}: CreateContainerConfigError: {NO_KEY}"
        )

        async def named() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "stk")
            return st if st_msg(st) == want else None

        st = await c.until("the stuck trainer pod named", named, timeout=PROMPT)
        assert st["phase"] == "Starting" and phase_reason(st) == "TrainersPending"
        running = {"name": "trainer", "ready": True, "state": {"running": {"startedAt": "t"}}}
        await c.patch("Pod", p0, {"status": {"phase": "Running", "containerStatuses": [running]}})
        await c.patch("Job", "stk-trainers", {"status": {"ready": 1}}, "status")
        want = (
            f"1/2 trainer pod(s) running, 1 pending; pod {p1}: ImagePullBackOff: cannot pull "
            f'image "{IMAGE}" (kubectl describe pod {p1})'
        )
        await c.until("the next stuck pod named", named, timeout=PROMPT)
        await assert_settled(c)
        await c.patch("Job", "stk-trainers", {"status": {"ready": 2}}, "status")
        await c.phase("DistGNNJob", "stk", "Running")


async def test_a_colocated_server_sidecar_is_named_and_its_exit_2_fails_the_job(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """``trainers.colocate``: a server sidecar crash-looping (exit 1) is named in the
    ServersStarting message as a StatefulSet's server is; when it exits 2 the job fails at
    once (ServerConfigError, a Warning event, the trainer Job deleted)."""
    c = cluster
    c.k.server_version = "1.29"
    async with Operator(operator_args):
        trainers = {"replicas": 2, "colocate": True, "app": {"name": "node-classification"}}
        await c.create(job_manifest("cl", trainers=trainers))
        await _succeed_partition(c, "cl")
        await c.child("Job", "cl-trainers")
        pod = await trainer_pod(
            c, "cl-trainers", 0, sidecar_crash_status(1, SERVE_UNREACHABLE, 2), colocated=True
        )
        await c.patch("Job", "cl-trainers", {"status": {"active": 2, "ready": 0}}, "status")
        line = f"pod {pod} (container server): CrashLoopBackOff: {SERVE_UNREACHABLE} (exit code 1)"

        async def named() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "cl")
            return st if st_msg(st) == f"0/2 servers ready; {line}" else None

        st = await c.until("the crash-looping sidecar named", named, timeout=PROMPT)
        assert phase_reason(st) == "ServersStarting"
        assert cond(st, "ServersReady")["message"] == f"0/2 servers ready; {line}"

        await c.patch("Pod", pod, {"status": sidecar_crash_status(2, SERVE_NO_OBJECT, 3)})
        st = await c.phase("DistGNNJob", "cl", "Failed", timeout=PROMPT)
        assert cond(st, "Failed")["reason"] == "ServerConfigError"
        assert cond(st, "Failed")["message"] == (
            "graph server exited with a configuration error (exit code 2), not retried: "
            f"{SERVE_NO_OBJECT} (pod {pod}, container server)"
        )
        assert (await c.event("cl", "ServerConfigError"))["type"] == "Warning"
        assert (await c.event("cl", "PodFailed"))["message"].endswith(SERVE_NO_OBJECT)
        assert await c.get("Job", "cl-trainers") is None  # cleanPodPolicy Running
        await assert_settled(c)


async def test_a_trainer_restarted_in_place_that_exits_2_fails_the_job(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """A trainer container that a container restart rule (KEP-5307) restarts in place
    never fails its pod, so the trainer Job reports nothing but ``ready``; its exit 2
    (``lastState.terminated``) fails the job at once as a failed pod's would
    (TrainerConfigError naming the pod and container, a PodFailed event, the trainer Job
    deleted), not TrainersPending."""
    c = cluster
    async with Operator(operator_args):
        await c.create(job_manifest("rr", graph={"partitions": {"manifestURL": "s3://p/s.json"}}))
        await _servers_ready(c, "rr-server", 2)
        await c.child("Job", "rr-trainers")
        rules = {
            "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}}
            ],
        }
        error = {"error": "ConfigError", "message": "--feat (trainers.app.feat): no feature 'x'"}
        crash = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": IMAGE,
                    "ready": False,
                    "started": False,
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 2,
                            "reason": "Error",
                            "message": json.dumps(error),
                            "finishedAt": "2026-11-25T14:00:02Z",
                        }
                    },
                }
            ],
        }
        running = {"phase": "Running", "containerStatuses": [
            {"name": "trainer", "ready": True, "state": {"running": {"startedAt": "t"}}}
        ]}  # fmt: skip
        await trainer_pod(c, "rr-trainers", 0, running, trainer=rules)
        pod = await trainer_pod(c, "rr-trainers", 1, crash, trainer=rules)
        await c.patch("Job", "rr-trainers", {"status": {"active": 2, "ready": 1}}, "status")
        st = await c.phase("DistGNNJob", "rr", "Failed", timeout=PROMPT)
        assert cond(st, "Failed")["reason"] == "TrainerConfigError"
        assert cond(st, "Failed")["message"] == (
            "trainer group failed with a configuration error (exit code 2), not retried: "
            f"ConfigError: {error['message']} (pod {pod}, container trainer)"
        )
        assert (await c.event("rr", "PodFailed"))["message"].startswith(f"pod {pod} ")
        assert await c.get("Job", "rr-trainers") is None  # cleanPodPolicy Running
        await assert_settled(c)


async def test_a_job_on_a_failed_graphserver_names_it_and_its_deadline_still_applies(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """A GraphServer Failed on a server's configuration error can recover (fixed data, a
    restarted server), so an attached job keeps waiting (GraphServerNotReady) but says
    why, in one line; its activeDeadlineSeconds fails it all the same."""
    c = cluster
    async with Operator(operator_args):
        await c.create(_graphserver("gsf", 2))
        await server_pod(c, "gsf-server", 0, contract.LABEL_GRAPHSERVER, "gsf")
        await c.patch("StatefulSet", "gsf-server", {"status": {"replicas": 2}}, "status")
        crash = crash_looping_status(2, SERVE_NO_OBJECT, 1)
        await c.patch("Pod", "gsf-server-0", {"status": crash})
        gs = await c.phase("GraphServer", "gsf", "Failed", timeout=PROMPT)
        gs_msg = cond(gs, "Failed")["message"]
        run_policy = {"activeDeadlineSeconds": 12}
        await c.create(
            job_manifest("onf", graph={"graphServer": {"name": "gsf"}}, runPolicy=run_policy)
        )
        st = await c.reason("DistGNNJob", "onf", "GraphServerNotReady", timeout=PROMPT)
        assert st["phase"] == "Pending"
        assert st_msg(st) == (
            f"waiting for GraphServer gsf to be Ready; it is Failed: ServerConfigError: {gs_msg}"
        )
        assert SERVE_NO_OBJECT in st_msg(st)
        st = await c.phase("DistGNNJob", "onf", "Failed", timeout=PROMPT)
        assert cond(st, "Failed")["reason"] == "DeadlineExceeded"
        assert await c.get("Job", "onf-trainers") is None


async def test_a_job_on_a_graphserver_with_a_stuck_pod_says_so_while_it_waits(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """A GraphServer only Starting because a server pod crash-loops (exit 1: the kubelet
    retries) names that pod in its status; a job waiting for it says so in one line,
    writes nothing more while the pod's state only repeats, and drops it once the pod
    is on its way again."""
    c = cluster
    async with Operator(operator_args):
        await c.create(_graphserver("gsk", 2))
        await server_pod(c, "gsk-server", 1, contract.LABEL_GRAPHSERVER, "gsk")
        await c.patch("StatefulSet", "gsk-server", {"status": {"replicas": 2}}, "status")
        await c.patch("StatefulSet", "gsk-server", {"status": {"readyReplicas": 1}}, "status")
        crash = crash_looping_status(1, SERVE_UNREACHABLE, 1)
        await c.patch("Pod", "gsk-server-1", {"status": crash})
        line = f"pod gsk-server-1: CrashLoopBackOff: {SERVE_UNREACHABLE} (exit code 1)"

        async def gs_named() -> dict[str, Any] | None:
            st = await c.status("GraphServer", "gsk")
            ok = st.get("conditions") and line in cond(st, "ServersReady")["message"]
            return st if ok else None

        gs = await c.until("the stuck pod in the GraphServer's status", gs_named, timeout=PROMPT)
        assert gs["phase"] == "Starting"
        await c.create(job_manifest("onk", graph={"graphServer": {"name": "gsk"}}))
        want = (
            "waiting for GraphServer gsk to be Ready; it is Starting: ServersStarting: "
            f"1/2 servers ready; {line}"
        )

        async def job_named() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "onk")
            return st if st.get("conditions") and st_msg(st) == want else None

        st = await c.until("the stuck pod in the job's status", job_named, timeout=PROMPT)
        assert st["phase"] == "Pending" and phase_reason(st) == "GraphServerNotReady"
        # a restart more: the same line, nothing written
        await c.patch(
            "Pod", "gsk-server-1", {"status": crash_looping_status(1, SERVE_UNREACHABLE, 2)}
        )
        await assert_settled(c)
        loading = {"phase": "Running", "containerStatuses": [
            {"name": "server", "ready": False, "restartCount": 3, "state": {"running": {}}}
        ]}  # fmt: skip
        await c.patch("Pod", "gsk-server-1", {"status": loading})

        async def plain() -> bool:
            msg = st_msg(await c.status("DistGNNJob", "onk"))
            return msg == "waiting for GraphServer gsk to be Ready"

        await c.until("the job's message without the pod", plain, timeout=PROMPT)


async def test_a_colocated_trainer_container_that_cannot_start_is_the_trainers(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """``trainers.colocate``: a pod whose server sidecar is ready but whose trainer
    container cannot pull its image is the trainers' trouble, not the servers': every
    server ready (ServersReady True), the job TrainersPending, the message naming the
    trainer container of that pod; Running once it runs."""
    c = cluster
    c.k.server_version = "1.29"
    async with Operator(operator_args):
        trainers = {"replicas": 2, "colocate": True, "app": {"name": "node-classification"}}
        await c.create(job_manifest("ct", trainers=trainers))
        await _succeed_partition(c, "ct")
        await c.child("Job", "ct-trainers")
        pull = {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling "{IMAGE}"'}}
        p0 = await trainer_pod(c, "ct-trainers", 0, colocated_status(pull), colocated=True)
        running = {"running": {"startedAt": "2026-11-25T14:00:01Z"}}
        await trainer_pod(c, "ct-trainers", 1, colocated_status(running, True), colocated=True)
        await c.patch("Job", "ct-trainers", {"status": {"active": 2, "ready": 1}}, "status")
        want = (
            f"1/2 trainer pod(s) running, 1 pending; pod {p0} (container trainer): "
            f'ImagePullBackOff: cannot pull image "{IMAGE}" (kubectl describe pod {p0})'
        )

        async def named() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "ct")
            return st if st_msg(st) == want else None

        st = await c.until("the trainer container named", named, timeout=PROMPT)
        assert st["phase"] == "Starting" and phase_reason(st) == "TrainersPending"
        servers = cond(st, "ServersReady")
        assert (servers["status"], servers["reason"]) == ("True", "ServersReady")
        assert st["partitionsReady"] == 2
        await assert_settled(c)
        await c.patch("Pod", p0, {"status": colocated_status(running, True)})
        await c.patch("Job", "ct-trainers", {"status": {"ready": 2}}, "status")
        await c.phase("DistGNNJob", "ct", "Running", timeout=PROMPT)
