"""MultiKueue on the manager cluster (``--kueue``): the Workload of a dispatched job.

A DistGNNJob whose ``spec.managedBy`` is MultiKueue's (:data:`CONTROLLER`) and that names
a LocalQueue is *dispatched*: Kueue's generic MultiKueue adapter for custom jobs
(``multiKueue.externalFrameworks``) copies it, without ``spec.managedBy``, to a worker
cluster once its Workload is admitted, and copies the copy's ``status`` back into it. Kueue
creates no Workload for an external framework, so this operator does, as Kueue's
jobframework does for a batch Job that MultiKueue manages; it creates no child and writes
nothing to the job. What the mirrored status means for the Workload is :func:`plan`'s:

* the copy finished (phase ``Succeeded`` or ``Failed``): the Workload is ``Finished``,
  once (MultiKueue also finishes it once the worker's Workload is);
* the Workload is evicted (preempted, deactivated by a suspend, an admission check asks
  for a retry): MultiKueue evicts the worker's Workload, whose operator stops the copy;
  once the mirrored status says nothing runs (:func:`remote_active`, as the jobframework
  reads a batch Job's mirrored ``status.active``) the quota is released, and MultiKueue
  then deletes the copy and its Workload from the worker;
* admitted, a copy whose partitioning succeeded gives that pod's quota back
  (``reclaimablePods``, as on a single cluster).

Pure functions; :meth:`reconcile.Reconciler.reconcile_dispatched` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn_operator import kueue as kq
from distgnn_operator import status as s

CONTROLLER = "kueue.x-k8s.io/multikueue"
"""``spec.managedBy`` of a job MultiKueue dispatches (Kueue's ``MultiKueueControllerName``)."""
IDLE_PHASES = ("", "Suspended", *s.TERMINAL)
"""Mirrored phases in which the worker's copy runs no pod (none: not copied back yet)."""


def dispatched(body: dict[str, Any]) -> bool:
    """Whether the job is MultiKueue's and names a LocalQueue: with ``--kueue`` this
    operator is its Kueue integration on the manager cluster (its Workload only)."""
    return contract.job_manager(body.get("spec")) == CONTROLLER and kq.queue_name(body) is not None


def remote_active(status: dict[str, Any] | None) -> bool:
    """Whether the mirrored status says the worker's copy may run pods."""
    return str((status or {}).get("phase") or "") not in IDLE_PHASES


def _partitioned(status: dict[str, Any]) -> bool:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Partitioned":
            return c.get("status") == "True" and c.get("reason") == s.Reason.PARTITIONED
    return False


@dataclass(frozen=True)
class Plan:
    """Status patches of the Workload (each None: nothing to write)."""

    finish: dict[str, Any] | None = None
    release: dict[str, Any] | None = None
    reclaim: dict[str, Any] | None = None

    @property
    def patches(self) -> list[dict[str, Any]]:
        return [p for p in (self.finish, self.release, self.reclaim) if p is not None]


def plan(wl: dict[str, Any], status: dict[str, Any] | None, now: str) -> Plan:
    """What the mirrored ``status`` of a dispatched job means for its Workload ``wl``."""
    st = status or {}
    if kq.condition(wl, "Finished") is not None:
        return Plan()
    phase = st.get("phase")
    if phase in s.TERMINAL:
        msg = s.phase_reason(st)[1] or f"job {phase}"
        return Plan(finish=kq.finished_status(wl, phase == "Succeeded", msg, now))
    if kq.condition(wl, "Evicted") is not None:
        if kq.reserved(wl) and not remote_active(st):
            return Plan(release=kq.release_status(wl, now))
        return Plan()
    if kq.condition(wl, "Admitted") is not None and _partitioned(st):
        return Plan(reclaim=kq.reclaim_status(wl))
    return Plan()
