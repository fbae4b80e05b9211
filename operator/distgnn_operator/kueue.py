"""Kueue integration (opt-in, ``--kueue``): the job's Workload and what its status means.

Kueue admits a kind only through a ``Workload`` (kueue.x-k8s.io/v1beta1) that the kind's
integration creates; this module is that integration's pure part, as Kueue's jobframework
does for its built-in jobs:

* :func:`workload` builds the one Workload of a job labelled ``kueue.x-k8s.io/queue-name``:
  pod sets ``servers`` (the server StatefulSet's pods; none when attached to a GraphServer
  or co-located) and ``trainers`` (the trainer Job's pods), their templates reduced to what
  Kueue accounts (containers' resources, node selection, priority);
* :func:`decide` reads its status: the job runs only while it is admitted (condition
  ``Admitted`` True: quota reserved and every admission check ready, the v1beta1 rule
  since Kueue 0.5) and not evicted;
* :func:`release_status` is the status patch that gives the quota back after the job was
  stopped on eviction, and :func:`finished_status` the one that marks it ``Finished``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn.api import types as t
from distgnn_operator import desired as d
from distgnn_operator import status as s

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label naming the LocalQueue of a job (read from the DistGNNJob's metadata)."""
PREFIX = "distgnnjob-"
POD_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "overhead",
    "schedulerName",
)
"""Pod spec fields a pod set's template keeps besides its containers."""
CONTAINER_FIELDS = ("name", "image", "resources", "restartPolicy")


