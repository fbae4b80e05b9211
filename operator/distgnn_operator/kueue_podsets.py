"""What Kueue's admission puts on a job's pods (``--kueue``): the assigned ResourceFlavors'
node labels and tolerations, merged into the pod templates of the pod sets' children.

Kueue's jobframework does this for its built-in jobs (``podset.FromAssignment`` and
``podset.Merge``): for each pod set of ``status.admission.podSetAssignments`` the node
labels of its flavors (first flavor wins on a key they share) are merged into the pod
template's ``nodeSelector`` (a key the template sets to another value is a conflict: the
job cannot start) and their tolerations appended (no duplicates). Stopping the job
removes them with the rest: the children are built from the spec again, without them.
Pure functions; the reconciler reads the flavors (:func:`flavor_names`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distgnn_operator import desired as d

SERVERS, TRAINERS, PARTITION = "servers", "trainers", "partition"
"""The pod sets of a job's Workload."""


@dataclass(frozen=True)
class PodSetInfo:
    """What admission adds to one pod set's pod template."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


class PodSetConflict(ValueError):
    """A flavor's node label and the pod template's nodeSelector disagree."""


def pod_set_of(kid: dict[str, Any], job_name: str) -> str | None:
    """The pod set a child's pods belong to (None: a child without pods of its own)."""
    n = d.names(job_name)
    name = kid["metadata"]["name"]
    if kid["kind"] == "StatefulSet" and name == n["server"]:
        return SERVERS
    if kid["kind"] == "Job" and name == n["trainers"]:
        return TRAINERS
    if kid["kind"] == "Job" and name == n["partition"]:
        return PARTITION
    return None


def assignments(wl: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``status.admission.podSetAssignments`` of a Workload ([] when not admitted)."""
    adm = ((wl or {}).get("status") or {}).get("admission") or {}
    return [a for a in adm.get("podSetAssignments") or [] if isinstance(a, dict)]


def _flavors(assignment: dict[str, Any]) -> list[str]:
    """An assignment's flavors (resource -> flavor), in resource order, each once."""
    out: list[str] = []
    fl = assignment.get("flavors") or {}
    for res in sorted(fl):
        if isinstance(fl[res], str) and fl[res] not in out:
            out.append(fl[res])
    return out


def flavor_names(wl: dict[str, Any] | None) -> list[str]:
    """Every ResourceFlavor the Workload's admission assigns, each once."""
    out: list[str] = []
    for a in assignments(wl):
        out += [f for f in _flavors(a) if f not in out]
    return out


def pod_set_infos(
    wl: dict[str, Any] | None, flavors: Mapping[str, dict[str, Any]]
) -> dict[str, PodSetInfo]:
    """Per pod set, the node labels and tolerations of its assigned flavors (``flavors``:
    the ResourceFlavor objects by name, as read; each name of :func:`flavor_names`)."""
    out: dict[str, PodSetInfo] = {}
    for a in assignments(wl):
        info = PodSetInfo()
        for name in _flavors(a):
            spec = flavors[name].get("spec") or {}
            for k, v in (spec.get("nodeLabels") or {}).items():
                info.node_selector.setdefault(str(k), str(v))
            for tol in spec.get("tolerations") or []:
                if tol and tol not in info.tolerations:  # flavors sharing one: once
                    info.tolerations.append(tol)
        out[str(a.get("name"))] = info
    return out


def merge(pod: dict[str, Any], info: PodSetInfo, pod_set: str) -> dict[str, Any]:
    """``pod`` (a pod spec) with ``info`` merged in; raises PodSetConflict for a node label
    whose key the pod's nodeSelector sets to another value."""
    sel = dict(pod.get("nodeSelector") or {})
    for k, v in info.node_selector.items():
        if k in sel and sel[k] != v:
            raise PodSetConflict(
                f"the nodeSelector {k}={sel[k]} of pod set {pod_set} conflicts with the node "
                f"label {k}={v} of the ResourceFlavor Kueue assigned"
            )
        sel[k] = v
    tols = list(pod.get("tolerations") or [])
    for tol in info.tolerations:  # each once, as Kueue's PodSetInfo.Merge
        if tol not in tols:
            tols.append(tol)
    out = dict(pod)
    if sel:
        out["nodeSelector"] = sel
    if tols:
        out["tolerations"] = tols
    return out


def check(pod_sets: list[dict[str, Any]], infos: Mapping[str, PodSetInfo]) -> str | None:
    """Why the Workload's ``pod_sets`` cannot take ``infos`` (a PodSetConflict's message),
    else None."""
    for ps in pod_sets:
        info = infos.get(ps["name"])
        if info is None:
            continue
        try:
            merge((ps.get("template") or {}).get("spec") or {}, info, ps["name"])
        except PodSetConflict as e:
            return str(e)
    return None


def inject(
    children: list[dict[str, Any]], infos: Mapping[str, PodSetInfo], job_name: str
) -> list[dict[str, Any]]:
    """``children`` with each pod set's info merged into its pod template (raises
    PodSetConflict); children of no pod set, or of one without info, as they are."""
    out = []
    for kid in children:
        ps = pod_set_of(kid, job_name)
        info = infos.get(ps) if ps else None
        if ps is None or info is None or not (info.node_selector or info.tolerations):
            out.append(kid)
            continue
        tmpl = kid["spec"]["template"]
        pod = merge(tmpl["spec"], info, ps)
        out.append({**kid, "spec": {**kid["spec"], "template": {**tmpl, "spec": pod}}})
    return out
