"""Server pods that cannot start, from pod statuses as the kubelet writes them: the waiting
reason, the last termination (``lastState.terminated``, or ``state.terminated`` between a
crash and the back-off), the restart count. The line must not change while the pod's
state does not (restart counts and back-off times never appear), so a pass over an
unchanged pod writes nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distgnn_operator import stuckpods as sp
from distgnn_operator.status import (
    GraphServerObservation,
    JobObservation,
    graphserver_status,
    job_status,
)

STS_UID = "sts-uid-1"
IMAGE = "registry.example.com/distgnn-runtime:1.0"
# what `distgnn serve` logs before it exits 2 (JSON log lines, then the CLI's one line):
# the termination message FallbackToLogsOnError takes from the log tail
NO_CREDS = (
    "distgnn serve: error: s3://graphs/cora/cora.json: no S3 credentials (set "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or spec.storage.credentialsSecret on "
    "Kubernetes)"
)
SERVE_LOG_TAIL = (
    '{"ts": 1795619987.533, "level": "info", "logger": "distgnn.server", "msg": '
    '"graph server starting", "partition": 0}\n'
    '{"ts": 1795619987.533, "level": "info", "logger": "distgnn.server", "msg": '
    '"load partition: started", "partition": 0, "step": "load partition"}\n'
    '{"ts": 1795619987.934, "level": "info", "logger": "distgnn.server", "msg": '
    '"graph server stopped", "partition": 0}\n' + NO_CREDS + "\n"
)
UNREACHABLE = (
    "distgnn serve: error: s3://graphs/cora/cora.json: cannot reach the S3 endpoint "
    "http://minio:9000 (EndpointConnectionError)"
)


def terminated(code: int, message: str = "", reason: str = "Error") -> dict[str, Any]:
    return {
        "exitCode": code,
        "reason": reason,
        "message": message,
        "startedAt": "2026-11-25T14:00:01Z",
        "finishedAt": "2026-11-25T14:00:02Z",
        "containerID": "containerd://abc",
    }


def server_pod(
    ordinal: int,
    *,
    state: dict[str, Any],
    last: dict[str, Any] | None = None,
    ready: bool = False,
    restarts: int = 0,
    owner: str = STS_UID,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    cs: dict[str, Any] = {
        "name": "server",
        "image": IMAGE,
        "imageID": "",
        "ready": ready,
        "started": "running" in state,
        "restartCount": restarts,
        "state": state,
        "lastState": {"terminated": last} if last else {},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"cora-server-{ordinal}",
            "labels": {"statefulset.kubernetes.io/pod-name": f"cora-server-{ordinal}"},
            "ownerReferences": [
                {"kind": "StatefulSet", "name": "cora-server", "uid": owner, "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "server", "image": IMAGE}]},
        "status": {"phase": "Running", "conditions": conditions or [], "containerStatuses": [cs]},
    }


def crash_looping(ordinal: int, code: int, message: str, restarts: int = 3) -> dict[str, Any]:
    backoff = (
        f"back-off {10 * 2**restarts}s restarting failed container=server pod=cora-server-{ordinal}"
    )
    return server_pod(
        ordinal,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": backoff}},
        last=terminated(code, message),
        restarts=restarts,
    )


def waiting(ordinal: int, reason: str, message: str) -> dict[str, Any]:
    return server_pod(ordinal, state={"waiting": {"reason": reason, "message": message}})


CASES = [
    pytest.param(
        crash_looping(0, 2, SERVE_LOG_TAIL),
        ("CrashLoopBackOff", f"{NO_CREDS} (exit code 2)", 2),
        id="crash-loop-config-error",
    ),
    pytest.param(
        crash_looping(0, 1, UNREACHABLE + "\n"),
        ("CrashLoopBackOff", f"{UNREACHABLE} (exit code 1)", 1),
        id="crash-loop-retryable",
    ),
    pytest.param(
        crash_looping(0, 137, "", restarts=1),
        ("CrashLoopBackOff", "Error (exit code 137)", 137),
        id="killed-no-message",
    ),
    pytest.param(
        server_pod(
            0,
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            last=terminated(137, "", "OOMKilled"),
            restarts=2,
        ),
        (
            "CrashLoopBackOff",
            "OOMKilled (exit code 137): the container exceeded its memory limit",
            137,
        ),
        id="oom-killed",
    ),
    pytest.param(
        waiting(0, "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"'),
        (
            "ImagePullBackOff",
            f'cannot pull image "{IMAGE}" (kubectl describe pod cora-server-0)',
            None,
        ),
        id="image-pull-backoff",
    ),
    pytest.param(
        waiting(0, "ErrImagePull", f'rpc error: code = NotFound desc = failed to pull "{IMAGE}"'),
        (
            "ImagePullBackOff",
            f'cannot pull image "{IMAGE}" (kubectl describe pod cora-server-0)',
            None,
        ),
        id="err-image-pull-reads-as-backoff",
    ),
    pytest.param(
        waiting(0, "CreateContainerConfigError", 'secret "s3-creds" not found'),
        ("CreateContainerConfigError", 'secret "s3-creds" not found', None),
        id="create-container-config-error",
    ),
    pytest.param(
        server_pod(
            0,
            state={"waiting": {"reason": "Pending"}},
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory.",
                }
            ],
        ),
        ("Unschedulable", "0/3 nodes are available: 3 Insufficient memory.", None),
        id="unschedulable",
    ),
]


@pytest.mark.parametrize(("pod", "want"), CASES)
def test_why_a_server_pod_cannot_start(
    pod: dict[str, Any], want: tuple[str, str, int | None]
) -> None:
    got = sp.stuck(pod)
    assert got is not None
    assert (got.reason, got.why, got.exit_code) == want
    assert got.config_error == (want[2] == 2)
    assert got.describe() == f"pod cora-server-0: {want[0]}: {want[1]}"


ON_THEIR_WAY = [
    pytest.param(server_pod(0, state={"running": {"startedAt": "t"}}), id="loading"),
    pytest.param(waiting(0, "ContainerCreating", ""), id="creating"),
    pytest.param(
        server_pod(
            0,
            state={"running": {"startedAt": "t"}},
            last=terminated(2, NO_CREDS),
            ready=True,
            restarts=4,
        ),
        id="ready-after-a-config-error",
    ),
    pytest.param(
        server_pod(0, state={"running": {"startedAt": "t"}}, last=terminated(0), restarts=1),
        id="restarted-after-exit-0",
    ),
    pytest.param({"metadata": {"name": "cora-server-0"}, "status": {"phase": "Pending"}}, id="new"),
]


@pytest.mark.parametrize("pod", ON_THEIR_WAY)
def test_pods_on_their_way_or_ready_are_not_stuck(pod: dict[str, Any]) -> None:
    assert sp.stuck(pod) is None


def test_a_crash_loop_reads_the_same_at_every_restart() -> None:
    """Waiting in back-off, just terminated, running again before the next crash: one line,
    whatever the restart count and back-off time (so the status is not rewritten)."""
    lines = set()
    for restarts in (1, 2, 5, 9):
        lines.add(sp.stuck(crash_looping(1, 1, UNREACHABLE, restarts)).describe())  # type: ignore[union-attr]
    just_died = server_pod(
        1,
        state={"terminated": terminated(1, UNREACHABLE)},
        last=terminated(1, UNREACHABLE),
        restarts=6,
    )
    again = server_pod(
        1, state={"running": {"startedAt": "t"}}, last=terminated(1, UNREACHABLE), restarts=7
    )
    lines |= {sp.stuck(just_died).describe(), sp.stuck(again).describe()}  # type: ignore[union-attr]
    assert lines == {f"pod cora-server-1: CrashLoopBackOff: {UNREACHABLE} (exit code 1)"}


def test_first_stuck_is_the_lowest_ordinal_of_the_statefulsets_pods() -> None:
    pods = [
        waiting(3, "ImagePullBackOff", "x"),
        crash_looping(10, 2, NO_CREDS),
        crash_looping(2, 1, UNREACHABLE),
        server_pod(0, state={"running": {"startedAt": "t"}}, ready=True),
        crash_looping(1, 2, NO_CREDS),
    ]
    pods[4]["metadata"]["ownerReferences"][0]["uid"] = "an-older-statefulset"
    found = sp.all_stuck(pods, STS_UID)
    assert [s.pod for s in found] == ["cora-server-2", "cora-server-3", "cora-server-10"]
    assert sp.first_stuck(found).pod == "cora-server-2"  # type: ignore[union-attr]
    err = sp.first_config_error(found)
    assert err is not None and err.pod == "cora-server-10"
    assert err.failure().headline() == f"{NO_CREDS} (pod cora-server-10)"
    assert sp.all_stuck([], STS_UID) == [] and sp.first_config_error([]) is None


def test_a_pod_being_deleted_is_not_stuck() -> None:
    pod = copy.deepcopy(crash_looping(0, 2, NO_CREDS))
    pod["metadata"]["deletionTimestamp"] = "2026-11-25T14:00:00Z"
    assert sp.stuck(pod) is None


@pytest.mark.parametrize("kind", ["DistGNNJob", "GraphServer"])
def test_the_status_names_the_stuck_pod_and_stays_put(kind: str) -> None:
    line = sp.stuck(crash_looping(1, 1, UNREACHABLE)).describe()  # type: ignore[union-attr]
    want = f"1/2 servers ready; {line}"
    if kind == "DistGNNJob":

        def status(prev: dict[str, Any] | None, t: str, stuck: str | None) -> dict[str, Any]:
            o = JobObservation(
                partition="succeeded", num_parts=2, servers_ready=1, servers_stuck=stuck
            )
            return job_status(o, prev, t)

    else:

        def status(prev: dict[str, Any] | None, t: str, stuck: str | None) -> dict[str, Any]:
            o = GraphServerObservation(
                num_parts=2, servers_ready=1, partition="succeeded", servers_stuck=stuck
            )
            return graphserver_status(o, prev, t)

    a = status(None, "t0", line)
    conds = {c["type"]: c for c in a["conditions"]}
    assert a["phase"] == "Starting" and conds["ServersReady"]["message"] == want
    if kind == "DistGNNJob":
        assert conds["Running"]["message"] == want
    assert status(a, "t1", line) == a  # unchanged pod: nothing to write
    b = status(a, "t2", None)  # the pod recovered
    assert {c["type"]: c for c in b["conditions"]}["ServersReady"]["message"] == "1/2 servers ready"


# --- trainer pods (an Indexed Job's, restartPolicy Never) and co-located pods, whose
# graph server is a native sidecar (an init container with restartPolicy Always) ----------

JOB_UID = "job-uid-1"
TRAINER_IMAGE = "registry.example.com/distgnn-train:1.0"


def trainer_pod(
    index: int,
    trainers: list[dict[str, Any]],
    *,
    sidecar: dict[str, Any] | None = None,
    phase: str = "Pending",
    conditions: list[dict[str, Any]] | None = None,
    restart: str | None = None,
) -> dict[str, Any]:
    """A trainer pod of the Indexed Job ``cora-trainers`` as the kubelet reports it:
    ``trainers`` are its trainer containers' statuses (``trainer``, ``trainer-1``, ...);
    ``sidecar``, a co-located pod's server sidecar status (``initContainerStatuses``);
    ``restart``, the trainer containers' own ``restartPolicy`` (a container restart rule)."""
    name = f"cora-trainers-{index}-x{index}k9z"
    own = {"restartPolicy": restart} if restart else {}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "trainer" if i == 0 else f"trainer-{i}", "image": TRAINER_IMAGE, **own}
            for i in range(len(trainers))
        ],
    }
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions or [],
        "containerStatuses": [
            {
                "name": "trainer" if i == 0 else f"trainer-{i}",
                "image": TRAINER_IMAGE,
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                **cs,
            }
            for i, cs in enumerate(trainers)
        ],
    }
    if sidecar is not None:
        spec["initContainers"] = [{"name": "server", "image": IMAGE, "restartPolicy": "Always"}]
        status["initContainerStatuses"] = [
            {
                "name": "server",
                "image": IMAGE,
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                **sidecar,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "job-name": "cora-trainers",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [
                {"kind": "Job", "name": "cora-trainers", "uid": JOB_UID, "controller": True}
            ],
        },
        "spec": spec,
        "status": status,
    }


