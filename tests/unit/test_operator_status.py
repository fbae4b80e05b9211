"""Status from observations: phase/reason table, conditions, transitions, terminal phases."""

from __future__ import annotations

import dataclasses

import pytest

from distgnn_operator.status import (
    GraphServerObservation,
    JobObservation,
    Reason,
    graphserver_cause,
    graphserver_status,
    graphserver_terminating,
    job_phase,
    job_status,
    transition_event,
)

BASE = JobObservation(
    generation=3,
    partition_needed=True,
    partition="succeeded",
    num_parts=2,
    servers_ready=2,
    trainer_job="running",
    trainers_active=2,
)


def obs(**kw: object) -> JobObservation:
    return dataclasses.replace(BASE, **kw)  # type: ignore[arg-type]


TABLE = [
    (obs(), "Running", Reason.TRAINERS_RUNNING),
    (obs(invalid="spec.x: bad"), "Failed", Reason.INVALID),
    (obs(unsupported="needs 1.29", trainer_job="absent"), "Failed", Reason.SIDECARS_UNSUPPORTED),
    (obs(partition="running", trainer_job="absent"), "Partitioning", Reason.PARTITIONING),
    (obs(partition="absent", trainer_job="absent"), "Partitioning", Reason.PARTITIONING),
    (obs(partition="failed", partition_message="no such file"), "Failed", Reason.PARTITION_FAILED),
    (
        obs(partition="failed", partition_config_error=True, trainer_job="absent"),
        "Failed",
        Reason.PARTITION_CONFIG_ERROR,
    ),
    (
        obs(partition_needed=False, partition="absent", servers_ready=1, trainer_job="absent"),
        "Starting",
        Reason.SERVERS_STARTING,
    ),
    (obs(trainer_job="absent", trainers_active=0), "Starting", Reason.TRAINERS_STARTING),
    (obs(trainer_job="running", trainers_active=0), "Starting", Reason.TRAINERS_STARTING),
    (obs(trainer_job="succeeded", trainers_active=0), "Succeeded", Reason.SUCCEEDED),
    (obs(trainer_job="failed", restarting=True, restarts=1), "Starting", Reason.RESTARTING),
    (obs(trainer_job="failed", restarts=3), "Failed", Reason.BACKOFF),
    (obs(trainer_job="failed", config_error=True), "Failed", Reason.CONFIG_ERROR),
    (obs(deadline_exceeded=True), "Failed", Reason.DEADLINE),
    (obs(suspended=True, trainer_job="absent"), "Suspended", Reason.SUSPENDED),
    (obs(waiting_for_graphserver="gs", partition_needed=False), "Pending", Reason.WAITING_GS),
    # pods created but not running yet (batch Job status.ready < active)
    (obs(trainers_ready=0), "Starting", Reason.TRAINERS_PENDING),
    (obs(trainers_ready=1), "Starting", Reason.TRAINERS_PENDING),
    (obs(trainers_ready=2), "Running", Reason.TRAINERS_RUNNING),
    (
        obs(waiting_for_graphserver="gs", graphserver_missing=True, trainer_job="absent"),
        "Pending",
        Reason.GS_NOT_FOUND,
    ),
    (
        obs(waiting_for_graphserver="gs", graphserver_missing=True, graphserver_wait_expired=True),
        "Failed",
        Reason.GS_NOT_FOUND,
    ),
    (
        obs(podgroup_unavailable="HTTP 403", trainer_job="absent"),
        "Pending",
        Reason.PODGROUP_UNAVAILABLE,
    ),
    (obs(credentials_missing="s3", trainer_job="absent"), "Pending", Reason.CREDENTIALS_MISSING),
    # a missing Secret does not stop trainers that already run
    (obs(credentials_missing="s3"), "Running", Reason.TRAINERS_RUNNING),
    (obs(pods_not_created="quota", trainer_job="absent"), "Pending", Reason.POD_CREATE_FAILED),
    (
        obs(pods_not_created="quota", partition="running", trainer_job="absent"),
        "Pending",
        Reason.POD_CREATE_FAILED,
    ),
    (obs(pods_not_created="quota"), "Running", Reason.TRAINERS_RUNNING),
    # a server pod that cannot start is named; one that exited 2 fails the job
    (
        obs(servers_ready=1, servers_stuck="pod j-server-1: x", trainer_job="absent"),
        "Starting",
        Reason.SERVERS_STARTING,
    ),
    (
        obs(servers_ready=1, server_config_error="e (pod j-server-1)", trainer_job="absent"),
        "Failed",
        Reason.SERVER_CONFIG_ERROR,
    ),
    (
        obs(servers_ready=1, server_config_error="e (pod j-server-1)"),
        "Failed",
        Reason.SERVER_CONFIG_ERROR,
    ),
    # a trainer container restarted in place (or beside trainers that run) exited 2
    (
        obs(trainers_ready=1, trainer_config_error="e (pod j-trainers-1, container trainer)"),
        "Failed",
        Reason.CONFIG_ERROR,
    ),
]


