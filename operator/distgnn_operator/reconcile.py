"""Level-based reconciliation: observe children, build desired, apply, prune, patch status.

Each pass is idempotent: it reads the world, so a missed event or an operator restart
only delays convergence. A malformed resource is reported in its status and events,
never raised to kopf.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distgnn import contract
from distgnn.api import inference_output_url, parse_graphserver, parse_job
from distgnn.api import types as t
from distgnn.errors import ConfigError
from distgnn_operator import desired as d
from distgnn_operator import status as s
from distgnn_operator.kube import ApiError, KubeApi
from distgnn_operator.metrics import OperatorMetrics

log = logging.getLogger("distgnn_operator")

Emit = Callable[[str, str, str], None]
"""emit(type Normal|Warning, reason, message): a Kubernetes event on the resource."""

CHILD_KINDS = ("PodGroup", "Secret", "Job", "Service", "StatefulSet", "NetworkPolicy")
NO_DRIFT_KINDS = ("Secret", "Job", "PodGroup")
"""Secret data is created once; Job templates are immutable (recreated on restart)."""
MAX_METRICS = 64


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class OperatorContext:
    """Everything a reconcile pass needs; one per operator process."""

    api: KubeApi
    desired: d.DesiredContext = field(default_factory=d.DesiredContext)
    clock: Callable[[], dt.datetime] = _now
    metrics: OperatorMetrics | None = None
    """Prometheus metrics (``--metrics-port``); None: off."""


def iso(t_: dt.datetime) -> str:
    return t_.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(v: Any) -> dt.datetime | None:
    if not isinstance(v, str):
        return None
    try:
        return dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


def subset(want: Any, have: Any) -> bool:
    """True if every field of ``want`` has the same value in ``have`` (server adds fields)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(subset(a, b) for a, b in zip(want, have, strict=True))
        )
    return bool(want == have)


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


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
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return dict(sorted(out.items())[:MAX_METRICS]) or None


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
    return {}


def _rank(pod: dict[str, Any]) -> str | None:
    md = pod.get("metadata") or {}
    for src in (md.get("labels") or {}, md.get("annotations") or {}):
        v = src.get("batch.kubernetes.io/job-completion-index")
        if v is not None:
            return str(v)
    return None