def wait(reason: str, message: str = "") -> dict[str, Any]:
    return {"state": {"waiting": {"reason": reason, **({"message": message} if message else {})}}}


INITIALIZING = wait("PodInitializing")
SIDECAR_CRASH = {
    "restartCount": 4,
    "state": {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 1m20s restarting failed container=server",
        }
    },
    "lastState": {"terminated": terminated(2, SERVE_LOG_TAIL)},
}
NO_KEY = "couldn't find key token in Secret default/cora-token"
NO_NODE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": NO_NODE,
}
SIDECAR_READY = {"ready": True, "started": True, "state": {"running": {"startedAt": "t"}}}
TRAINER_ERROR = "ConfigError: --feat (trainers.app.feat): no node feature 'x'"
TRAINER_CRASH = {
    "restartCount": 3,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
    "lastState": {
        "terminated": terminated(
            2, f'{{"error": "ConfigError", "message": "{TRAINER_ERROR[13:]}"}}'
        )
    },
}
TRAINER_JUST_EXITED_2 = {
    "restartCount": 1,
    "state": {
        "terminated": terminated(
            2, f'{{"error": "ConfigError", "message": "{TRAINER_ERROR[13:]}"}}'
        )
    },
}
TRAINER_JUST_EXITED_42 = {
    "restartCount": 1,
    "state": {"running": {"startedAt": "t"}},
    "lastState": {"terminated": terminated(42, "RuntimeError: retry me")},
}