def queue_name(body: dict[str, Any]) -> str | None:
    """The LocalQueue a DistGNNJob names (its ``kueue.x-k8s.io/queue-name`` label)."""
    q = ((body.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    return q if isinstance(q, str) and q else None


def workload_name(job: str, uid: str) -> str:
    """``distgnnjob-<job>-<hash>``, at most 63 characters; the hash (of the job's name and
    uid) tells apart a truncated name and a job recreated under the same name."""
    h = hashlib.sha256(f"{job}/{uid}".encode()).hexdigest()[:5]
    return f"{PREFIX}{job[: 63 - len(PREFIX) - len(h) - 1].rstrip('-.')}-{h}"


def with_suspend(job: t.DistGNNJob, suspend: bool) -> t.DistGNNJob:
    """``job`` with ``spec.runPolicy.suspend`` set to ``suspend``."""
    rp = job.spec.run_policy
    if rp.suspend == suspend:
        return job
    rp = dataclasses.replace(rp, suspend=suspend)
    return dataclasses.replace(job, spec=dataclasses.replace(job.spec, run_policy=rp))


def _template(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {k: spec[k] for k in POD_FIELDS if spec.get(k)}
    for key in ("initContainers", "containers"):
        if spec.get(key):
            out[key] = [{k: c[k] for k in CONTAINER_FIELDS if k in c} for c in spec[key]]
    return {"spec": out}


def workload(
    job: t.DistGNNJob,
    queue: str,
    ctx: d.DesiredContext,
    graphserver: d.GraphServerInfo | None = None,
) -> dict[str, Any]:
    """The Workload of ``job`` in ``queue`` (raises ConfigError for a bad spec)."""
    meta, spec = job.metadata, job.spec
    running = with_suspend(job, False)
    if spec.graph.graph_server is not None and graphserver is None:
        ref = spec.graph.graph_server.name  # its pod template only: resources, not URLs
        graphserver = d.GraphServerInfo(ref, "", spec.partitioning.num_parts, "")
    kids = d.desired_job_children(
        running,
        ctx,
        graphserver=graphserver,
        stage=d.Stage(partitioned=True, servers_ready=True, trainers_started=True),
    )
    n = d.names(meta.name)
    pod_sets = []
    for kid in kids:
        name = kid["metadata"]["name"]
        if kid["kind"] == "StatefulSet" and name == n["server"]:
            count = int(kid["spec"]["replicas"])
            pod_sets.append(
                {"name": "servers", "count": count, "template": _template(kid["spec"]["template"])}
            )
        elif kid["kind"] == "Job" and name == n["trainers"]:
            count = int(kid["spec"].get("parallelism") or kid["spec"].get("completions") or 1)
            pod_sets.append(
                {"name": "trainers", "count": count, "template": _template(kid["spec"]["template"])}
            )
    wl_spec: dict[str, Any] = {"queueName": queue, "podSets": pod_sets}
    sp = spec.run_policy.scheduling_policy
    if sp is not None and sp.priority_class_name:
        wl_spec["priorityClassName"] = sp.priority_class_name
    labels = {contract.LABEL_MANAGED_BY: contract.MANAGED_BY, contract.LABEL_JOB: meta.name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta.name, meta.uid),
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [d.owner_ref("DistGNNJob", meta)],
        },
        "spec": wl_spec,
    }


def condition(wl: dict[str, Any] | None, typ: str) -> dict[str, Any] | None:
    """The Workload's condition ``typ`` while it is True, else None."""
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == typ and c.get("status") == "True":
            return c
    return None


@dataclass(frozen=True)
class Gate:
    """What a Workload's status means for its job."""

    run: bool
    """admitted and not evicted: the job runs as if not suspended"""
    release: bool = False
    """evicted while it holds a quota reservation: stop the job, then release the quota"""
    message: str = ""
    """why the job waits (empty while it runs)"""


def decide(wl: dict[str, Any] | None, queue: str) -> Gate:
    """Whether the job may run: Workload condition ``Admitted`` True and ``Evicted`` not."""
    name = ((wl or {}).get("metadata") or {}).get("name", "")
    waiting = f"waiting for Kueue to admit Workload {name} (LocalQueue {queue})"
    evicted = condition(wl, "Evicted")
    if evicted is not None:
        reserved = (
            condition(wl, "QuotaReserved") is not None
            or condition(wl, "Admitted") is not None
            or bool(((wl or {}).get("status") or {}).get("admission"))
        )
        why = f"{evicted.get('reason') or 'Evicted'}: {evicted.get('message') or ''}".rstrip(": ")
        return Gate(False, reserved, f"evicted by Kueue ({why}); {waiting} again")
    if condition(wl, "Admitted") is not None:
        return Gate(True)
    return Gate(False, False, waiting)


def _set(
    conds: list[dict[str, Any]], typ: str, status: str, reason: str, msg: str, now: str
) -> list[dict[str, Any]]:
    prev = next((c for c in conds if c.get("type") == typ), None)
    kept = [c for c in conds if c.get("type") != typ]
    return [*kept, s.condition((typ, status, reason, msg), prev, now)]


def release_status(wl: dict[str, Any], now: str) -> dict[str, Any]:
    """Status patch after the job stopped on eviction (Kueue's jobframework does the same
    for its jobs): ``admission`` removed, ``QuotaReserved`` False reason ``Pending`` with
    the eviction's message, ``Admitted`` False reason ``NoReservation``; Kueue may then
    admit it again."""
    st = wl.get("status") or {}
    conds = [c for c in st.get("conditions") or [] if isinstance(c, dict)]
    ev = condition(wl, "Evicted") or {}
    conds = _set(conds, "QuotaReserved", "False", "Pending", str(ev.get("message") or ""), now)
    if any(c.get("type") == "Admitted" for c in conds):
        msg = "The workload has no reservation"
        conds = _set(conds, "Admitted", "False", "NoReservation", msg, now)
    return {"status": {"admission": None, "conditions": conds}}


def finished_status(wl: dict[str, Any], succeeded: bool, message: str, now: str) -> dict[str, Any]:
    """Status patch marking the Workload ``Finished`` (reason Succeeded or Failed)."""
    conds = [c for c in (wl.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    reason = "Succeeded" if succeeded else "Failed"
    return {"status": {"conditions": _set(conds, "Finished", "True", reason, message, now)}}