def test_a_trainer_container_that_exited_2_fails_the_job_naming_it() -> None:
    cause = "ConfigError: --feat: no node feature 'x' (pod j-trainers-1-ab, container trainer-1)"
    o = obs(trainers_ready=1, trainers_stuck="pod j-trainers-1-ab: ...", trainer_config_error=cause)
    assert job_phase(o) == (
        "Failed",
        Reason.CONFIG_ERROR,
        f"trainer group failed with a configuration error (exit code 2), not retried: {cause}",
    )


@pytest.mark.parametrize(("o", "phase", "reason"), TABLE, ids=[f"{p}-{r}" for _, p, r in TABLE])
def test_job_phase_table(o: JobObservation, phase: str, reason: str) -> None:
    st = job_status(o, None, "2026-01-01T00:00:00Z")
    assert st["phase"] == phase
    conds = {c["type"]: c for c in st["conditions"]}
    if phase == "Failed":
        assert conds["Failed"]["status"] == "True" and conds["Failed"]["reason"] == reason
        assert st["completionTime"] == "2026-01-01T00:00:00Z"
    elif phase == "Running":
        assert conds["Running"]["status"] == "True" and conds["Running"]["reason"] == reason
    else:
        assert conds["Running"]["status"] == "False"
        assert conds["Running"]["reason"] == reason or phase == "Succeeded"
    assert all(c["observedGeneration"] == o.generation for c in st["conditions"])
    assert st["observedGeneration"] == o.generation
    assert len({c["type"] for c in st["conditions"]}) == len(st["conditions"])


def test_transition_time_kept_until_status_changes() -> None:
    t0, t1, t2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
    a = job_status(obs(trainer_job="absent", trainers_active=0), None, t0)
    b = job_status(obs(trainer_job="absent", trainers_active=0), a, t1)
    assert b == a  # nothing changed: identical status, so no patch is sent
    c = job_status(obs(), b, t2)
    running = {x["type"]: x for x in c["conditions"]}["Running"]
    created = {x["type"]: x for x in c["conditions"]}["Created"]
    assert running["lastTransitionTime"] == t2 and created["lastTransitionTime"] == t0
    assert c["startTime"] == t0


def test_terminal_phase_sticks_and_metrics_kept() -> None:
    done = job_status(obs(trainer_job="succeeded", metrics={"testAccuracy": 0.8}), None, "t0")
    assert done["metrics"] == {"testAccuracy": 0.8}
    later = job_status(obs(trainer_job="absent", trainers_active=0), done, "t1")
    assert later["phase"] == "Succeeded" and later["metrics"] == {"testAccuracy": 0.8}
    assert later["completionTime"] == "t0"


def test_backoff_message_names_cause_and_counts() -> None:
    st = job_status(
        obs(trainer_job="failed", restarts=2, backoff_limit=2, failure_message="OOM on rank 1"),
        None,
        "t",
    )
    msg = {c["type"]: c for c in st["conditions"]}["Failed"]["message"]
    assert "OOM on rank 1" in msg and "2 restart" in msg


