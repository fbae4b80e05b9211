"""Level-based reconciliation: observe children, build desired, apply, prune, patch status.

Each pass is idempotent: it reads the world, so a missed event or an operator restart
only delays convergence. A malformed resource is reported in its status and events,
never raised to kopf. A finished job (Succeeded or Failed) is frozen: its pass makes no
writes and posts no events, apart from the TTL deletion when that falls due and, once,
the ``Finished`` condition of a prebuilt Workload (MultiKueue's copy on a worker cluster).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import math
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distgnn import contract
from distgnn.api import inference_output_url, parse_graphserver, parse_job
from distgnn.api import types as t
from distgnn.errors import ConfigError
from distgnn_operator import desired as d
from distgnn_operator import drift
from distgnn_operator import failure as f
from distgnn_operator import kueue as kq
from distgnn_operator import kueue_podsets as kp
from distgnn_operator import multikueue as mk
from distgnn_operator import podcreate as pc
from distgnn_operator import status as s
from distgnn_operator import stuckpods as sp
from distgnn_operator.kube import ApiError, KubeApi
from distgnn_operator.metrics import OperatorMetrics

log = logging.getLogger("distgnn_operator")

Emit = Callable[[str, str, str], None]
"""emit(type Normal|Warning, reason, message): a Kubernetes event on the resource."""

CHILD_KINDS = ("PodGroup", "Secret", "Job", "Service", "StatefulSet", "NetworkPolicy")
NO_DRIFT_KINDS = ("Secret", "Job", "PodGroup")
"""Secret data is created once; Job templates are immutable (recreated on restart)."""
MAX_METRICS = 64
GRAPHSERVER_WAIT_SECONDS = 300.0
"""How long a job waits for a GraphServer that does not exist before it fails."""

SIDECARS_SINCE = (1, 29)
"""Kubernetes version whose kubelets run native sidecars by default (``trainers.colocate``)."""

POD_FAILED = "PodFailed"
"""Event reason of a failing pod's traceback / log tail."""

Key = tuple[str, str, str]
"""(kind, namespace, name) of a resource to reconcile."""

subset = drift.subset  # re-exported: the drift comparison


