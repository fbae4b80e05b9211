"""Server pods that cannot start, from pod statuses as the kubelet writes them: the waiting
reason, the last termination (``lastState.terminated``, or ``state.terminated`` between a
crash and the back-off), the restart count. The line must not change while the pod's
state does not (restart counts and back-off times never appear), so a pass over an
unchanged pod writes nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distgnn_operator import serverpods as sp
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
    just_died = server_pod(1, state={"terminated": terminated(1, UNREACHABLE)},
                           last=terminated(1, UNREACHABLE), restarts=6)  # fmt: skip
    again = server_pod(1, state={"running": {"startedAt": "t"}}, last=terminated(1, UNREACHABLE),
                       restarts=7)  # fmt: skip
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