GS_TABLE = [
    (GraphServerObservation(num_parts=2, servers_ready=2, partition="succeeded"), "Ready"),
    (GraphServerObservation(num_parts=2, servers_ready=1, partition="succeeded"), "Starting"),
    (GraphServerObservation(num_parts=2, partition="running"), "Partitioning"),
    (GraphServerObservation(num_parts=2, partition="failed"), "Failed"),
    (GraphServerObservation(num_parts=2, partition_needed=False, servers_ready=2), "Ready"),
    (GraphServerObservation(invalid="spec.graph: bad"), "Failed"),
    (GraphServerObservation(num_parts=2, partition="running", credentials_missing="s3"), "Pending"),
    (GraphServerObservation(num_parts=2, partition="running", pods_not_created="x"), "Pending"),
    (
        GraphServerObservation(
            num_parts=1, servers_ready=1, partition="succeeded", pods_not_created="x"
        ),
        "Ready",
    ),
    (
        GraphServerObservation(
            num_parts=2, servers_ready=1, partition="succeeded", servers_stuck="pod g-server-1: x"
        ),
        "Starting",
    ),
    (
        GraphServerObservation(
            num_parts=2,
            servers_ready=1,
            partition="succeeded",
            server_config_error="e (pod g-server-1)",
        ),
        "Failed",
    ),
    # servers already up: a Secret deleted later does not take the GraphServer down
    (
        GraphServerObservation(
            num_parts=1, servers_ready=1, partition="succeeded", credentials_missing="s3"
        ),
        "Ready",
    ),
]


@pytest.mark.parametrize(("o", "phase"), GS_TABLE, ids=[p for _, p in GS_TABLE])
def test_graphserver_phase_table(o: GraphServerObservation, phase: str) -> None:
    st = graphserver_status(dataclasses.replace(o, attached_jobs=["b", "a"]), None, "t")
    assert st["phase"] == phase
    assert st["attachedJobs"] == ["a", "b"]
    ready = {c["type"]: c for c in st["conditions"]}.get("ServersReady")
    if ready is not None:
        assert (ready["status"] == "True") == (phase == "Ready")


def test_events_only_on_transitions() -> None:
    a = job_status(obs(trainer_job="absent", trainers_active=0), None, "t0")
    assert transition_event({}, a) == ("Normal", Reason.TRAINERS_STARTING, "starting trainers")
    b = job_status(obs(), a, "t1")
    assert transition_event(a, b) == ("Normal", Reason.TRAINERS_RUNNING, "2 trainer(s) running")
    assert transition_event(b, job_status(obs(), b, "t2")) is None  # no change, no event
    c = job_status(obs(podgroup_unavailable="HTTP 404", trainer_job="absent"), b, "t3")
    ev = transition_event(b, c)
    assert ev is not None and ev[0] == "Warning" and ev[1] == Reason.PODGROUP_UNAVAILABLE
    d = job_status(obs(deadline_exceeded=True), b, "t4")
    assert transition_event(b, d) == ("Warning", Reason.DEADLINE, "activeDeadlineSeconds exceeded")


def test_graphserver_terminating_names_attached_jobs() -> None:
    ready = graphserver_status(GraphServerObservation(num_parts=1, servers_ready=1), None, "t0")
    st = graphserver_terminating(ready, ["b", "a"], "t1", 1)
    assert st["phase"] == "Terminating" and st["attachedJobs"] == ["a", "b"]
    term = {c["type"]: c for c in st["conditions"]}["Terminating"]
    assert term["status"] == "True" and term["reason"] == Reason.TERMINATING
    assert term["message"].endswith(": a, b")
    assert graphserver_terminating(st, ["a", "b"], "t2", 1) == st  # unchanged: no patch