def _started_keys(n: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The children whose presence means a job has started: its pods carry what admission
    assigned."""
    return (("Job", n["partition"]), ("StatefulSet", n["server"]), ("Job", n["trainers"]))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class OperatorContext:
    """Everything a reconcile pass needs; one per operator process."""

    api: KubeApi
    desired: d.DesiredContext = field(default_factory=d.DesiredContext)
    clock: Callable[[], dt.datetime] = _now
    graphserver_wait_seconds: float = GRAPHSERVER_WAIT_SECONDS
    pod_create_grace_seconds: float = pc.GRACE_SECONDS
    """How long a child may be short of pods before its FailedCreate events are read."""
    metrics: OperatorMetrics | None = None
    """Prometheus metrics (``--metrics-port``); None: off."""
    kueue: bool = False
    """Kueue integration (``--kueue``): a job labelled with a LocalQueue waits for the
    admission of its Workload (:mod:`kueue`)."""


@dataclass
class PassResult:
    """What a pass wrote, when the resource needs its next pass, what else to reconcile."""

    status: dict[str, Any]
    requeue_after: float | None = None
    """seconds until something falls due (deadline, TTL, GraphServer wait); None: nothing"""
    poke: list[Key] = field(default_factory=list)
    """other resources whose status depends on this pass (a GraphServer and its jobs)"""

    def due(self, seconds: float | None) -> None:
        """Requeue at the earliest of the due times seen."""
        if seconds is not None and (self.requeue_after is None or seconds < self.requeue_after):
            self.requeue_after = max(seconds, 0.0)


def iso(t_: dt.datetime) -> str:
    return t_.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields(obj: dict[str, Any]) -> dict[str, Any]:
    """What the operator sets on a child it patches: everything but the identity and the
    status, and of the metadata only the labels."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    out["metadata"] = {"labels": (obj.get("metadata") or {}).get("labels", {})}
    return out


def ready_replicas(sts: dict[str, Any] | None) -> int:
    """Ready pods of a StatefulSet (0 when absent)."""
    return int(((sts or {}).get("status") or {}).get("readyReplicas") or 0)


def job_state(job: dict[str, Any] | None) -> str:
    """absent | running | succeeded | failed, from a batch Job's status."""
    if job is None:
        return "absent"
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    completions = (job.get("spec") or {}).get("completions") or 1
    if int(st.get("succeeded") or 0) >= completions:
        return "succeeded"
    return "running"


JOB_POD_FAILURE_POLICY = "PodFailurePolicy"
"""Reason of a batch Job's ``Failed`` condition when a ``podFailurePolicy`` rule failed it."""


def failed_condition(job: dict[str, Any] | None) -> dict[str, Any]:
    """A batch Job's ``Failed`` condition (else its ``FailureTarget``, which the Job
    controller sets first since Kubernetes 1.31) while True; {} when neither is."""
    conds = [c for c in ((job or {}).get("status") or {}).get("conditions") or [] if c]
    for typ in ("Failed", "FailureTarget"):
        for c in conds:
            if c.get("type") == typ and c.get("status") == "True":
                return dict(c)
    return {}


def trainers_disrupted(tjob: dict[str, Any] | None, first: f.PodFailure | None) -> bool:
    """Whether the trainer group failed because a pod was disrupted (evicted, preempted,
    node drained or lost): the Job controller failed the Job by the ``DisruptionTarget``
    rule of its ``podFailurePolicy`` (read from the Job: an evicted pod is deleted), or
    the first failing pod still shows the condition."""
    cond = failed_condition(tjob)
    if cond.get("reason") == JOB_POD_FAILURE_POLICY and "DisruptionTarget" in str(
        cond.get("message") or ""
    ):
        return True
    return first is not None and first.disrupted


@dataclass(frozen=True)
class PartitionOutcome:
    """Why a partitioning Job failed (nothing while it has not)."""

    failure: f.PodFailure | None = None
    """its first failing pod (None: not failed, or the pods are gone)"""
    message: str = ""
    """one line: the pod's root cause, else the Job's Failed condition's message"""
    config_error: bool = False
    """the partitioner exited with the configuration-error status (not retried)"""


def _camel(k: str) -> str:
    head, *rest = re.split(r"[_\-]", k)
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def parse_metrics(message: str | None) -> dict[str, float] | None:
    """Numbers of a JSON object termination message, with camelCase keys; else None."""
    if not message:
        return None
    try:
        obj = json.loads(message)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    out = {
        _camel(str(k))[:63]: float(v)
        for k, v in obj.items()
        # finite only: NaN and Infinity are not JSON (the API server refuses the patch)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    return dict(sorted(out.items())[:MAX_METRICS]) or None


def token_hash(value: str) -> str:
    """Short, non-reversible fingerprint of a token (safe in a pod annotation)."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def secret_value(secret: dict[str, Any] | None, key: str) -> str | None:
    """A Secret's value (``data`` is base64; ``stringData`` where a stand-in keeps it)."""
    if secret is None:
        return None
    raw = (secret.get("data") or {}).get(key)
    if isinstance(raw, str):
        try:
            return base64.b64decode(raw).decode()
        except ValueError:
            return None
    plain = (secret.get("stringData") or {}).get(key)
    return plain if isinstance(plain, str) else None


def _podgroup_message(e: ApiError) -> str:
    if e.status == 403:
        return (
            "PodGroups are forbidden to the operator (HTTP 403): install the chart with "
            "gangScheduling.enabled=true, or turn off runPolicy.schedulingPolicy.gang; "
            "the job is held (nothing created) until then"
        )
    return (
        "the PodGroup API (scheduling.x-k8s.io/v1alpha1) is not installed (HTTP 404): "
        "install scheduler-plugins, or turn off runPolicy.schedulingPolicy.gang; "
        "the job is held (nothing created) until then"
    )


@dataclass(frozen=True)
class _GraphServerView:
    info: d.GraphServerInfo | None
    ready_servers: int
    ready: bool
    missing: bool
    cause: str | None = None
    """why it is not Ready, one line (:func:`s.graphserver_cause`); None: nothing to act on"""


@dataclass(frozen=True)
class TrainerPods:
    """What a pass read of the trainer Job's pods (nothing while they all run)."""

    stuck: list[sp.StuckPod] = field(default_factory=list)
    """the pods that cannot start, lowest completion index first"""
    sidecars_ready: int | None = None
    """co-located: pods whose server sidecar is ready; None: not read"""


@dataclass(frozen=True)
class Applied:
    """What :meth:`Reconciler.apply` did."""

    changes: int
    conflicts: list[str] = field(default_factory=list)
    """children that could not be created: somebody else's object holds the name"""
    taken: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of each of those children"""


@dataclass(frozen=True)
class PodGroupOutcome:
    """Why a gang-scheduled job's PodGroup is not there (nothing: it is)."""

    unavailable: str | None = None
    """it cannot be created (the API forbidden or not installed, an earlier one going)"""
    conflicts: list[str] = field(default_factory=list)
    """somebody else's PodGroup holds its name (as :attr:`Applied.conflicts`)"""
    taken: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of that PodGroup (as :attr:`Applied.taken`)"""

    @property
    def held(self) -> bool:
        """Whether the job is held (nothing else created) for it."""
        return self.unavailable is not None or bool(self.conflicts)


TAKEN = "already exists and is controlled by"
"""How a ResourceExists message names a taken child (``KIND NAME already exists ...``)."""


class Reconciler:
    """Reconciles DistGNNJobs and GraphServers."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.api = ctx.api
        self._taken: dict[Key, Key] = {}
        """(kind, namespace, name) of a child whose create found the name taken -> owner"""

    # --- children -------------------------------------------------------------------

    async def observe(
        self, ns: str, owner_label: str, name: str, uid: str
    ) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for kind in CHILD_KINDS:
            if kind == "Secret":
                # the only Secret an owner has is NAME-token: read by name, so the operator
                # needs no list/watch on Secrets (least privilege)
                token = await self.api.get("Secret", ns, d.names(name)["token"])
                if token is not None and d.owned_by(token, uid):
                    out[("Secret", token["metadata"]["name"])] = token
                continue
            try:
                found = await self.api.list(kind, ns, {owner_label: name})
            except ApiError as e:
                # PodGroups are optional: least-privilege RBAC grants them only when the
                # chart enables gang scheduling, so a 403 there means "none of ours".
                if kind == "PodGroup" and e.status == 403:
                    continue
                raise
            for obj in found:
                if d.owned_by(obj, uid):
                    out[(kind, obj["metadata"]["name"])] = obj
        return out

    async def apply(
        self,
        want: list[dict[str, Any]],
        have: dict[tuple[str, str], dict[str, Any]],
        emit: Emit,
        *,
        prune: bool = True,
    ) -> Applied:
        """Create missing children, patch drifted ones, delete the rest.

        Drift compares only the fields we set, quantities in canonical form
        (:mod:`distgnn_operator.drift`), so what the API server defaults or rewrites is
        not drift and a pass where nothing changed writes nothing.
        """
        changes = 0
        conflicts: list[str] = []
        taken: list[tuple[str, str]] = []
        keys = set()
        for obj in want:
            md = obj["metadata"]
            key = (obj["kind"], md["name"])
            keys.add(key)
            cur = have.get(key)
            if cur is None:
                created, foreign = await self._create(obj)
                if foreign:
                    conflicts.append(foreign)
                    taken.append(key)
                if not created:
                    continue
                emit("Normal", "Created", f"created {obj['kind']} {md['name']}")
                changes += 1
            elif obj["kind"] not in NO_DRIFT_KINDS:
                patch = drift.plan(_fields(obj), cur)
                if patch is not None:
                    await self.api.patch(obj["kind"], md["namespace"], md["name"], patch)
                    emit("Normal", "Updated", f"updated {obj['kind']} {md['name']}")
                    changes += 1
        if not prune:
            return Applied(changes, conflicts, taken)
        for (kind, name), cur in have.items():
            if (kind, name) not in keys:
                await self._delete(kind, cur["metadata"]["namespace"], name)
                emit("Normal", "Deleted", f"deleted {kind} {name}")
                changes += 1
        return Applied(changes, conflicts, taken)

    async def _create(self, obj: dict[str, Any]) -> tuple[bool, str | None]:
        """Create a missing child: (created, why somebody else's object is in the way).

        A name a create found taken (409) is remembered: later passes read who holds it
        (a GET) and send no POST until the name is free, so a held resource's pass where
        nothing changed writes nothing. Not created and no reason: the holder is ours to
        wait for (terminating, or an earlier incarnation's child awaiting garbage
        collection).
        """
        md = obj["metadata"]
        key = (obj["kind"], md["namespace"], md["name"])
        if key in self._taken:
            held, foreign = await self._holder(obj)
            if held:
                return False, foreign
            del self._taken[key]
        body = drift.canonicalize(obj)
        if obj["kind"] not in NO_DRIFT_KINDS:  # what later passes compare with (drift.plan)
            record = drift.applied_record(_fields(obj))
            if record is not None:
                anns = {**(body["metadata"].get("annotations") or {}), drift.APPLIED: record}
                body["metadata"] = {**body["metadata"], "annotations": anns}
        try:
            await self.api.create(body)
        except ApiError as e:
            if e.status != 409:
                raise
            owner = next(r for r in md["ownerReferences"] if r.get("controller"))
            self._taken[key] = (owner["kind"], md["namespace"], owner["name"])
            return False, (await self._holder(obj))[1]
        return True, None

    def recall_taken(self, body: dict[str, Any]) -> None:
        """The names the resource's status reports taken (``status.takenNames``, written
        by an earlier pass, maybe of an earlier operator process) count as found taken: the
        pass reads who holds each before it sends a create, so the first pass after an
        operator restart sends no create that would be refused again."""
        md = body.get("metadata") or {}
        owner = (str(body.get("kind")), str(md.get("namespace")), str(md.get("name")))
        for kind, name in s.taken_names(body.get("status") or {}):
            self._taken.setdefault((kind, owner[1], name), owner)

    def forget(self, owner: Key) -> None:
        """The owner is gone: drop the names it found taken."""
        for k in [k for k, o in self._taken.items() if o == owner]:
            del self._taken[k]

    async def _holder(self, obj: dict[str, Any]) -> tuple[bool, str | None]:
        """(is the child's name held, why somebody else's object holds it). Not somebody
        else's: nothing there, terminating, or controlled by an earlier resource of the
        same kind and name (garbage collection removes it)."""
        md = obj["metadata"]
        cur = await self.api.get(obj["kind"], md["namespace"], md["name"])
        if cur is None:
            return False, None
        if (cur.get("metadata") or {}).get("deletionTimestamp"):
            return True, None
        owner = next(r for r in md["ownerReferences"] if r.get("controller"))
        refs = (cur.get("metadata") or {}).get("ownerReferences") or []
        ctl = next((r for r in refs if r.get("controller")), None)
        if ctl is not None and (ctl.get("kind"), ctl.get("name")) == (owner["kind"], owner["name"]):
            return True, None
        by = f"{ctl.get('kind')} {ctl.get('name')}" if ctl else "nothing"
        return True, (
            f"{obj['kind']} {md['name']} {TAKEN} {by}, not by "
            f"{owner['kind']} {owner['name']}: delete or rename it, or rename the "
            f"{owner['kind']}"
        )

    async def _delete(self, kind: str, ns: str, name: str) -> None:
        await self.api.delete(kind, ns, name)
        if kind == "Job":  # the real GC removes pods; be explicit for pods
            for pod in await self.api.list("Pod", ns, {"job-name": name}):
                await self.api.delete("Pod", ns, pod["metadata"]["name"])

    async def _patch_status(self, kind: str, body: dict[str, Any], new: dict[str, Any]) -> bool:
        old = body.get("status") or {}
        if s.same_status(old, new):
            return False
        md = body["metadata"]
        drop = {k: None for k in old if k not in new}
        await self.api.patch(
            kind, md["namespace"], md["name"], {"status": {**new, **drop}}, subresource="status"
        )
        return True

    def _token(
        self, have: Mapping[tuple[str, str], dict[str, Any]], secret_name: str
    ) -> tuple[str | None, str]:
        """(new token to create, or None when the Secret exists; hash of the token in use)."""
        value = secret_value(have.get(("Secret", secret_name)), contract.TOKEN_KEY)
        if value is not None:
            return None, token_hash(value)
        new = secrets.token_urlsafe(32)
        return new, token_hash(new)

    # --- jobs -------------------------------------------------------------------------

    async def reconcile_job(self, body: dict[str, Any], emit: Emit) -> PassResult:
        """One pass over a DistGNNJob."""
        md = body.get("metadata") or {}
        old = dict(body.get("status") or {})
        now = self.ctx.clock()
        if md.get("deletionTimestamp"):  # being deleted: garbage collection does the rest
            return PassResult(old)
        if old.get("phase") in s.TERMINAL:
            await self._finish_prebuilt(body, old, now)
            return await self._finished(body, old, now)
        self.recall_taken(body)
        try:
            job = parse_job(body)
            dctx = self.ctx.desired
            if (
                job.spec.graph.graph_server is None
                and job.spec.graph.partitions is None
                and not d.output_url(job.metadata, job.spec.partitioning, dctx)
            ):
                _raise_output()
        except ConfigError as e:
            obs = s.JobObservation(generation=int(md.get("generation") or 0), invalid=str(e))
            new = s.job_status(obs, old, iso(now))
            if await self._patch_status("DistGNNJob", body, new):
                emit("Warning", s.Reason.INVALID, str(e)[:1024])
            return PassResult(new)
        unsupported = await self._unsupported(job)
        if unsupported is not None:  # fail before creating anything
            obs = s.JobObservation(
                generation=int(md.get("generation") or 0), unsupported=unsupported
            )
            new = s.job_status(obs, old, iso(now))
            if await self._patch_status("DistGNNJob", body, new):
                emit("Warning", s.Reason.SIDECARS_UNSUPPORTED, unsupported)
            return PassResult(new)
        return await self._job_pass(job, body, old, now, emit)

    async def _unsupported(self, job: t.DistGNNJob) -> str | None:
        """Why this cluster cannot run the job, else None: co-located trainers need native
        sidecars (Kubernetes 1.29+); on 1.28 the server sidecar would be an ordinary init
        container that never exits, and the pods would hang in ``Init``. The version is
        cached per operator; it is read again before a job is failed on it."""
        if not job.spec.trainers.colocate or job.spec.graph.graph_server is not None:
            return None
        if (await self.api.server_version()).at_least(*SIDECARS_SINCE):
            return None
        v = await self.api.server_version(refresh=True)
        if v.at_least(*SIDECARS_SINCE):
            return None
        need = ".".join(map(str, SIDECARS_SINCE))
        return (
            f"trainers.colocate needs Kubernetes {need} or newer (native sidecar containers), "
            f"but the API server is {v}: upgrade the cluster (control plane and nodes) to "
            f"{need}+, or resubmit the job without trainers.colocate; nothing was created"
        )

    async def _finished(
        self, body: dict[str, Any], old: dict[str, Any], now: dt.datetime
    ) -> PassResult:
        """A Succeeded/Failed job: nothing is created, patched or posted; clean-up was done by
        the pass that finished it. Only ``ttlSecondsAfterFinished`` still acts."""
        res = PassResult(old)
        res.due(await self._ttl(body, old, now))
        return res

    async def _job_pass(
        self,
        job: t.DistGNNJob,
        body: dict[str, Any],
        old: dict[str, Any],
        now: dt.datetime,
        emit: Emit,
    ) -> PassResult:
        meta, spec = job.metadata, job.spec
        ns = meta.namespace
        rp = spec.run_policy
        have = await self.observe(ns, contract.LABEL_JOB, meta.name, meta.uid)
        n = d.names(meta.name)
        restarts = int(old.get("restarts") or 0)
        start = pc.parse_time(old.get("startTime")) or now
        res = PassResult(old)

        tjob = have.get(("Job", n["trainers"]))
        tstate = job_state(tjob)
        gs_name = spec.graph.graph_server.name if spec.graph.graph_server else None
        gs = _GraphServerView(None, 0, True, False)
        gs_wait_due = None
        if gs_name is not None:
            gs = await self._graphserver_view(ns, gs_name)
            if gs.missing:
                gs_wait_due = start + dt.timedelta(seconds=self.ctx.graphserver_wait_seconds)
        partition_needed = spec.graph.source is not None
        pjob = have.get(("Job", n["partition"]))
        pstate = job_state(pjob)
        pout = await self._partition_outcome(ns, pjob, pstate)
        pfail = pout.failure
        partitioned = not partition_needed or pstate == "succeeded"
        if gs.info is not None:
            num_parts, servers_ready = gs.info.num_parts, gs.ready_servers
        else:
            num_parts = spec.partitioning.num_parts
            servers_ready = ready_replicas(have.get(("StatefulSet", n["server"])))
        tst = (tjob or {}).get("status") or {}
        queue = kq.queue_name(body) if self.ctx.kueue else None
        wl, gate, start_error = None, None, None
        infos: dict[str, kp.PodSetInfo] = {}
        prebuilt = kq.prebuilt(body) if queue is not None else None
        if queue is not None:
            built = kq.workload(job, queue, self.ctx.desired, gs.info)
            why = None
            if prebuilt is not None:  # MultiKueue's copy on a worker: its Workload is given
                wl, why = await self._prebuilt(prebuilt, built, job, iso(now), emit)
            else:
                wl = await self._workload(built, emit)
                await self._activate(wl, rp.suspend, emit)
            gate = kq.decide(wl, queue) if why is None else kq.Gate(False, False, why)
            if gate.run and wl is not None:  # admitted: what its flavors put on the pods
                infos, missing = await self._flavors(wl)
                started = any(k in have for k in _started_keys(n))
                if missing and started:
                    # a started job is not stopped (nor its templates patched) over a
                    # flavor it can no longer read: the pass fails and is retried
                    raise ApiError(404, f"{missing} (the running job is left as it is)")
                if missing:
                    gate = kq.Gate(False, False, missing)
                else:
                    start_error = kp.check(built["spec"]["podSets"], infos)
        held = gate is not None and not gate.run
        if spec.trainers.colocate and gs.info is None:
            # the servers are sidecars of the trainer pods: a ready pod has a ready server,
            # and a pod whose trainers finished served until they did (the group ends
            # together), so a pod done first is no server to wait for
            servers_ready = int(tst.get("ready") or 0) + int(tst.get("succeeded") or 0)
        restarting = False
        tfail: f.PodFailure | None = None
        metrics = None
        if tstate in ("succeeded", "failed"):
            tfail, metrics = await self._trainer_outcome(ns, n["trainers"])
        disrupted = tstate == "failed" and trainers_disrupted(tjob, tfail)
        config_error = tfail is not None and tfail.config_error and not disrupted
        if tstate == "failed" and (disrupted or (restarts < rp.backoff_limit and not config_error)):
            restarting = True
            cause = tfail.headline() if tfail else "no message"
            if disrupted:  # as a Job's podFailurePolicy Ignore: not counted
                why = failed_condition(tjob).get("message") or cause
                msg = (
                    f"trainer group disrupted ({f.one_line(str(why))}); restarting, "
                    f"not counted against backoffLimit ({restarts}/{rp.backoff_limit})"
                )
            else:
                restarts += 1
                msg = f"trainer group failed ({cause}); restart {restarts}/{rp.backoff_limit}"
            emit("Warning", s.Reason.RESTARTING, msg)
            self._emit_detail(emit, tfail)
            have.pop(("Job", n["trainers"]), None)
            await self._delete("Job", ns, n["trainers"])
            tjob, tstate, tst = None, "absent", {}
        deadline_due = (
            start + dt.timedelta(seconds=rp.active_deadline_seconds)
            if rp.active_deadline_seconds is not None
            else None
        )
        creds = None
        if old.get("phase") != "Running" and tstate != "succeeded":
            creds = await self._credentials_missing(ns, spec.storage)
        own = [have.get(("Job", n["partition"])), have.get(("StatefulSet", n["server"])), tjob]
        not_created = await self._pods_not_created(ns, own, now, res)
        stuck = await self._stuck_servers(
            ns, contract.LABEL_JOB, meta.name, have.get(("StatefulSet", n["server"])), res
        )
        colocated = spec.trainers.colocate and gs.info is None
        tpods = await self._stuck_trainers(ns, tjob, tstate, colocated, res)
        tstuck = tpods.stuck
        if colocated:  # the servers are sidecars of the trainer pods
            stuck, tstuck = sp.split(tstuck)
            if tpods.sidecars_ready is not None:  # a trainer's trouble is not the server's
                servers_ready = tpods.sidecars_ready + int(tst.get("succeeded") or 0)
        first_stuck, server_error = sp.first_stuck(stuck), sp.first_config_error(stuck)
        first_tstuck, trainer_error = sp.first_stuck(tstuck), sp.first_config_error(tstuck)
        obs = s.JobObservation(
            generation=meta.generation,
            partition_needed=partition_needed,
            partition=pstate,
            partition_message=pout.message,
            partition_config_error=pout.config_error,
            waiting_for_graphserver=gs_name if (not gs.ready and tjob is None) else None,
            num_parts=num_parts,
            servers_ready=servers_ready,
            trainer_job=tstate,
            trainers_active=int(tst.get("active") or 0),
            trainers_succeeded=int(tst.get("succeeded") or 0),
            trainers_failed=int(tst.get("failed") or 0),
            trainers_ready=int(tst["ready"]) if tst.get("ready") is not None else None,
            failure_message=tfail.headline() if tfail else "",
            config_error=config_error,
            restarts=restarts,
            backoff_limit=rp.backoff_limit,
            restarting=restarting,
            suspended=rp.suspend,
            failed_to_start=start_error,
            waiting_for_admission=gate.message if gate is not None and held else None,
            deadline_exceeded=deadline_due is not None and now >= deadline_due,
            metrics=metrics,
            manifest_url=gs.info.manifest_url if gs.info else self._manifest(job),
            graph_server=gs_name,
            graphserver_missing=gs.missing,
            graphserver_wait_seconds=self.ctx.graphserver_wait_seconds,
            graphserver_wait_expired=gs_wait_due is not None and now >= gs_wait_due,
            credentials_missing=creds,
            pods_not_created=not_created,
            servers_stuck=first_stuck.describe() if first_stuck else None,
            server_config_error=server_error.failure().headline() if server_error else None,
            trainers_stuck=first_tstuck.describe() if first_tstuck else None,
            trainer_config_error=trainer_error.failure().headline() if trainer_error else None,
            colocated=colocated,
            graphserver_cause=gs.cause,
            output_url=inference_output_url(spec),
        )
        new = s.job_status(obs, old, iso(now))
        if new["phase"] in s.TERMINAL:
            # clean up *before* the final status: once that is written, passes are frozen
            states = {n["trainers"]: tstate, n["partition"]: pstate}
            await self._clean_finished(ns, meta.name, rp.clean_pod_policy, have, states, emit)
            # a prebuilt Workload is finished after the job's final status (the next pass,
            # _finish_prebuilt): MultiKueue copies the status back once it sees it finished
            if wl is not None and prebuilt is None and kq.condition(wl, "Finished") is None:
                done_msg = s.phase_reason(new)[1] or f"job {new['phase']}"
                patch = kq.finished_status(
                    wl,
                    new["phase"] == "Succeeded",
                    done_msg,
                    iso(now),
                    reason=kq.FAILED_TO_START if start_error else "",
                )
                await self.api.patch(
                    "Workload", ns, wl["metadata"]["name"], patch, subresource="status"
                )
        else:
            token, thash = (None, None) if gs_name else self._token(have, n["token"])
            stage = d.Stage(
                partitioned=partitioned,
                servers_ready=servers_ready >= num_parts and gs.ready,
                restarts=restarts,
                trainers_started=tjob is not None,
                token_hash=thash,
            )
            want = d.desired_job_children(
                kq.with_suspend(job, True) if held else job,
                self.ctx.desired,
                graphserver=gs.info,
                token=token,
                stage=stage,
            )
            if held and pstate != "succeeded":  # partitioning is in the quota too
                want = [w for w in want if kp.pod_set_of(w, meta.name) != kp.PARTITION]
            if gate is not None and gate.run:  # the assigned flavors' node labels
                want = kp.inject(want, infos, meta.name)
            pg = await self._ensure_podgroup(want, have, emit)
            if pg.held:
                obs = dataclasses.replace(
                    obs,
                    podgroup_unavailable=pg.unavailable,
                    conflict="; ".join(pg.conflicts) or None,
                    taken=tuple(pg.taken),
                )
                new = s.job_status(obs, old, iso(now))
            else:
                # an attached job whose GraphServer is gone keeps what it has
                done = await self.apply(
                    want, have, emit, prune=gs_name is None or gs.info is not None
                )
                if done.conflicts:
                    obs = dataclasses.replace(
                        obs, conflict="; ".join(done.conflicts), taken=tuple(done.taken)
                    )
                    new = s.job_status(obs, old, iso(now))
            if wl is not None and gate is not None and gate.release and not pg.held:
                # stopped above (as suspend does): give the quota back, as Kueue's
                # jobframework does, so that Kueue can admit the job again
                await self.api.patch(
                    "Workload",
                    ns,
                    wl["metadata"]["name"],
                    kq.release_status(wl, iso(now)),
                    subresource="status",
                )
                emit("Normal", "QuotaReleased", f"evicted: {gate.message}")
            if wl is not None and gate is not None and gate.run and pstate == "succeeded":
                reclaim = kq.reclaim_status(wl)
                if reclaim is not None:  # the partitioning pod is done: its quota goes back
                    await self.api.patch(
                        "Workload", ns, wl["metadata"]["name"], reclaim, subresource="status"
                    )
            if deadline_due is not None:
                res.due((deadline_due - now).total_seconds())
            if gs_wait_due is not None:
                res.due((gs_wait_due - now).total_seconds())
        res.status = new
        if await self._patch_status("DistGNNJob", body, new):
            ev = s.transition_event(old, new)
            if ev is not None:
                emit(*ev)
            if new["phase"] == "Failed":
                self._emit_detail(emit, tfail if not restarting else None)
                self._emit_detail(emit, pfail)
                if server_error and s.phase_reason(new)[0] == s.Reason.SERVER_CONFIG_ERROR:
                    self._emit_detail(emit, server_error.failure())
                if trainer_error and s.phase_reason(new)[0] == s.Reason.CONFIG_ERROR:
                    self._emit_detail(emit, trainer_error.failure())
        if gs_name and new.get("phase") != old.get("phase"):
            res.poke.append(("GraphServer", ns, gs_name))  # its attachedJobs
        if new["phase"] in s.TERMINAL:
            res.due(await self._ttl(body, new, now))
        return res

    async def reconcile_dispatched(self, body: dict[str, Any], emit: Emit) -> PassResult:
        """One pass over a job MultiKueue dispatches (:mod:`multikueue`; ``--kueue``): its
        Workload only. No child is created and nothing is written to the job: its status is
        the worker's copy's, which MultiKueue copies back."""
        md = body.get("metadata") or {}
        st = dict(body.get("status") or {})
        res = PassResult(st)
        queue = kq.queue_name(body)
        if md.get("deletionTimestamp") or queue is None:
            return res
        now = iso(self.ctx.clock())
        if st.get("phase") in s.TERMINAL:  # finished: its Workload is only ever finished
            name = kq.workload_name(str(md.get("name")), str(md.get("uid")))
            wl = await self.api.get("Workload", str(md.get("namespace")), name)
        else:
            try:
                job = parse_job(body)
                built = kq.workload(job, queue, self.ctx.desired)
            except ConfigError as e:
                log.warning(
                    "dispatched job's spec is invalid: no Workload",
                    extra={"fields": {"name": md.get("name"), "error": str(e)}},
                )
                return res
            wl = await self._workload(built, emit)
            await self._activate(wl, job.spec.run_policy.suspend, emit)
        if wl is None or (wl.get("metadata") or {}).get("deletionTimestamp"):
            return res
        step = mk.plan(wl, st, now)
        for patch in step.patches:
            wmd = wl["metadata"]
            await self.api.patch(
                "Workload", wmd["namespace"], wmd["name"], patch, subresource="status"
            )
        if step.release is not None:
            emit("Normal", "QuotaReleased", "evicted: the worker's copy stopped")
        return res

    async def _workload(self, built: dict[str, Any], emit: Emit) -> dict[str, Any]:
        """The job's Workload (:mod:`kueue`): created when missing; deleted and created
        again when it no longer matches the job's spec (``built``) and holds no quota
        reservation (Kueue's webhook then keeps its pod sets: an admitted one is left)."""
        md = built["metadata"]
        ns, name, queue = md["namespace"], md["name"], built["spec"]["queueName"]
        wl = await self.api.get("Workload", ns, name)
        if (
            wl is not None
            and not (wl.get("metadata") or {}).get("deletionTimestamp")
            and not kq.matches(wl, built)
            and not kq.reserved(wl)
            and kq.condition(wl, "Finished") is None
        ):
            await self.api.delete("Workload", ns, name)
            why = "it no longer matches the job's spec"
            emit("Normal", "Deleted", f"deleted Workload {name}: {why}")
            wl = None
        if wl is not None:
            return wl
        try:
            await self.api.create(built)
        except ApiError as e:
            if e.status != 409:
                raise
            return await self.api.get("Workload", ns, name) or built
        emit("Normal", "Created", f"created Workload {name} (LocalQueue {queue})")
        return built

    async def _prebuilt(
        self, name: str, built: dict[str, Any], job: t.DistGNNJob, now: str, emit: Emit
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The job's prebuilt Workload (:data:`kueue.PREBUILT_LABEL`: MultiKueue's, on a
        worker cluster), taken as Kueue's jobframework takes one: made the job's (controller
        owner reference), never replaced nor (de)activated; one whose pod sets are not the
        job's is finished (reason ``OutOfSync``). Else why the job waits."""
        ns = job.metadata.namespace
        label = f"Workload {name} ({kq.PREBUILT_LABEL})"
        wl = await self.api.get("Workload", ns, name)
        if wl is None or (wl.get("metadata") or {}).get("deletionTimestamp"):
            return None, f"waiting for {label} to exist"
        other = kq.foreign_controller(wl, job.metadata.uid)
        if other is not None:
            return None, f"{label} is controlled by {other}, not by this job"
        adopt = kq.adopt_patch(wl, job)
        if adopt is not None:
            await self.api.patch("Workload", ns, name, adopt)
            emit("Normal", "Adopted", f"took {label} as the job's Workload")
        fin = kq.condition(wl, "Finished")
        if fin is None and not kq.equivalent(wl, built):
            msg = "The prebuilt workload is out of sync with its user job"
            patch = kq.finished_status(wl, False, msg, now, reason=kq.OUT_OF_SYNC)
            await self.api.patch("Workload", ns, name, patch, subresource="status")
            emit(
                "Warning",
                kq.OUT_OF_SYNC,
                f"{label}: its pod sets' counts or resources are not the job's; finished it",
            )
            fin = {"reason": kq.OUT_OF_SYNC, "message": msg}
        if fin is not None:
            return None, f"{label} is finished ({fin.get('reason')}: {fin.get('message')})"
        return wl, None

    async def _finish_prebuilt(
        self, body: dict[str, Any], old: dict[str, Any], now: dt.datetime
    ) -> None:
        """A finished job's prebuilt Workload gets ``Finished`` in the pass after the job's
        final status (as the jobframework reads a finished job): MultiKueue copies the
        status back to the manager when it sees the Workload finished, then deletes this
        copy. A read per pass of a finished job labelled so; one write."""
        name = kq.prebuilt(body) if self.ctx.kueue and kq.queue_name(body) else None
        if name is None:
            return
        md = body["metadata"]
        wl = await self.api.get("Workload", md["namespace"], name)
        if wl is None or kq.condition(wl, "Finished") is not None:
            return
        if not d.owned_by(wl, str(md.get("uid"))):  # never taken: not this job's
            return
        why, msg = s.phase_reason(old)
        reason = kq.FAILED_TO_START if why == s.Reason.FAILED_TO_START else ""
        patch = kq.finished_status(
            wl, old["phase"] == "Succeeded", msg or f"job {old['phase']}", iso(now), reason
        )
        await self.api.patch("Workload", md["namespace"], name, patch, subresource="status")

    async def _activate(self, wl: dict[str, Any], suspend: bool, emit: Emit) -> None:
        """``spec.active`` follows a change of the user's suspend (:func:`kq.activation_patch`):
        a deactivated Workload is evicted (its quota released) and not queued; reactivated,
        it queues again."""
        patch = kq.activation_patch(wl, suspend)
        if patch is None:
            return
        md = wl["metadata"]
        await self.api.patch("Workload", md["namespace"], md["name"], patch)
        wl["spec"] = {**(wl.get("spec") or {}), **patch["spec"]}
        md["annotations"] = {**(md.get("annotations") or {}), **patch["metadata"]["annotations"]}
        why = "suspended: its quota goes back" if suspend else "resumed: queued again"
        emit("Normal", "Deactivated" if suspend else "Activated", f"Workload {md['name']} {why}")

    async def _flavors(self, wl: dict[str, Any]) -> tuple[dict[str, kp.PodSetInfo], str | None]:
        """The pod sets' infos from the ResourceFlavors the admission assigns; else why they
        cannot be read (a flavor missing, or forbidden), and the job waits."""
        got: dict[str, dict[str, Any]] = {}
        for name in kp.flavor_names(wl):
            try:
                flavor = await self.api.get("ResourceFlavor", "", name)
            except ApiError as e:
                if e.status != 403:
                    raise
                return {}, (
                    "ResourceFlavors are forbidden to the operator (HTTP 403): install the "
                    "chart with kueue.enabled=true; the job waits until then"
                )
            if flavor is None:
                return {}, f"waiting for ResourceFlavor {name}, assigned by Kueue, to exist"
            got[name] = flavor
        return kp.pod_set_infos(wl, got), None

    def _emit_detail(self, emit: Emit, fail: f.PodFailure | None) -> None:
        """The failing pod's traceback or log tail, as a Warning event ``PodFailed`` (the
        condition keeps one line)."""
        if fail is None:
            return
        body = fail.detail or fail.summary
        emit("Warning", POD_FAILED, f"pod {fail.pod} (kubectl logs {fail.pod}): {body}")

    async def _clean_finished(
        self,
        ns: str,
        name: str,
        policy: str,
        have: Mapping[tuple[str, str], dict[str, Any]],
        states: Mapping[str, str],
        emit: Emit,
    ) -> None:
        """cleanPodPolicy for a job that just finished; creates nothing. ``states``: the
        pass's :func:`job_state` of its trainer and partitioning Jobs, by name.

        ``Running``: stop pods still running (scale servers to 0, delete a running trainer
        or partitioning Job); ``All``: also delete the finished trainer Job; ``None``: keep
        everything.
        """
        if policy == "None":
            return
        n = d.names(name)
        sts = have.get(("StatefulSet", n["server"]))
        if sts is not None and int((sts.get("spec") or {}).get("replicas") or 0) != 0:
            await self.api.patch("StatefulSet", ns, n["server"], {"spec": {"replicas": 0}})
            emit("Normal", "ScaledDown", f"scaled StatefulSet {n['server']} to 0 ({policy})")
        for jname in (n["trainers"], n["partition"]):
            j = have.get(("Job", jname))
            if j is None:
                continue
            if states.get(jname) == "running" or (policy == "All" and jname == n["trainers"]):
                await self._delete("Job", ns, jname)
                emit("Normal", "Deleted", f"deleted Job {jname} (cleanPodPolicy {policy})")

    async def _ensure_podgroup(
        self, want: list[dict[str, Any]], have: dict[tuple[str, str], dict[str, Any]], emit: Emit
    ) -> PodGroupOutcome:
        """Create the gang PodGroup first (the job is held until it exists): why it cannot
        be (403/404, an earlier job's being deleted), or the name taken by somebody else's
        PodGroup (a child name taken as any other: ``ResourceExists``, ``takenNames``)."""
        pg = next((w for w in want if w["kind"] == "PodGroup"), None)
        if pg is None or ("PodGroup", pg["metadata"]["name"]) in have:
            return PodGroupOutcome()
        try:
            created, foreign = await self._create(pg)
        except ApiError as e:
            if e.status in (403, 404):
                return PodGroupOutcome(_podgroup_message(e))
            raise
        name = pg["metadata"]["name"]
        if foreign:
            return PodGroupOutcome(conflicts=[foreign], taken=[("PodGroup", name)])
        if not created:
            return PodGroupOutcome(f"PodGroup {name} of an earlier job is being deleted")
        have[("PodGroup", name)] = pg
        emit("Normal", "Created", f"created PodGroup {name}")
        return PodGroupOutcome()

    async def _credentials_missing(self, ns: str, st: t.Storage) -> str | None:
        """Name of the credentials Secret when it does not exist (None: exists or unset)."""
        cs = st.credentials_secret
        if cs is None:
            return None
        try:
            found = await self.api.get("Secret", ns, cs.name)
        except ApiError as e:
            if e.status == 403:  # cannot tell: the pods will say
                return None
            raise
        return None if found is not None else cs.name

    def _manifest(self, job: t.DistGNNJob) -> str | None:
        from distgnn.api import commands as cmds

        try:
            return cmds.manifest_url(
                job.metadata.name,
                job.spec.graph,
                job.spec.partitioning,
                d.output_url(job.metadata, job.spec.partitioning, self.ctx.desired),
            )
        except ConfigError:
            return None

    async def _ttl(
        self, body: dict[str, Any], st: dict[str, Any], now: dt.datetime
    ) -> float | None:
        """Delete the job when its TTL is over; else seconds until it is (None: no TTL)."""
        ttl = ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        done = pc.parse_time(st.get("completionTime"))
        if not isinstance(ttl, int) or isinstance(ttl, bool) or done is None:
            return None
        left = (done + dt.timedelta(seconds=ttl) - now).total_seconds()
        if left > 0:
            return left
        md = body["metadata"]
        await self.api.delete("DistGNNJob", md["namespace"], md["name"])
        return None

    async def _graphserver_view(self, ns: str, name: str) -> _GraphServerView:
        gs = await self.api.get("GraphServer", ns, name)
        if gs is None:
            return _GraphServerView(None, 0, False, True)
        st = gs.get("status") or {}
        usable = bool(st.get("manifestURL")) and int(st.get("numParts") or 0) > 0
        info = (
            d.GraphServerInfo(
                name=name,
                manifest_url=st["manifestURL"],
                num_parts=int(st.get("numParts") or 0),
                token_secret=st.get("tokenSecret") or d.names(name)["token"],
            )
            if usable and not gs["metadata"].get("deletionTimestamp")
            else None
        )
        ready = info is not None and st.get("phase") == "Ready"
        ready_servers = int(st.get("partitionsReady") or 0)
        return _GraphServerView(info, ready_servers, ready, False, s.graphserver_cause(st))

    async def _pods_not_created(
        self,
        ns: str,
        children: list[dict[str, Any] | None],
        now: dt.datetime,
        res: PassResult,
    ) -> str | None:
        """Why children short of pods do not get them: the newest ``FailedCreate`` event of
        each child that has been short of pods for the grace period (one read of its
        events; none for a child with its pods). While one is short, a pass is due again
        (the events are not watched). None: nothing refused, or events not readable."""
        out = []
        for obj in children:
            if obj is None or not pc.short_of_pods(obj):
                continue
            md = obj.get("metadata") or {}
            born = pc.parse_time(md.get("creationTimestamp")) or now
            wait = self.ctx.pod_create_grace_seconds - (now - born).total_seconds()
            if wait > 0:
                res.due(wait)
                continue
            res.due(pc.RECHECK_SECONDS)
            uid = str(md.get("uid") or "")
            try:
                events = await self.api.list("Event", ns, fields=pc.field_selector(uid))
            except ApiError as e:
                if e.status == 403:  # RBAC of an older chart: cannot tell
                    return None
                raise
            ev = pc.newest_failed_create(events, uid)
            if ev is not None:
                out.append(pc.describe(str(obj.get("kind")), str(md.get("name")), ev))
        return "; ".join(out) or None

    async def _stuck_servers(
        self,
        ns: str,
        owner_label: str,
        name: str,
        sts: dict[str, Any] | None,
        res: PassResult,
    ) -> list[sp.StuckPod]:
        """The server pods that cannot start (crash loop, image pull, ...), lowest ordinal
        first; read (one list) only while the StatefulSet has pods that are not ready. Pods
        are not watched and a crash loop changes nothing the StatefulSet reports, so while
        some are not ready a pass is due again (reads only)."""
        if sts is None:
            return []
        want = int((sts.get("spec") or {}).get("replicas") or 0)
        if want == 0 or ready_replicas(sts) >= want:
            return []
        res.due(pc.RECHECK_SECONDS)
        selector = {owner_label: name, contract.LABEL_ROLE: contract.ROLE_SERVER}
        pods = await self.api.list("Pod", ns, selector)
        return sp.all_stuck(pods, str((sts.get("metadata") or {}).get("uid") or ""))

    async def _stuck_trainers(
        self,
        ns: str,
        tjob: dict[str, Any] | None,
        tstate: str,
        colocated: bool,
        res: PassResult,
    ) -> TrainerPods:
        """The trainer pods that cannot start (image pull, a missing Secret or key, no node;
        a co-located pod's server sidecar crash-looping), lowest completion index first,
        and a co-located job's ready server sidecars; read (one list) only while the
        running trainer Job has active pods that are not ready, a pass due again meanwhile
        (as :meth:`_stuck_servers`)."""
        if tjob is None or tstate != "running":
            return TrainerPods()
        st = tjob.get("status") or {}
        if st.get("ready") is None or int(st["ready"]) >= int(st.get("active") or 0):
            return TrainerPods()
        res.due(pc.RECHECK_SECONDS)
        md = tjob.get("metadata") or {}
        uid = str(md.get("uid") or "")
        pods = await self.api.list("Pod", ns, {"job-name": str(md.get("name"))})
        sidecars = (sp.SERVER_CONTAINER,) if colocated else ()
        return TrainerPods(
            sp.all_stuck(pods, uid, d.TRAINER_CONTAINER, sidecars),
            sp.sidecars_ready(pods, uid, sp.SERVER_CONTAINER) if colocated else None,
        )

    async def _partition_outcome(
        self, ns: str, pjob: dict[str, Any] | None, pstate: str
    ) -> PartitionOutcome:
        """Why the partitioning Job failed: its first failing pod's root cause (the
        ``partition`` container's termination message) or, with the pods gone, the Job's
        ``Failed`` condition; a configuration error when that pod exited with 2 or the Job
        controller failed the Job by its ``podFailurePolicy`` (reason ``PodFailurePolicy``:
        its only FailJob rule is exit status 2). ``pstate``: its :func:`job_state`, computed
        once per pass."""
        if pjob is None or pstate != "failed":
            return PartitionOutcome()
        name = pjob["metadata"]["name"]
        pods = await self.api.list("Pod", ns, {"job-name": name})
        pfail = f.first_failure(pods, d.PARTITION_CONTAINER)
        cond = failed_condition(pjob)
        by_policy = cond.get("reason") == JOB_POD_FAILURE_POLICY
        message = pfail.headline() if pfail else f.one_line(str(cond.get("message") or ""))
        return PartitionOutcome(
            pfail, message, by_policy or (pfail is not None and pfail.config_error)
        )

    async def _trainer_outcome(
        self, ns: str, job_name: str
    ) -> tuple[f.PodFailure | None, dict[str, float] | None]:
        """(first failing rank, rank-0 metrics) from the pods' termination messages."""
        pods = await self.api.list("Pod", ns, {"job-name": job_name})
        metrics = None
        for pod in pods:
            term = f.terminated(pod, d.TRAINER_CONTAINER)
            if f.pod_rank(pod) == "0" and term.get("exitCode") == 0:
                metrics = parse_metrics(term.get("message"))
        return f.first_failure(pods, d.TRAINER_CONTAINER), metrics

    # --- graph servers -----------------------------------------------------------------

    async def attached_jobs(self, ns: str, gs_name: str) -> list[str]:
        """Names of unfinished DistGNNJobs referencing the GraphServer."""
        out = []
        for j in await self.api.list("DistGNNJob", ns):
            ref = ((j.get("spec") or {}).get("graph") or {}).get("graphServer") or {}
            phase = (j.get("status") or {}).get("phase")
            if (
                ref.get("name") == gs_name
                and phase not in s.TERMINAL
                and not j["metadata"].get("deletionTimestamp")
                and contract.managed_elsewhere(j.get("spec")) is None  # runs elsewhere
            ):
                out.append(j["metadata"]["name"])
        return sorted(out)

    async def graphserver_terminating(self, body: dict[str, Any], emit: Emit) -> list[str]:
        """A GraphServer being deleted: the jobs still attached (deletion waits for them),
        shown as phase Terminating and a condition naming them, with an event on change."""
        md = body["metadata"]
        jobs = await self.attached_jobs(md.get("namespace") or "default", md["name"])
        if not jobs:
            return []
        old = dict(body.get("status") or {})
        new = s.graphserver_terminating(
            old, jobs, iso(self.ctx.clock()), int(md.get("generation") or 0)
        )
        try:
            changed = await self._patch_status("GraphServer", body, new)
        except ApiError as e:
            if e.status != 404:
                raise
            return jobs
        if changed:
            cond = next(c for c in new["conditions"] if c["type"] == "Terminating")
            emit("Warning", s.Reason.TERMINATING, cond["message"])
        return jobs

    async def reconcile_graphserver(self, body: dict[str, Any], emit: Emit) -> PassResult:
        """One pass over a GraphServer."""
        md = body.get("metadata") or {}
        old = dict(body.get("status") or {})
        now = iso(self.ctx.clock())
        if md.get("deletionTimestamp"):  # the delete handler reports what holds it
            return PassResult(old)
        self.recall_taken(body)
        try:
            gs = parse_graphserver(body)
            manifest = self._gs_manifest(gs)
        except ConfigError as e:
            obs = s.GraphServerObservation(
                generation=int(md.get("generation") or 0), invalid=str(e)
            )
            new = s.graphserver_status(obs, old, now)
            if await self._patch_status("GraphServer", body, new):
                emit("Warning", s.Reason.INVALID, str(e)[:1024])
            return PassResult(new)
        meta = gs.metadata
        n = d.names(meta.name)
        have = await self.observe(meta.namespace, contract.LABEL_GRAPHSERVER, meta.name, meta.uid)
        pjob = have.get(("Job", n["partition"]))
        pstate = job_state(pjob)
        pout = await self._partition_outcome(meta.namespace, pjob, pstate)
        pfail = pout.failure
        needed = gs.spec.graph.source is not None
        ready = ready_replicas(have.get(("StatefulSet", n["server"])))
        parts = gs.spec.partitioning.num_parts
        attached = await self.attached_jobs(meta.namespace, meta.name)
        creds = None
        if old.get("phase") != "Ready":
            creds = await self._credentials_missing(meta.namespace, gs.spec.storage)
        res = PassResult(old)
        own = [have.get(("Job", n["partition"])), have.get(("StatefulSet", n["server"]))]
        not_created = await self._pods_not_created(meta.namespace, own, self.ctx.clock(), res)
        stuck = await self._stuck_servers(
            meta.namespace, contract.LABEL_GRAPHSERVER, meta.name, own[1], res
        )
        first_stuck, server_error = sp.first_stuck(stuck), sp.first_config_error(stuck)
        obs = s.GraphServerObservation(
            generation=meta.generation,
            partition_needed=needed,
            partition=pstate,
            partition_message=pout.message,
            partition_config_error=pout.config_error,
            num_parts=parts,
            servers_ready=ready,
            manifest_url=manifest,
            endpoints=[
                f"{contract.server_dns_name(n['server'], i, n['server'], meta.namespace)}"
                f":{contract.SERVER_PORT}"
                for i in range(parts)
            ],
            attached_jobs=attached,
            token_secret=n["token"],
            credentials_missing=creds,
            pods_not_created=not_created,
            servers_stuck=first_stuck.describe() if first_stuck else None,
            server_config_error=server_error.failure().headline() if server_error else None,
        )
        token, thash = self._token(have, n["token"])
        want = d.desired_graphserver_children(
            gs,
            self.ctx.desired,
            token=token,
            stage=d.Stage(partitioned=not needed or pstate == "succeeded", token_hash=thash),
        )
        done = await self.apply(want, have, emit)
        if done.conflicts:
            obs = dataclasses.replace(
                obs, conflict="; ".join(done.conflicts), taken=tuple(done.taken)
            )
        new = s.graphserver_status(obs, old, now)
        res.status = new
        if await self._patch_status("GraphServer", body, new):
            if new["phase"] != old.get("phase"):
                warn = new["phase"] in ("Failed", "Pending")
                emit(
                    "Warning" if warn else "Normal",
                    s.phase_reason(new)[0] if warn else new["phase"],
                    s.phase_reason(new)[1] if warn else f"GraphServer is {new['phase']}",
                )
            if new["phase"] == "Failed":
                self._emit_detail(emit, pfail)
                if server_error and s.phase_reason(new)[0] == s.Reason.SERVER_CONFIG_ERROR:
                    self._emit_detail(emit, server_error.failure())
            # jobs waiting for (or attached to) this GraphServer see the change now
            res.poke += [("DistGNNJob", meta.namespace, j) for j in attached]
        return res

    def _gs_manifest(self, gs: t.GraphServer) -> str:
        from distgnn.api import commands as cmds

        out = d.output_url(gs.metadata, gs.spec.partitioning, self.ctx.desired)
        return cmds.manifest_url(gs.metadata.name, gs.spec.graph, gs.spec.partitioning, out)


def _raise_output() -> None:
    raise ConfigError(
        "spec.partitioning.outputURL: is required (the operator has no default partitions URL)"
    )
