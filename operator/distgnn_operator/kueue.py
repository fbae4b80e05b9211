"""Kueue integration (opt-in, ``--kueue``): the job's Workload and what its status means.

Kueue admits a kind only through a ``Workload`` (kueue.x-k8s.io/v1beta1) that the kind's
integration creates; this module is that integration's pure part, as Kueue's jobframework
does for its built-in jobs:

* :func:`workload` builds the one Workload of a job labelled ``kueue.x-k8s.io/queue-name``:
  pod sets ``partition`` (the partitioning Job's pod, for a source graph), ``servers`` (the
  server StatefulSet's pods; none when attached to a GraphServer or co-located) and
  ``trainers`` (the trainer Job's pods), their templates reduced to what Kueue accounts
  (containers' resources, node selection, priority); ``spec.active`` false while the user
  suspends the job; :func:`matches` tells whether a stored one was built from the same spec;
* :func:`decide` reads its status: the job runs only while it is admitted (condition
  ``Admitted`` True: quota reserved and every admission check ready, the v1beta1 rule
  since Kueue 0.5) and not evicted;
* :func:`release_status` is the status patch that gives the quota back after the job was
  stopped on eviction, :func:`reclaim_status` the one that gives back the partitioning
  pod's share once it succeeded, and :func:`finished_status` the one that marks it
  ``Finished``.

A job labelled :data:`PREBUILT_LABEL` (MultiKueue's copy on a worker cluster) has its
Workload made for it: :func:`equivalent` tells whether it is the job's, :func:`adopt_patch`
makes the job its controller. The flavors' node labels and tolerations are
:mod:`kueue_podsets`'.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn.api import types as t
from distgnn_operator import desired as d
from distgnn_operator import drift
from distgnn_operator import kueue_podsets as kp
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
ANN_SPEC = "distgnn.dev/workload-spec"
# the user's suspend that spec.active was last set from: the operator flips spec.active
# only when the user's suspend changes, so a deactivation Kueue or an admin makes itself
# (a requeuing limit reached, ``kubectl edit``) is not undone pass after pass
ANN_SUSPEND = "distgnn.dev/suspend"
"""Annotation of a Workload: the hash of the spec it was built with, ``active`` aside
(:func:`matches`; the API server and Kueue's webhook may default fields of the spec)."""
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
"""The label naming a Workload created for the job beforehand (MultiKueue's, on a worker
cluster): the job's Workload is that one, not one this operator builds (:func:`prebuilt`)."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label Kueue's jobframework puts on a prebuilt Workload it takes: the job's uid."""
OUT_OF_SYNC = "OutOfSync"
"""Reason of the ``Finished`` condition of a prebuilt Workload whose pod sets are not the
job's (Kueue's ``WorkloadFinishedReasonOutOfSync``)."""
FAILED_TO_START = "FailedToStart"
"""Reason of the ``Finished`` condition of a Workload whose job cannot take its admission
(a flavor's node label conflicts with the pod template), as Kueue's jobframework writes."""


def queue_name(body: dict[str, Any]) -> str | None:
    """The LocalQueue a DistGNNJob names (its ``kueue.x-k8s.io/queue-name`` label)."""
    q = ((body.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    return q if isinstance(q, str) and q else None


def prebuilt(body: dict[str, Any]) -> str | None:
    """The prebuilt Workload a DistGNNJob names (its :data:`PREBUILT_LABEL`), if any."""
    v = ((body.get("metadata") or {}).get("labels") or {}).get(PREBUILT_LABEL)
    return v if isinstance(v, str) and v else None


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
    pod_sets = []
    for kid in kids:
        ps = kp.pod_set_of(kid, meta.name)
        if ps is None:
            continue
        if kid["kind"] == "StatefulSet":
            count = int(kid["spec"]["replicas"])
        else:
            count = int(kid["spec"].get("parallelism") or kid["spec"].get("completions") or 1)
        pod_sets.append(
            {"name": ps, "count": count, "template": _template(kid["spec"]["template"])}
        )
    wl_spec: dict[str, Any] = {"queueName": queue, "podSets": pod_sets}
    sp = spec.run_policy.scheduling_policy
    if sp is not None and sp.priority_class_name:
        wl_spec["priorityClassName"] = sp.priority_class_name
    hashed = spec_hash(wl_spec)
    wl_spec["active"] = not spec.run_policy.suspend
    labels = {contract.LABEL_MANAGED_BY: contract.MANAGED_BY, contract.LABEL_JOB: meta.name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta.name, meta.uid),
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": {ANN_SPEC: hashed, ANN_SUSPEND: _flag(spec.run_policy.suspend)},
            "ownerReferences": [d.owner_ref("DistGNNJob", meta)],
        },
        "spec": wl_spec,
    }


def spec_hash(wl_spec: dict[str, Any]) -> str:
    """Hash of a Workload spec as built, ``active`` aside (the user's suspend toggles it
    in place)."""
    kept = {k: v for k, v in wl_spec.items() if k != "active"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def matches(stored: dict[str, Any], built: dict[str, Any]) -> bool:
    """Whether ``stored`` was built from the spec ``built`` was (pod sets: counts,
    templates; queue, priority), by the hash each carries (:data:`ANN_SPEC`); one
    without it (an older operator's) does not match."""
    ann = ((stored.get("metadata") or {}).get("annotations") or {}).get(ANN_SPEC)
    return ann is not None and ann == built["metadata"]["annotations"][ANN_SPEC]


def _flag(b: bool) -> str:
    return "true" if b else "false"


def activation_patch(wl: dict[str, Any], suspend: bool) -> dict[str, Any] | None:
    """The patch that makes ``spec.active`` follow a change of the user's suspend, as
    Kueue's jobframework stops and restarts a job's Workload, or None: only a change of
    the suspend recorded in :data:`ANN_SUSPEND` flips it, so a deactivation Kueue made
    itself stays (a Workload without the record, an older operator's, follows the
    suspend as it is)."""
    md = wl.get("metadata") or {}
    if md.get("deletionTimestamp") or condition(wl, "Finished") is not None:
        return None
    recorded = (md.get("annotations") or {}).get(ANN_SUSPEND)
    if recorded == _flag(suspend):
        return None
    if recorded is None and is_active(wl) == (not suspend):
        return None
    return {
        "metadata": {"annotations": {ANN_SUSPEND: _flag(suspend)}},
        "spec": {"active": not suspend},
    }


def is_active(wl: dict[str, Any]) -> bool:
    """``spec.active`` (absent: true)."""
    return (wl.get("spec") or {}).get("active") is not False


def reserved(wl: dict[str, Any] | None) -> bool:
    """Whether the Workload holds a quota reservation (``QuotaReserved`` or ``Admitted``
    True, or an ``admission``): Kueue's webhook then keeps its pod sets as they are."""
    return (
        condition(wl, "QuotaReserved") is not None
        or condition(wl, "Admitted") is not None
        or bool(((wl or {}).get("status") or {}).get("admission"))
    )


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
        why = f"{evicted.get('reason') or 'Evicted'}: {evicted.get('message') or ''}".rstrip(": ")
        return Gate(False, reserved(wl), f"evicted by Kueue ({why}); {waiting} again")
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


def finished_status(
    wl: dict[str, Any], succeeded: bool, message: str, now: str, reason: str = ""
) -> dict[str, Any]:
    """Status patch marking the Workload ``Finished`` (reason ``reason``, else Succeeded or
    Failed)."""
    conds = [c for c in (wl.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    reason = reason or ("Succeeded" if succeeded else "Failed")
    return {"status": {"conditions": _set(conds, "Finished", "True", reason, message, now)}}


def reclaim_status(wl: dict[str, Any]) -> dict[str, Any] | None:
    """Status patch giving back the quota of the ``partition`` pod set once its pod
    succeeded (``reclaimablePods``, as Kueue's Job and JobSet integrations report finished
    pods); None when the Workload has no such pod set or already says so. Kueue refuses to
    lower it while the quota is reserved, so it is only ever raised."""
    sets = {
        p.get("name"): int(p.get("count") or 0) for p in (wl.get("spec") or {}).get("podSets") or []
    }
    if kp.PARTITION not in sets:
        return None
    have = [r for r in (wl.get("status") or {}).get("reclaimablePods") or [] if isinstance(r, dict)]
    if any(
        r.get("name") == kp.PARTITION and int(r.get("count") or 0) >= sets[kp.PARTITION]
        for r in have
    ):
        return None
    kept = [r for r in have if r.get("name") != kp.PARTITION]
    return {
        "status": {"reclaimablePods": [*kept, {"name": kp.PARTITION, "count": sets[kp.PARTITION]}]}
    }


def _resources(containers: Any) -> list[Any]:
    return [drift.canonicalize((c or {}).get("resources") or {}) for c in containers or []]


def equivalent(stored: dict[str, Any], built: dict[str, Any]) -> bool:
    """Whether a prebuilt Workload ``stored`` is the one ``built`` for the job, as Kueue's
    jobframework compares them (``equivalentToWorkload``): the same pod sets, in order, each
    with the same name, count, tolerations and containers' resources (images and the rest
    of the templates may differ between clusters)."""
    have = (stored.get("spec") or {}).get("podSets") or []
    want = built["spec"]["podSets"]
    if len(have) != len(want):
        return False
    for h, w in zip(have, want, strict=True):
        hs, ws = (h.get("template") or {}).get("spec") or {}, w["template"]["spec"]
        if (h.get("name"), int(h.get("count") or 0)) != (w["name"], w["count"]):
            return False
        if (hs.get("tolerations") or []) != (ws.get("tolerations") or []):
            return False
        for key in ("initContainers", "containers"):
            if _resources(hs.get(key)) != _resources(ws.get(key)):
                return False
    return True


def adopt_patch(wl: dict[str, Any], job: t.DistGNNJob) -> dict[str, Any] | None:
    """Metadata patch making ``job`` the controller of its prebuilt Workload ``wl`` (owner
    reference, so that it goes with the job and its events reach the job's pass; the labels
    the operator watches Workloads by, and :data:`JOB_UID_LABEL`), as the jobframework
    takes a prebuilt Workload; None when it already is."""
    md = wl.get("metadata") or {}
    refs = [r for r in md.get("ownerReferences") or [] if isinstance(r, dict)]
    labels = md.get("labels") or {}
    want = {
        contract.LABEL_MANAGED_BY: contract.MANAGED_BY,
        contract.LABEL_JOB: job.metadata.name,
        JOB_UID_LABEL: job.metadata.uid,
    }
    owned = any(r.get("controller") and r.get("uid") == job.metadata.uid for r in refs)
    if owned and all(labels.get(k) == v for k, v in want.items()):
        return None
    out: dict[str, Any] = {"labels": want}
    if not owned:
        out["ownerReferences"] = [*refs, d.owner_ref("DistGNNJob", job.metadata)]
    return {"metadata": out}


def foreign_controller(wl: dict[str, Any], uid: str) -> str | None:
    """``KIND NAME`` of another controller of the Workload than the job ``uid``, else None."""
    for r in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(r, dict) and r.get("controller") and r.get("uid") != uid:
            return f"{r.get('kind')} {r.get('name')}"
    return None