def test_output_url_named_once_the_job_succeeded() -> None:
    running = job_status(obs(output_url="s3://out/emb"), None, "t0")
    assert "outputURL" not in running  # not complete yet: no index to read
    done = job_status(obs(trainer_job="succeeded", output_url="s3://out/emb"), running, "t1")
    assert done["phase"] == "Succeeded" and done["outputURL"] == "s3://out/emb"
    failed = job_status(obs(trainer_job="failed", restarts=3, output_url="s3://x"), None, "t")
    assert "outputURL" not in failed


def test_graphserver_missing_credentials_named() -> None:
    o = GraphServerObservation(num_parts=2, partition="running", credentials_missing="s3-creds")
    st = graphserver_status(o, None, "t")
    ready = {c["type"]: c for c in st["conditions"]}["ServersReady"]
    assert ready["reason"] == Reason.CREDENTIALS_MISSING and "s3-creds" in ready["message"]


def test_a_configuration_error_says_it_was_not_retried() -> None:
    o = obs(
        trainer_job="failed", config_error=True, failure_message="ConfigError: --feat (pod t-0)"
    )
    phase, reason, msg = job_phase(o)
    assert (phase, reason) == ("Failed", "TrainerConfigError")
    assert msg == (
        "trainer group failed with a configuration error (exit code 2), not retried: "
        "ConfigError: --feat (pod t-0)"
    )


@pytest.mark.parametrize("kind", ["DistGNNJob", "GraphServer"])
def test_a_partitioning_configuration_error_says_it_was_not_retried(kind: str) -> None:
    line = "distgnn partition: error: s3://g/cora.npz: not found (pod x-partition-a)"
    if kind == "DistGNNJob":
        o = obs(partition="failed", partition_config_error=True, partition_message=line)
        st = job_status(o, None, "t")
    else:
        gso = GraphServerObservation(
            num_parts=2, partition="failed", partition_config_error=True, partition_message=line
        )
        st = graphserver_status(gso, None, "t")
    conds = {c["type"]: c for c in st["conditions"]}
    assert st["phase"] == "Failed"
    assert conds["Failed"]["reason"] == conds["Partitioned"]["reason"] == "PartitionConfigError"
    assert conds["Failed"]["message"] == (
        f"partitioning failed with a configuration error (exit code 2), not retried: {line}"
    )
    ev = transition_event({}, st)
    assert ev is not None and ev[:2] == ("Warning", "PartitionConfigError")


def test_pods_not_created_named_and_written_only_when_the_message_changes() -> None:
    msg = 'StatefulSet j-server cannot create its pods: serviceaccount "nope" not found'
    a = job_status(obs(pods_not_created=msg, trainer_job="absent"), None, "t0")
    running = {c["type"]: c for c in a["conditions"]}["Running"]
    assert (running["reason"], running["message"]) == (Reason.POD_CREATE_FAILED, msg)
    assert transition_event({}, a) == ("Warning", Reason.POD_CREATE_FAILED, msg)
    same = job_status(obs(pods_not_created=msg, trainer_job="absent"), a, "t1")
    assert same == a  # nothing to write
    other = job_status(obs(pods_not_created=msg + "!", trainer_job="absent"), a, "t2")
    assert other != a and transition_event(a, other) is None  # a write, no new event


@pytest.mark.parametrize("kind", ["DistGNNJob", "GraphServer"])
def test_a_servers_configuration_error_is_named_in_its_own_reason(kind: str) -> None:
    cause = "distgnn serve: error: s3://p/g.json: not found (NoSuchKey) (pod g-server-1)"
    if kind == "DistGNNJob":
        st = job_status(obs(servers_ready=1, server_config_error=cause), None, "t")
        tail = "not retried"
    else:
        gso = GraphServerObservation(
            num_parts=2, servers_ready=1, partition="succeeded", server_config_error=cause
        )
        st = graphserver_status(gso, None, "t")
        tail = "fix the spec or the partitions; its pods are kept"
    conds = {c["type"]: c for c in st["conditions"]}
    msg = f"graph server exited with a configuration error (exit code 2), {tail}: {cause}"
    assert st["phase"] == "Failed"
    for typ in ("Failed", "ServersReady"):
        assert (conds[typ]["reason"], conds[typ]["message"]) == (Reason.SERVER_CONFIG_ERROR, msg)
    assert conds["ServersReady"]["status"] == "False"
    assert transition_event({}, st) == ("Warning", Reason.SERVER_CONFIG_ERROR, msg)