class Reconciler:
    """Reconciles DistGNNJobs and GraphServers."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.api = ctx.api

    # --- children -------------------------------------------------------------------

    async def observe(
        self, ns: str, owner_label: str, name: str, uid: str
    ) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for kind in CHILD_KINDS:
            try:
                found = await self.api.list(kind, ns, {owner_label: name})
            except ApiError as e:
                # PodGroups are optional: least-privilege RBAC grants them only when the
                # chart enables gang scheduling, so a 403 there means "none of ours".
                if kind == "PodGroup" and e.status == 403:
                    continue
                raise
            for obj in found:
                if owned_by(obj, uid):
                    out[(kind, obj["metadata"]["name"])] = obj
        return out

    async def apply(
        self, want: list[dict[str, Any]], have: dict[tuple[str, str], dict[str, Any]], emit: Emit
    ) -> int:
        """Create missing children, patch drifted ones, delete the rest; returns changes."""
        changes = 0
        keys = set()
        for obj in want:
            md = obj["metadata"]
            key = (obj["kind"], md["name"])
            keys.add(key)
            cur = have.get(key)
            if cur is None:
                try:
                    await self.api.create(obj)
                except ApiError as e:
                    if e.status != 409:  # 409: an old one still terminating; next pass
                        raise
                    continue
                emit("Normal", "Created", f"created {obj['kind']} {md['name']}")
                changes += 1
            elif obj["kind"] not in NO_DRIFT_KINDS:
                patch = {
                    k: v
                    for k, v in obj.items()
                    if k not in ("apiVersion", "kind", "metadata", "status")
                }
                patch["metadata"] = {"labels": md.get("labels", {})}
                if not subset(patch, cur):
                    await self.api.patch(obj["kind"], md["namespace"], md["name"], patch)
                    emit("Normal", "Updated", f"updated {obj['kind']} {md['name']}")
                    changes += 1
        for (kind, name), cur in have.items():
            if (kind, name) not in keys:
                await self.api.delete(kind, cur["metadata"]["namespace"], name)
                if kind == "Job":  # the emulator/real GC removes pods; be explicit for pods
                    await self._delete_pods(cur["metadata"]["namespace"], name)
                emit("Normal", "Deleted", f"deleted {kind} {name}")
                changes += 1
        return changes

    async def _delete_pods(self, ns: str, job_name: str) -> None:
        for pod in await self.api.list("Pod", ns, {"job-name": job_name}):
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

    # --- jobs -------------------------------------------------------------------------

    async def reconcile_job(self, body: dict[str, Any], emit: Emit) -> dict[str, Any]:
        """One pass over a DistGNNJob; returns the status it wrote (or kept)."""
        md = body.get("metadata") or {}
        old = dict(body.get("status") or {})
        now = self.ctx.clock()
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
            return new
        return await self._job_pass(job, body, old, now, emit)

    async def _job_pass(
        self,
        job: t.DistGNNJob,
        body: dict[str, Any],
        old: dict[str, Any],
        now: dt.datetime,
        emit: Emit,
    ) -> dict[str, Any]:
        meta, spec = job.metadata, job.spec
        ns = meta.namespace
        rp = spec.run_policy
        have = await self.observe(ns, contract.LABEL_JOB, meta.name, meta.uid)
        n = d.names(meta.name)
        finished = old.get("phase") in s.TERMINAL
        restarts = int(old.get("restarts") or 0)

        gs_info, waiting, gs_ready = None, None, 0
        if spec.graph.graph_server is not None:
            gs_info, gs_ready, waiting = await self._graphserver_info(
                ns, spec.graph.graph_server.name
            )
        partition_needed = spec.graph.source is not None
        pstate, partition_msg = await self._partition_state(ns, have, n["partition"])
        partitioned = not partition_needed or pstate == "succeeded"
        if gs_info is not None:
            num_parts, servers_ready = gs_info.num_parts, gs_ready
        else:
            num_parts = spec.partitioning.num_parts
            servers_ready = ready_replicas(have.get(("StatefulSet", n["server"])))
        tjob = have.get(("Job", n["trainers"]))
        tstate = job_state(tjob)
        tst = (tjob or {}).get("status") or {}
        restarting = False
        failure = ""
        metrics = None
        if tstate in ("succeeded", "failed") and not finished:
            failure, metrics = await self._trainer_outcome(ns, n["trainers"])
        if tstate == "failed" and not finished and restarts < rp.backoff_limit:
            restarting = True
            restarts += 1
            emit(
                "Warning",
                s.Reason.RESTARTING,
                f"trainer group failed ({failure or 'no message'}); restart {restarts}/"
                f"{rp.backoff_limit}",
            )
            have.pop(("Job", n["trainers"]), None)
            await self.api.delete("Job", ns, n["trainers"])
            await self._delete_pods(ns, n["trainers"])
            tjob, tstate, tst = None, "absent", {}
        start = parse_time(old.get("startTime")) or now
        deadline = (
            rp.active_deadline_seconds is not None
            and not finished
            and (now - start).total_seconds() > rp.active_deadline_seconds
        )
        obs = s.JobObservation(
            generation=meta.generation,
            partition_needed=partition_needed,
            partition=pstate,
            partition_message=partition_msg,
            waiting_for_graphserver=waiting,
            num_parts=num_parts,
            servers_ready=servers_ready,
            trainer_job=tstate,
            trainers_active=int(tst.get("active") or 0),
            trainers_succeeded=int(tst.get("succeeded") or 0),
            trainers_failed=int(tst.get("failed") or 0),
            failure_message=failure,
            restarts=restarts,
            backoff_limit=rp.backoff_limit,
            restarting=restarting,
            suspended=rp.suspend,
            deadline_exceeded=deadline,
            metrics=metrics,
            manifest_url=gs_info.manifest_url if gs_info else self._manifest(job),
            graph_server=spec.graph.graph_server.name if spec.graph.graph_server else None,
            output_url=inference_output_url(spec),
        )
        new = s.job_status(obs, old, iso(now))
        done = new["phase"] in s.TERMINAL
        stage = d.Stage(
            partitioned=partitioned,
            servers_ready=servers_ready >= num_parts,
            finished=done,
            restarts=restarts,
        )
        want = d.desired_job_children(job, self.ctx.desired, graphserver=gs_info, stage=stage)
        if done and (deadline or new["phase"] == "Failed") and rp.clean_pod_policy != "None":
            want = [
                w
                for w in want
                if (w["kind"], w["metadata"]["name"]) != ("Job", n["trainers"])
                or tstate != "running"
            ]
        await self.apply(want, have, emit)
        if await self._patch_status("DistGNNJob", body, new) and new["phase"] != old.get("phase"):
            cond: dict[str, Any] = next((c for c in new["conditions"] if c["type"] == "Failed"), {})
            typ = "Warning" if new["phase"] == "Failed" else "Normal"
            emit(typ, new["phase"], cond.get("message") or f"job is {new['phase']}")
        await self._maybe_ttl(body, new, now)
        return new

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

    async def _maybe_ttl(self, body: dict[str, Any], st: dict[str, Any], now: dt.datetime) -> None:
        ttl = ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        done = parse_time(st.get("completionTime"))
        if isinstance(ttl, int) and done is not None and (now - done).total_seconds() >= ttl:
            md = body["metadata"]
            await self.api.delete("DistGNNJob", md["namespace"], md["name"])

    async def _graphserver_info(
        self, ns: str, name: str
    ) -> tuple[d.GraphServerInfo | None, int, str | None]:
        gs = await self.api.get("GraphServer", ns, name)
        st = (gs or {}).get("status") or {}
        if gs is None or st.get("phase") != "Ready" or not st.get("manifestURL"):
            return None, 0, name
        info = d.GraphServerInfo(
            name=name,
            manifest_url=st["manifestURL"],
            num_parts=int(st.get("numParts") or 0),
            token_secret=st.get("tokenSecret") or d.names(name)["token"],
        )
        return info, int(st.get("partitionsReady") or 0), None

    async def _partition_state(
        self, ns: str, have: Mapping[tuple[str, str], dict[str, Any]], job_name: str
    ) -> tuple[str, str]:
        """(state of the partitioning Job, its pods' failure message when it failed)."""
        state = job_state(have.get(("Job", job_name)))
        msg = await self._failure_message(ns, job_name) if state == "failed" else ""
        return state, msg

    async def _failure_message(self, ns: str, job_name: str) -> str:
        for pod in await self.api.list("Pod", ns, {"job-name": job_name}):
            term = _terminated(pod)
            if term.get("exitCode") not in (None, 0) and term.get("message"):
                return str(term["message"])[:512]
        return ""

    async def _trainer_outcome(self, ns: str, job_name: str) -> tuple[str, dict[str, float] | None]:
        """(root-cause message of a failed rank, rank-0 metrics) from termination messages."""
        failure, metrics = "", None
        for pod in await self.api.list("Pod", ns, {"job-name": job_name}):
            term = _terminated(pod)
            if term.get("exitCode") not in (None, 0) and not failure:
                failure = str(term.get("message") or term.get("reason") or "")[:512]
            if _rank(pod) == "0" and term.get("exitCode") == 0:
                metrics = parse_metrics(term.get("message"))
        return failure, metrics

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
            ):
                out.append(j["metadata"]["name"])
        return sorted(out)

    async def reconcile_graphserver(self, body: dict[str, Any], emit: Emit) -> dict[str, Any]:
        """One pass over a GraphServer; returns its status."""
        md = body.get("metadata") or {}
        old = dict(body.get("status") or {})
        now = iso(self.ctx.clock())
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
            return new
        meta = gs.metadata
        n = d.names(meta.name)
        have = await self.observe(meta.namespace, contract.LABEL_GRAPHSERVER, meta.name, meta.uid)
        pstate, msg = await self._partition_state(meta.namespace, have, n["partition"])
        needed = gs.spec.graph.source is not None
        ready = ready_replicas(have.get(("StatefulSet", n["server"])))
        parts = gs.spec.partitioning.num_parts
        obs = s.GraphServerObservation(
            generation=meta.generation,
            partition_needed=needed,
            partition=pstate,
            partition_message=msg,
            num_parts=parts,
            servers_ready=ready,
            manifest_url=manifest,
            endpoints=[
                f"{contract.server_dns_name(n['server'], i, n['server'], meta.namespace)}"
                f":{contract.SERVER_PORT}"
                for i in range(parts)
            ],
            attached_jobs=await self.attached_jobs(meta.namespace, meta.name),
            token_secret=n["token"],
        )
        want = d.desired_graphserver_children(
            gs, self.ctx.desired, stage=d.Stage(partitioned=not needed or pstate == "succeeded")
        )
        await self.apply(want, have, emit)
        new = s.graphserver_status(obs, old, now)
        if await self._patch_status("GraphServer", body, new) and new["phase"] != old.get("phase"):
            emit(
                "Normal" if new["phase"] != "Failed" else "Warning",
                new["phase"],
                f"GraphServer is {new['phase']}",
            )
        return new

    def _gs_manifest(self, gs: t.GraphServer) -> str:
        from distgnn.api import commands as cmds

        out = d.output_url(gs.metadata, gs.spec.partitioning, self.ctx.desired)
        return cmds.manifest_url(gs.metadata.name, gs.spec.graph, gs.spec.partitioning, out)


def _raise_output() -> None:
    raise ConfigError(
        "spec.partitioning.outputURL: is required (the operator has no default partitions URL)"
    )