def with_rules(pod: dict[str, Any], policy: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """``pod`` with its trainer containers' ``restartPolicy`` and ``restartPolicyRules``
    (KEP-5307 container restart rules: the first rule that matches an exit decides)."""
    for c in pod["spec"]["containers"]:
        c.update(restartPolicy=policy, restartPolicyRules=rules)
    return pod


TRAINER_CASES = [
    pytest.param(
        trainer_pod(1, [wait("ImagePullBackOff", f'Back-off pulling image "{TRAINER_IMAGE}"')]),
        (),
        "pod cora-trainers-1-x1k9z: ImagePullBackOff: cannot pull image "
        f'"{TRAINER_IMAGE}" (kubectl describe pod cora-trainers-1-x1k9z)',
        None,
        id="image-pull",
    ),
    pytest.param(
        trainer_pod(0, [wait("CreateContainerConfigError", NO_KEY)]),
        (),
        f"pod cora-trainers-0-x0k9z: CreateContainerConfigError: {NO_KEY}",
        None,
        id="missing-secret-key",
    ),
    pytest.param(
        trainer_pod(
            0,
            [wait("ContainerCreating")],
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": NO_NODE,
                }
            ],
        ),
        (),
        f"pod cora-trainers-0-x0k9z: Unschedulable: {NO_NODE}",
        None,
        id="unschedulable",
    ),
    pytest.param(
        trainer_pod(0, [INITIALIZING], sidecar=SIDECAR_CRASH),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container server): CrashLoopBackOff: {NO_CREDS} (exit code 2)",
        f"{NO_CREDS} (pod cora-trainers-0-x0k9z, container server)",
        id="colocated-server-sidecar-exits-2",
    ),
    pytest.param(
        trainer_pod(
            0,
            [INITIALIZING],
            sidecar={**SIDECAR_CRASH, "lastState": {"terminated": terminated(1, UNREACHABLE)}},
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container server): CrashLoopBackOff: {UNREACHABLE} "
        "(exit code 1)",
        None,
        id="colocated-server-sidecar-exits-1",
    ),
    pytest.param(
        trainer_pod(
            0,
            [wait("ImagePullBackOff", "x"), wait("ImagePullBackOff", "x")],
            sidecar={"ready": True, "started": True, "state": {"running": {"startedAt": "t"}}},
            phase="Running",
        ),
        ("server",),
        "pod cora-trainers-0-x0k9z (container trainer): ImagePullBackOff: cannot pull image "
        f'"{TRAINER_IMAGE}" (kubectl describe pod cora-trainers-0-x0k9z)',
        None,
        id="colocated-trainers-cannot-pull",
    ),
    pytest.param(
        trainer_pod(
            0,
            [
                {"state": {"running": {"startedAt": "t"}}},
                wait("CreateContainerConfigError", NO_KEY),
            ],
            sidecar=SIDECAR_READY,
            phase="Running",
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container trainer-1): CreateContainerConfigError: {NO_KEY}",
        None,
        id="colocated-second-trainer-missing-key",
    ),
    pytest.param(
        # a trainer the kubelet restarts (a container restart rule), crash-looping
        # beside a server that is fine: the trainers', whatever its exit status
        trainer_pod(
            0, [TRAINER_CRASH], sidecar=SIDECAR_READY, phase="Running", restart="OnFailure"
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container trainer): CrashLoopBackOff: {TRAINER_ERROR} "
        "(exit code 2)",
        f"{TRAINER_ERROR} (pod cora-trainers-0-x0k9z, container trainer)",
        id="colocated-trainer-crash-loop",
    ),
    pytest.param(
        # the kubelet says it restarts it: believed, whatever the policies read
        trainer_pod(0, [TRAINER_CRASH], sidecar=SIDECAR_READY, phase="Running"),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container trainer): CrashLoopBackOff: {TRAINER_ERROR} "
        "(exit code 2)",
        f"{TRAINER_ERROR} (pod cora-trainers-0-x0k9z, container trainer)",
        id="colocated-trainer-in-back-off",
    ),
    pytest.param(
        trainer_pod(
            0,
            [wait("ContainerCreating")],
            sidecar=wait("PodInitializing"),
            conditions=[UNSCHEDULABLE],
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z: Unschedulable: {NO_NODE}",
        None,
        id="colocated-unschedulable",
    ),
    pytest.param(
        # a container restart rule (KEP-5307) restarts the trainer in place on exit 2: it
        # is a configuration error all the same, named with its container
        with_rules(
            trainer_pod(0, [TRAINER_JUST_EXITED_2], phase="Running"),
            "Never",
            [{"action": "Restart", "exitCodes": {"operator": "In", "values": [2, 42]}}],
        ),
        (),
        f"pod cora-trainers-0-x0k9z (container trainer): CrashLoopBackOff: {TRAINER_ERROR} "
        "(exit code 2)",
        f"{TRAINER_ERROR} (pod cora-trainers-0-x0k9z, container trainer)",
        id="restart-rule-trainer-exits-2",
    ),
    pytest.param(
        # a rule restarts exit 42 in place: crash-looping, not a configuration error
        with_rules(
            trainer_pod(0, [TRAINER_JUST_EXITED_42], phase="Running"),
            "Never",
            [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
        ),
        (),
        "pod cora-trainers-0-x0k9z: CrashLoopBackOff: RuntimeError: retry me (exit code 42)",
        None,
        id="restart-rule-trainer-exits-42",
    ),
    pytest.param(
        # co-located, not restarted: the pod runs on with its other trainer, and its Job
        # would say only once that one has failed too
        trainer_pod(
            0,
            [{"state": {"running": {"startedAt": "t"}}}, TRAINER_JUST_EXITED_2],
            sidecar=SIDECAR_READY,
            phase="Running",
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container trainer-1): Error: {TRAINER_ERROR} (exit code 2)",
        f"{TRAINER_ERROR} (pod cora-trainers-0-x0k9z, container trainer-1)",
        id="colocated-second-trainer-exits-2",
    ),
    pytest.param(
        # the exit 2 comes first, not the lower container that cannot start
        trainer_pod(
            0,
            [wait("CreateContainerConfigError", NO_KEY), TRAINER_CRASH],
            sidecar=SIDECAR_READY,
            phase="Running",
            restart="OnFailure",
        ),
        ("server",),
        f"pod cora-trainers-0-x0k9z (container trainer-1): CrashLoopBackOff: {TRAINER_ERROR} "
        "(exit code 2)",
        f"{TRAINER_ERROR} (pod cora-trainers-0-x0k9z, container trainer-1)",
        id="colocated-exit-2-before-a-stuck-sibling",
    ),
]


@pytest.mark.parametrize(("pod", "sidecars", "line", "failure"), TRAINER_CASES)
def test_why_a_trainer_pod_cannot_start(
    pod: dict[str, Any], sidecars: tuple[str, ...], line: str, failure: str | None
) -> None:
    """``failure``: the exit 2 that fails the job (a server's or a trainer's), as the
    Failed condition names it."""
    got = sp.stuck(pod, "trainer", sidecars)
    assert got is not None and got.describe() == line
    assert got.config_error == (failure is not None)
    # co-located: the servers' when the sidecar or the whole pod cannot start, else the
    # trainers' (the sidecar is fine: the status does not blame the servers)
    servers, trainers = sp.split([got])
    theirs = bool(sidecars) and ("(container server)" in line or "Unschedulable" in line)
    assert (len(servers), len(trainers)) == ((1, 0) if theirs else (0, 1))
    if failure is not None:
        assert got.failure().headline() == failure


TRAINERS_NOT_STUCK = [
    pytest.param(trainer_pod(0, [wait("ContainerCreating")]), (), id="creating"),
    pytest.param(
        trainer_pod(0, [INITIALIZING], sidecar={"state": {"running": {"startedAt": "t"}}}),
        ("server",),
        id="colocated-server-loading",
    ),
    pytest.param(
        # a trainer container is never restarted (restartPolicy Never): it failed, and
        # its Job says so; the pod's other trainer still runs
        trainer_pod(
            0,
            [
                {"state": {"running": {"startedAt": "t"}}},
                {"state": {"terminated": terminated(1, "RuntimeError: boom")}},
            ],
            phase="Running",
        ),
        (),
        id="trainer-exited-not-restarted",
    ),
    pytest.param(
        trainer_pod(0, [{"state": {"terminated": terminated(2, NO_CREDS)}}], phase="Failed"),
        (),
        id="pod-failed",
    ),
    pytest.param(
        # no rule matches exit 1: the container's restartPolicy Never holds, it failed
        with_rules(
            trainer_pod(
                0,
                [{"state": {"terminated": terminated(1, "RuntimeError: boom")}}],
                phase="Running",
            ),
            "Never",
            [{"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1]}}],
        ),
        (),
        id="restart-rule-not-matching",
    ),
    pytest.param(
        # without the sidecar named, its crash loop is not read (a non-co-located job
        # has no server in its trainer pods)
        trainer_pod(0, [INITIALIZING], sidecar=SIDECAR_CRASH),
        (),
        id="sidecar-not-named",
    ),
]


@pytest.mark.parametrize(("pod", "sidecars"), TRAINERS_NOT_STUCK)
def test_trainer_pods_on_their_way_or_failed_are_not_stuck(
    pod: dict[str, Any], sidecars: tuple[str, ...]
) -> None:
    assert sp.stuck(pod, "trainer", sidecars) is None


def test_the_lowest_completion_index_of_the_jobs_pods_is_first() -> None:
    pods = [
        trainer_pod(10, [INITIALIZING], sidecar=SIDECAR_CRASH),
        trainer_pod(2, [wait("ImagePullBackOff", "x")]),
        trainer_pod(1, [INITIALIZING], sidecar={"state": {"running": {"startedAt": "t"}}}),
    ]
    found = sp.all_stuck(pods, JOB_UID, "trainer", ("server",))
    assert [s.index for s in found] == [2, 10]
    assert sp.first_config_error(found) is found[1]
    assert sp.all_stuck(pods, "another-job", "trainer", ("server",)) == []


def test_a_crash_looping_sidecar_reads_the_same_at_every_restart() -> None:
    lines = set()
    for restarts, state in [
        (1, SIDECAR_CRASH["state"]),
        (2, {"terminated": terminated(2, SERVE_LOG_TAIL)}),
        (3, {"running": {"startedAt": "t"}}),
    ]:
        sidecar = {**SIDECAR_CRASH, "restartCount": restarts, "state": state}
        pod = trainer_pod(0, [INITIALIZING], sidecar=sidecar)
        lines.add(sp.stuck(pod, "trainer", ("server",)).describe())  # type: ignore[union-attr]
    assert len(lines) == 1


def test_trainers_pending_names_the_stuck_pod_and_stays_put() -> None:
    pod = trainer_pod(1, [wait("CreateContainerConfigError", NO_KEY)])
    line = sp.stuck(pod, "trainer").describe()  # type: ignore[union-attr]

    def status(prev: dict[str, Any] | None, t: str, stuck: str | None) -> dict[str, Any]:
        o = JobObservation(
            partition="succeeded",
            num_parts=2,
            servers_ready=2,
            trainer_job="running",
            trainers_active=2,
            trainers_ready=1,
            trainers_stuck=stuck,
        )
        return job_status(o, prev, t)

    a = status(None, "t0", line)
    running = {c["type"]: c for c in a["conditions"]}["Running"]
    assert (a["phase"], running["reason"]) == ("Starting", "TrainersPending")
    assert running["message"] == f"1/2 trainer pod(s) running, 1 pending; {line}"
    assert status(a, "t1", line) == a
    b = status(a, "t2", None)
    assert {c["type"]: c for c in b["conditions"]}["Running"]["message"] == (
        "1/2 trainer pod(s) running, 1 pending (see the pods' events)"
    )


def test_a_colocated_job_blames_its_servers_only_for_what_is_theirs() -> None:
    """Co-located pods whose server sidecars are ready: a trainer container that cannot
    start is the trainers' (TrainersPending names the container, ServersReady is True);
    while another pod's server still loads, the job is ServersStarting and its message
    names the trainer container, but the ServersReady condition does not."""
    running = {"ready": True, "started": True, "state": {"running": {"startedAt": "t"}}}
    stuck_pod = trainer_pod(0, [wait("ImagePullBackOff", "x")], sidecar=SIDECAR_READY)
    pods = [stuck_pod, trainer_pod(1, [running], sidecar=SIDECAR_READY, phase="Running")]
    servers, trainers = sp.split(sp.all_stuck(pods, JOB_UID, "trainer", ("server",)))
    assert servers == [] and [t.index for t in trainers] == [0]
    assert sp.sidecars_ready(pods, JOB_UID, "server") == 2
    assert sp.sidecars_ready(pods, "another-job", "server") == 0
    line = trainers[0].describe()
    assert line.startswith(f"pod {stuck_pod['metadata']['name']} (container trainer): ")

    def status(ready: int, prev: dict[str, Any] | None = None) -> dict[str, Any]:
        o = JobObservation(
            partition="succeeded",
            num_parts=2,
            servers_ready=ready,
            trainer_job="running",
            trainers_active=2,
            trainers_ready=1,
            trainers_stuck=line,
            colocated=True,
        )
        return job_status(o, prev, "t0")

    st = status(2)
    conds = {c["type"]: c for c in st["conditions"]}
    assert (st["phase"], conds["Running"]["reason"]) == ("Starting", "TrainersPending")
    assert conds["Running"]["message"] == f"1/2 trainer pod(s) running, 1 pending; {line}"
    assert conds["ServersReady"]["status"] == "True"
    assert status(2, st) == st  # unchanged pods: nothing to write
    loading = trainer_pod(1, [INITIALIZING], sidecar={"state": {"running": {"startedAt": "t"}}})
    assert sp.sidecars_ready([stuck_pod, loading], JOB_UID, "server") == 1
    st = status(1)
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Running"]["reason"] == "ServersStarting"
    assert conds["Running"]["message"] == f"1/2 servers ready; {line}"
    assert conds["ServersReady"]["message"] == "1/2 servers ready"