def _gs(obs_: GraphServerObservation) -> dict[str, object]:
    return graphserver_status(obs_, None, "t0")


GS_SERVED = GraphServerObservation(partition_needed=False, num_parts=2, servers_ready=0)
SERVE_NO_KEY = "distgnn serve: error: s3://p/gs.json: not found (NoSuchKey) (pod gs-server-0)"
GS_STUCK = (
    "pod gs-server-1: CrashLoopBackOff: distgnn serve: error: s3://p/gs.json: cannot reach "
    "the S3 endpoint http://minio:9000 (EndpointConnectionError) (exit code 1)"
)


@pytest.mark.parametrize(
    ("gs_obs", "want"),
    [
        pytest.param(
            dataclasses.replace(GS_SERVED, server_config_error=SERVE_NO_KEY),
            "Failed: ServerConfigError: graph server exited with a configuration error (exit "
            "code 2), fix the spec or the partitions; its pods are kept: " + SERVE_NO_KEY,
            id="server-config-error",
        ),
        pytest.param(
            GraphServerObservation(
                partition_needed=True,
                partition="failed",
                partition_config_error=True,
                partition_message="distgnn partition: error: s3://g.npz: not found (pod p-0)",
                num_parts=2,
            ),
            "Failed: PartitionConfigError: partitioning failed with a configuration error "
            "(exit code 2), not retried: distgnn partition: error: s3://g.npz: not found "
            "(pod p-0)",
            id="partition-config-error",
        ),
        pytest.param(
            dataclasses.replace(GS_SERVED, credentials_missing="s3-creds"),
            "Pending: CredentialsSecretNotFound: Secret s3-creds "
            "(spec.storage.credentialsSecret.name) not found; pods cannot start until it exists",
            id="pending-credentials",
        ),
        pytest.param(
            dataclasses.replace(GS_SERVED, servers_ready=1, servers_stuck=GS_STUCK),
            f"Starting: ServersStarting: 1/2 servers ready; {GS_STUCK}",
            id="starting-a-pod-stuck",
        ),
        pytest.param(GS_SERVED, None, id="starting"),
        pytest.param(dataclasses.replace(GS_SERVED, servers_ready=1), None, id="starting-1-of-2"),
        pytest.param(
            GraphServerObservation(partition_needed=True, partition="running", num_parts=2),
            None,
            id="partitioning",
        ),
        pytest.param(dataclasses.replace(GS_SERVED, servers_ready=2), None, id="ready"),
    ],
)
def test_an_attached_job_names_its_graphservers_failure(
    gs_obs: GraphServerObservation, want: str | None
) -> None:
    """A job waiting for a Failed (or Pending) GraphServer keeps waiting (the GraphServer can
    recover; activeDeadlineSeconds still applies) and says why in one line; so does one
    waiting for a GraphServer Starting with a server pod that cannot start, and the line
    stays put while that pod's state does (a pass writes nothing)."""
    cause = graphserver_cause(_gs(gs_obs))
    assert cause == want
    o = obs(waiting_for_graphserver="gs", trainer_job="absent", graphserver_cause=cause)
    phase, reason, message = job_phase(o)
    assert (phase, reason) == ("Pending", Reason.WAITING_GS)
    assert message == (f"waiting for GraphServer gs to be Ready; it is {want}" if want else
                       "waiting for GraphServer gs to be Ready")  # fmt: skip
    assert job_phase(dataclasses.replace(o, deadline_exceeded=True))[1] == Reason.DEADLINE
    first = job_status(o, None, "t0")
    assert graphserver_cause(graphserver_status(gs_obs, _gs(gs_obs), "t1")) == cause
    assert job_status(o, first, "t1") == first
