"""Status from observed children: phase, conditions with fixed reasons, counts. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from distgnn import contract
from distgnn.api.types import MAX_ATTACHED_JOBS, MAX_TAKEN_NAMES
from distgnn_operator import failure as f

TERMINAL = ("Succeeded", "Failed")


class Reason:
    """Fixed condition reasons (CamelCase, stable for users' automation)."""

    CREATED = "ChildrenCreated"
    INVALID = "InvalidSpec"
    PARTITIONING = "Partitioning"
    PARTITIONED = "PartitionsReady"
    PARTITION_FAILED = "PartitioningFailed"
    PARTITION_CONFIG_ERROR = "PartitionConfigError"
    PROVIDED = "PartitionsProvided"
    WAITING_GS = "GraphServerNotReady"
    SERVERS_STARTING = "ServersStarting"
    SERVERS_READY = "ServersReady"
    TRAINERS_STARTING = "TrainersStarting"
    TRAINERS_RUNNING = "TrainersRunning"
    RESTARTING = "TrainerGroupRestarting"
    BACKOFF = "BackoffLimitExceeded"
    CONFIG_ERROR = "TrainerConfigError"
    DEADLINE = "DeadlineExceeded"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    SUCCEEDED = "TrainingSucceeded"
    FAILED = "TrainingFailed"
    NOT_FINISHED = "NotFinished"
    GS_NOT_FOUND = "GraphServerNotFound"
    PODGROUP_UNAVAILABLE = "PodGroupUnavailable"
    CREDENTIALS_MISSING = "CredentialsSecretNotFound"
    TRAINERS_PENDING = "TrainersPending"
    TERMINATING = "AttachedJobs"
    SIDECARS_UNSUPPORTED = "SidecarsUnsupported"
    RESOURCE_EXISTS = "ResourceExists"
    POD_CREATE_FAILED = "PodCreateFailed"
    SERVER_CONFIG_ERROR = "ServerConfigError"
    WAITING_ADMISSION = "WaitingForAdmission"
    FAILED_TO_START = "FailedToStart"


WARNING_REASONS = frozenset(
    {
        Reason.GS_NOT_FOUND,
        Reason.PODGROUP_UNAVAILABLE,
        Reason.CREDENTIALS_MISSING,
        Reason.RESOURCE_EXISTS,
        Reason.POD_CREATE_FAILED,
        Reason.RESTARTING,
        Reason.TERMINATING,
    }
)
"""Reasons of a non-failed phase that users must act on: posted as Warning events."""


@dataclass(frozen=True)
class JobObservation:
    """What the reconciler saw of a job's children (and its own decisions)."""

    generation: int = 0
    invalid: str | None = None
    unsupported: str | None = None
    """why this cluster cannot run the job (``trainers.colocate`` before Kubernetes 1.29)"""
    partition_needed: bool = True
    partition: str = "absent"
    """absent | running | succeeded | failed"""
    partition_message: str = ""
    partition_config_error: bool = False
    """the partitioner exited with the configuration-error status (2): not retried"""
    waiting_for_graphserver: str | None = None
    num_parts: int = 0
    servers_ready: int = 0
    trainer_job: str = "absent"
    """absent | running | succeeded | failed"""
    trainers_active: int = 0
    trainers_succeeded: int = 0
    trainers_failed: int = 0
    trainers_ready: int | None = None
    """pods running (batch Job ``status.ready``); None: not reported, ``active`` is used"""
    failure_message: str = ""
    config_error: bool = False
    """the failed trainer exited with the configuration-error status (2): not restarted"""
    restarts: int = 0
    backoff_limit: int = 3
    restarting: bool = False
    suspended: bool = False
    failed_to_start: str | None = None
    """why the job cannot take its Kueue admission (a flavor's node label conflicts)"""
    waiting_for_admission: str | None = None
    """why Kueue holds the job (its Workload not admitted, or evicted); ``--kueue``"""
    deadline_exceeded: bool = False
    metrics: dict[str, float] | None = None
    manifest_url: str | None = None
    graph_server: str | None = None
    graphserver_missing: bool = False
    """the referenced GraphServer does not exist"""
    graphserver_wait_seconds: float = 0.0
    graphserver_wait_expired: bool = False
    podgroup_unavailable: str | None = None
    """why the PodGroup of a gang-scheduled job cannot be created (403/404); the job is held"""
    credentials_missing: str | None = None
    """name of a ``storage.credentialsSecret`` that does not exist"""
    output_url: str | None = None
    conflict: str | None = None
    """children somebody else's objects keep from being created; the job is held"""
    taken: tuple[tuple[str, str], ...] = ()
    """(kind, name) of each of those children: ``status.takenNames``"""
    pods_not_created: str | None = None
    """why children cannot create their pods (their newest FailedCreate event)"""
    servers_stuck: str | None = None
    """the first server pod that cannot start and why (``pod NAME: REASON: WHY``)"""
    server_config_error: str | None = None
    """a server exited with the configuration-error status (2): its root cause and pod"""
    trainers_stuck: str | None = None
    """the first trainer pod that cannot start and why (``pod NAME: REASON: WHY``)"""
    trainer_config_error: str | None = None
    """a trainer container of a pod that has not finished exited with the
    configuration-error status (2): restarted in place by a container restart rule, or
    beside trainers that still run; its root cause, pod and container"""
    colocated: bool = False
    """the servers are sidecars of the trainer pods (``trainers.colocate``)"""
    graphserver_cause: str | None = None
    """why the attached GraphServer is not Ready, one line (``PHASE: REASON: MESSAGE``):
    :func:`graphserver_cause`"""


@dataclass(frozen=True)
class GraphServerObservation:
    """What the reconciler saw of a GraphServer's children."""

    generation: int = 0
    invalid: str | None = None
    partition_needed: bool = True
    partition: str = "absent"
    partition_message: str = ""
    partition_config_error: bool = False
    num_parts: int = 0
    servers_ready: int = 0
    manifest_url: str | None = None
    endpoints: list[str] = field(default_factory=list)
    attached_jobs: list[str] = field(default_factory=list)
    token_secret: str | None = None
    credentials_missing: str | None = None
    """name of a ``storage.credentialsSecret`` that does not exist"""
    conflict: str | None = None
    """children somebody else's objects keep from being created"""
    taken: tuple[tuple[str, str], ...] = ()
    """(kind, name) of each of those children: ``status.takenNames``"""
    pods_not_created: str | None = None
    """why children cannot create their pods (their newest FailedCreate event)"""
    servers_stuck: str | None = None
    """the first server pod that cannot start and why (``pod NAME: REASON: WHY``)"""
    server_config_error: str | None = None
    """a server exited with the configuration-error status (2): its root cause and pod"""


Cond = tuple[str, str, str, str]
"""(type, status, reason, message)"""


def job_phase(o: JobObservation) -> tuple[str, str, str]:
    """(phase, reason, message) of a job."""
    if o.invalid is not None:
        return "Failed", Reason.INVALID, o.invalid
    if o.unsupported is not None:
        return "Failed", Reason.SIDECARS_UNSUPPORTED, o.unsupported
    if o.trainer_job == "succeeded":
        return "Succeeded", Reason.SUCCEEDED, "all trainers succeeded"
    if o.failed_to_start is not None:
        return (
            "Failed",
            Reason.FAILED_TO_START,
            f"cannot start on Kueue's admission: {o.failed_to_start}",
        )
    if o.deadline_exceeded:
        return "Failed", Reason.DEADLINE, "activeDeadlineSeconds exceeded"
    if o.trainer_job == "failed" and not o.restarting and o.config_error:
        return "Failed", Reason.CONFIG_ERROR, trainer_failed(o.failure_message)
    if o.trainer_config_error and not o.restarting:
        return "Failed", Reason.CONFIG_ERROR, trainer_failed(o.trainer_config_error)
    if o.trainer_job == "failed" and not o.restarting:
        return (
            "Failed",
            Reason.BACKOFF,
            (
                f"trainer group failed after {o.restarts} restart(s) (backoffLimit "
                f"{o.backoff_limit}): {o.failure_message}".rstrip(": ")
            ),
        )
    if o.partition == "failed":
        return ("Failed", *partition_failed(o.partition_config_error, o.partition_message))
    if o.server_config_error:
        return "Failed", Reason.SERVER_CONFIG_ERROR, server_failed(o.server_config_error, True)
    gs = o.waiting_for_graphserver
    if o.graphserver_wait_expired:
        return (
            "Failed",
            Reason.GS_NOT_FOUND,
            (f"GraphServer {gs} did not appear within {o.graphserver_wait_seconds:g}s"),
        )
    if o.suspended:
        return "Suspended", Reason.SUSPENDED, "job is suspended"
    if o.waiting_for_admission:
        return "Suspended", Reason.WAITING_ADMISSION, o.waiting_for_admission
    if o.podgroup_unavailable:
        return "Pending", Reason.PODGROUP_UNAVAILABLE, o.podgroup_unavailable
    if o.conflict:
        return "Pending", Reason.RESOURCE_EXISTS, o.conflict
    if gs and o.graphserver_missing:
        return (
            "Pending",
            Reason.GS_NOT_FOUND,
            (
                f"GraphServer {gs} does not exist; the job fails if it does not appear within "
                f"{o.graphserver_wait_seconds:g}s"
            ),
        )
    if gs:
        msg = f"waiting for GraphServer {gs} to be Ready"
        return (
            "Pending",
            Reason.WAITING_GS,
            f"{msg}; it is {o.graphserver_cause}" if o.graphserver_cause else msg,
        )
    running = _trainers_phase(o)
    if o.credentials_missing and running[0] != "Running":
        return (
            "Pending",
            Reason.CREDENTIALS_MISSING,
            (
                f"Secret {o.credentials_missing} (spec.storage.credentialsSecret.name) not found; "
                "pods cannot start until it exists"
            ),
        )
    if o.pods_not_created and running[0] != "Running":
        return "Pending", Reason.POD_CREATE_FAILED, o.pods_not_created
    if o.partition_needed and o.partition != "succeeded":
        return "Partitioning", Reason.PARTITIONING, "partitioning the graph"
    if o.restarting:
        return "Starting", Reason.RESTARTING, f"restarting trainer group ({o.restarts})"
    if o.servers_ready < o.num_parts:
        # co-located: a pod's trainer that cannot start while other pods' servers load
        # is named too, as the trainer container it is (the ServersReady condition
        # names only a server that cannot start)
        stuck = o.servers_stuck or (o.trainers_stuck if o.colocated else None)
        return (
            "Starting",
            Reason.SERVERS_STARTING,
            servers_message(o.servers_ready, o.num_parts, stuck),
        )
    return running


def servers_message(ready: int, num_parts: int, stuck: str | None) -> str:
    """``R/N servers ready``, and the first server pod that cannot start while not all are
    (``1/2 servers ready; pod NAME-server-1: CrashLoopBackOff: ...``)."""
    head = f"{ready}/{num_parts} servers ready"
    return f"{head}; {stuck}" if stuck and ready < num_parts else head


def trainer_failed(cause: str) -> str:
    """The message of reason ``TrainerConfigError``: a trainer exited with the
    configuration-error status (2); the group is not restarted."""
    return (
        f"trainer group failed with a configuration error (exit code "
        f"{contract.EXIT_CONFIG_ERROR}), not retried: {cause}"
    ).rstrip(": ")


def server_failed(cause: str, job: bool) -> str:
    """The message of reason ``ServerConfigError``: a graph server exited with the
    configuration-error status (2). A job fails; a GraphServer's servers are kept (the
    kubelet restarts them, so fixing the data brings them up)."""
    head = (
        f"graph server exited with a configuration error (exit code {contract.EXIT_CONFIG_ERROR})"
    )
    tail = "not retried" if job else "fix the spec or the partitions; its pods are kept"
    return f"{head}, {tail}: {cause}"


def partition_failed(config_error: bool, message: str) -> tuple[str, str]:
    """(reason, message) of a failed partitioning Job: ``PartitionConfigError`` when the
    partitioner exited with the configuration-error status (not retried), else
    ``PartitioningFailed`` (its ``backoffLimit`` used up)."""
    if config_error:
        head = (
            f"partitioning failed with a configuration error (exit code "
            f"{contract.EXIT_CONFIG_ERROR}), not retried"
        )
        return Reason.PARTITION_CONFIG_ERROR, f"{head}: {message}" if message else head
    return Reason.PARTITION_FAILED, (
        f"partitioning failed: {message}" if message else "partitioning failed"
    )


def _trainers_phase(o: JobObservation) -> tuple[str, str, str]:
    """Running only when every active trainer pod runs; Starting while some are Pending."""
    if o.trainer_job != "running" or o.trainers_active <= 0:
        return "Starting", Reason.TRAINERS_STARTING, "starting trainers"
    ready = o.trainers_active if o.trainers_ready is None else o.trainers_ready
    if ready >= o.trainers_active:
        return "Running", Reason.TRAINERS_RUNNING, f"{o.trainers_active} trainer(s) running"
    head = (
        f"{ready}/{o.trainers_active} trainer pod(s) running, {o.trainers_active - ready} pending"
    )
    why = f"; {o.trainers_stuck}" if o.trainers_stuck else " (see the pods' events)"
    return "Starting", Reason.TRAINERS_PENDING, head + why


def job_conditions(o: JobObservation, phase: str, reason: str, message: str) -> list[Cond]:
    """The condition set for a phase, one entry per type, in a fixed order."""
    conds: list[Cond] = [("Created", "True", Reason.CREATED, "children created")]
    if o.unsupported is not None:
        conds = [("Created", "False", Reason.SIDECARS_UNSUPPORTED, "nothing created")]
    if o.invalid is None and o.unsupported is None:
        if not o.partition_needed:
            conds.append(("Partitioned", "True", Reason.PROVIDED, "partitions given"))
        elif o.partition == "succeeded":
            conds.append(("Partitioned", "True", Reason.PARTITIONED, "partitions written"))
        elif o.partition == "failed":
            why = partition_failed(o.partition_config_error, o.partition_message)[0]
            conds.append(("Partitioned", "False", why, o.partition_message))
        else:
            conds.append(("Partitioned", "False", Reason.PARTITIONING, "partitioning"))
        ready = o.num_parts > 0 and o.servers_ready >= o.num_parts
        if o.server_config_error and not ready:
            why, msg = Reason.SERVER_CONFIG_ERROR, server_failed(o.server_config_error, True)
        else:
            why = Reason.SERVERS_READY if ready else Reason.SERVERS_STARTING
            msg = servers_message(o.servers_ready, o.num_parts, o.servers_stuck)
        conds.append(("ServersReady", "True" if ready else "False", why, msg))
    running = phase == "Running"
    conds.append(
        (
            "Running",
            "True" if running else "False",
            Reason.TRAINERS_RUNNING if running else reason,
            message if not running else f"{o.trainers_active} trainer(s) running",
        )
    )
    conds.append(
        (
            "Restarting",
            "True" if o.restarting else "False",
            Reason.RESTARTING if o.restarting else Reason.NOT_FINISHED,
            f"restarts: {o.restarts}/{o.backoff_limit}",
        )
    )
    conds.append(
        (
            "Suspended",
            "True" if phase == "Suspended" else "False",
            reason if phase == "Suspended" else Reason.RESUMED,
            message if phase == "Suspended" and reason != Reason.SUSPENDED else "",
        )
    )
    conds.append(
        (
            "Succeeded",
            "True" if phase == "Succeeded" else "False",
            Reason.SUCCEEDED if phase == "Succeeded" else Reason.NOT_FINISHED,
            "",
        )
    )
    conds.append(
        (
            "Failed",
            "True" if phase == "Failed" else "False",
            reason if phase == "Failed" else Reason.NOT_FINISHED,
            message if phase == "Failed" else "",
        )
    )
    return conds


def merge_conditions(
    new: list[Cond], old: list[dict[str, Any]] | None, now: str, generation: int
) -> list[dict[str, Any]]:
    """Conditions as dicts, keeping lastTransitionTime where the status did not change."""
    prev = {c.get("type"): c for c in old or [] if isinstance(c, dict)}
    return [
        condition((typ, status, reason, msg), prev.get(typ), now)
        | {"observedGeneration": generation}
        for typ, status, reason, msg in new
    ]


def condition(new: Cond, prev: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """One condition as a dict: its ``lastTransitionTime`` kept from ``prev`` (the same type's
    condition before) while the status is the same, else ``now``; the message cut at 1024."""
    typ, status, reason, msg = new
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
    return {
        "type": typ,
        "status": status,
        "reason": reason,
        "message": msg[:1024],
        "lastTransitionTime": since or now,
    }


def job_status(o: JobObservation, old: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """The whole ``status`` of a job; a terminal phase stays terminal."""
    old = old or {}
    phase, reason, message = job_phase(o)
    if old.get("phase") in TERMINAL and o.invalid is None:
        phase = old["phase"]
        conds_old = {c.get("type"): c for c in old.get("conditions") or []}
        fc = conds_old.get("Failed", {})
        reason = fc.get("reason") or reason
        message = fc.get("message") or message
    st: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": o.generation,
        "conditions": merge_conditions(
            job_conditions(o, phase, reason, message), old.get("conditions"), now, o.generation
        ),
        "partitionsReady": o.servers_ready,
        "numParts": o.num_parts,
        "trainers": {
            "active": o.trainers_active,
            "ready": o.trainers_active if o.trainers_ready is None else o.trainers_ready,
            "succeeded": o.trainers_succeeded,
            "failed": o.trainers_failed,
        },
        "restarts": o.restarts,
        "startTime": old.get("startTime") or now,
    }
    if phase in TERMINAL:
        st["completionTime"] = old.get("completionTime") or now
    metrics = o.metrics or old.get("metrics")
    if metrics:
        st["metrics"] = metrics
    if o.manifest_url:
        st["manifestURL"] = o.manifest_url
    if o.graph_server:
        st["graphServer"] = o.graph_server
    if phase == "Succeeded" and o.output_url:
        st["outputURL"] = o.output_url  # inference wrote there (index.json last)
    if old.get("progress"):  # written by distgnn_operator.progress; kept as last seen
        st["progress"] = old["progress"]
    if o.taken:
        st["takenNames"] = taken_names_field(o.taken)
    return st


def graphserver_status(
    o: GraphServerObservation, old: dict[str, Any] | None, now: str
) -> dict[str, Any]:
    """The whole ``status`` of a GraphServer."""
    old = old or {}
    conds: list[Cond] = [("Created", "True", Reason.CREATED, "children created")]
    if o.invalid is not None:
        phase, reason, msg = "Failed", Reason.INVALID, o.invalid
    elif o.partition == "failed":
        phase = "Failed"
        reason, msg = partition_failed(o.partition_config_error, o.partition_message)
    elif o.server_config_error and o.servers_ready < o.num_parts:
        phase, reason = "Failed", Reason.SERVER_CONFIG_ERROR
        msg = server_failed(o.server_config_error, False)
    elif o.conflict:
        phase, reason, msg = "Pending", Reason.RESOURCE_EXISTS, o.conflict
    elif o.credentials_missing and o.servers_ready < o.num_parts:
        phase, reason, msg = (
            "Pending",
            Reason.CREDENTIALS_MISSING,
            f"Secret {o.credentials_missing} (spec.storage.credentialsSecret.name) not found; "
            "pods cannot start until it exists",
        )
    elif o.pods_not_created and o.servers_ready < o.num_parts:
        phase, reason, msg = "Pending", Reason.POD_CREATE_FAILED, o.pods_not_created
    elif o.partition_needed and o.partition != "succeeded":
        phase, reason, msg = "Partitioning", Reason.PARTITIONING, "partitioning the graph"
    elif o.servers_ready < o.num_parts:
        phase, reason = "Starting", Reason.SERVERS_STARTING
        msg = servers_message(o.servers_ready, o.num_parts, o.servers_stuck)
    else:
        phase, reason, msg = "Ready", Reason.SERVERS_READY, f"{o.num_parts} servers ready"
    if o.invalid is None:
        done = not o.partition_needed or o.partition == "succeeded"
        conds.append(
            (
                "Partitioned",
                "True" if done else "False",
                (Reason.PROVIDED if not o.partition_needed else Reason.PARTITIONED)
                if done
                else reason,
                "",
            )
        )
        # the reason and message of a pending phase or a server's configuration error
        carries = phase == "Pending" or reason == Reason.SERVER_CONFIG_ERROR
        conds.append(
            (
                "ServersReady",
                "True" if phase == "Ready" else "False",
                Reason.SERVERS_READY
                if phase == "Ready"
                else (reason if carries else Reason.SERVERS_STARTING),
                msg if carries else servers_message(o.servers_ready, o.num_parts, o.servers_stuck),
            )
        )
    conds.append(
        (
            "Failed",
            "True" if phase == "Failed" else "False",
            reason if phase == "Failed" else Reason.NOT_FINISHED,
            msg if phase == "Failed" else "",
        )
    )
    st: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": o.generation,
        "conditions": merge_conditions(conds, old.get("conditions"), now, o.generation),
        "partitionsReady": o.servers_ready,
        "numParts": o.num_parts,
        "attachedJobs": sorted(o.attached_jobs)[:MAX_ATTACHED_JOBS],
        "endpoints": o.endpoints,
    }
    if o.manifest_url:
        st["manifestURL"] = o.manifest_url
    if o.token_secret:
        st["tokenSecret"] = o.token_secret
    if o.taken:
        st["takenNames"] = taken_names_field(o.taken)
    return st


def taken_names_field(taken: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    """``status.takenNames``: each child whose name somebody else's object holds, sorted."""
    return [{"kind": k, "name": n} for k, n in sorted(set(taken))[:MAX_TAKEN_NAMES]]


LEGACY_TAKEN_RE = re.compile(
    r"(?:^|; )([A-Za-z]+) ([a-z0-9.-]+) already exists and is controlled by "
)
"""How the operator before ``status.takenNames`` named a taken child in a ``ResourceExists``
condition message. Frozen: read only from a status without ``takenNames`` (written by that
operator, e.g. a job held during an upgrade), never from one this operator wrote."""


def taken_names(st: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) of the children a status reports taken: its ``takenNames``; a status
    without the field (the operator before it) gives them in its ``ResourceExists``
    messages, parsed in that operator's wording."""
    if "takenNames" in st:
        return [
            (str(t.get("kind")), str(t.get("name")))
            for t in st.get("takenNames") or []
            if isinstance(t, dict) and t.get("kind") and t.get("name")
        ]
    out = []
    for c in st.get("conditions") or []:
        if isinstance(c, dict) and c.get("reason") == Reason.RESOURCE_EXISTS:
            out += LEGACY_TAKEN_RE.findall(str(c.get("message") or ""))
    return out


def same_status(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    """Equal apart from timestamps that only move when something else changed."""
    return (a or {}) == b


def phase_reason(st: dict[str, Any]) -> tuple[str, str]:
    """(reason, message) behind a status's phase: the Failed condition of a failed resource,
    else the Running condition (it carries the reason while not running)."""
    conds = {c.get("type"): c for c in st.get("conditions") or [] if isinstance(c, dict)}
    key = "Failed" if st.get("phase") == "Failed" else "Running"
    c = conds.get(key) or conds.get("ServersReady") or {}
    return str(c.get("reason") or ""), str(c.get("message") or "")


GS_CAUSE_MAX = 600
"""Characters of a GraphServer's message quoted in an attached job's status."""


def graphserver_cause(st: dict[str, Any]) -> str | None:
    """``PHASE: REASON: MESSAGE`` of a GraphServer that is not Ready for a reason users act
    on, one line: ``Failed`` (a server or the partitioner exited with a configuration
    error), ``Pending`` (a missing credentials Secret, a name taken), or ``Starting`` while
    a server pod cannot start (its message names the pod: it says more than
    :func:`servers_message`'s count). None in any other phase, and while it is Starting
    with its pods on their way."""
    phase = st.get("phase")
    if phase not in ("Failed", "Pending", "Starting"):
        return None
    reason, message = phase_reason(st)
    if phase == "Starting":
        count = servers_message(
            int(st.get("partitionsReady") or 0), int(st.get("numParts") or 0), None
        )
        if reason != Reason.SERVERS_STARTING or message == count:
            return None
    line = f.one_line(" ".join(message.split()), GS_CAUSE_MAX)
    return ": ".join(x for x in (str(phase), reason, line) if x)


def transition_event(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for a status change, or None when the phase and
    its reason did not change (so a pass that changes nothing posts nothing)."""
    reason, message = phase_reason(new)
    if (old.get("phase"), phase_reason(old)[0]) == (new.get("phase"), reason):
        return None
    warn = new.get("phase") == "Failed" or reason in WARNING_REASONS
    return (
        ("Warning" if warn else "Normal"),
        reason or str(new.get("phase")),
        (message or f"{new.get('phase')}"),
    )


def graphserver_terminating(
    old: dict[str, Any] | None, jobs: list[str], now: str, generation: int
) -> dict[str, Any]:
    """Status of a GraphServer whose deletion waits for attached jobs: phase Terminating and a
    ``Terminating`` condition naming them."""
    old = dict(old or {})
    kept = [c for c in old.get("conditions") or [] if c.get("type") != "Terminating"]
    term: list[Cond] = [
        (
            "Terminating",
            "True",
            Reason.TERMINATING,
            f"deletion waits for {len(jobs)} attached job(s) to finish or be deleted: "
            + ", ".join(sorted(jobs)),
        )
    ]
    conds = kept + merge_conditions(term, old.get("conditions"), now, generation)
    return {
        **old,
        "phase": "Terminating",
        "attachedJobs": sorted(jobs)[:MAX_ATTACHED_JOBS],
        "conditions": conds,
    }
