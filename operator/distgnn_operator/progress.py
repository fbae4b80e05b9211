"""Live training progress in a running DistGNNJob's ``status.progress``.

Rank 0 serves ``GET /progress`` (``distgnn.train.telemetry``); a kopf timer of the
operator reads it every few seconds while the job's phase is ``Running`` and patches
``status.progress`` (shown as ``kubectl get dgj``'s ``EPOCH`` column) only when it
changed. Why this path:

* **No extra RBAC for trainer pods.** Trainers would need a service-account token and
  ``patch`` on ``distgnnjobs/status`` (or on pods, for annotations) to report
  themselves; here they only answer HTTP, and only the operator writes to the API.
* **The operator controls the write rate**: one status patch per change, at most one
  per interval per job, never for a finished job (the timer's filter is the phase, and
  the fresh object is checked again), nothing when nothing changed.
* **Async and bounded**: the read uses the operator's event loop (aiohttp) with a total
  timeout, on a session of its own that never carries the API server's credentials.

The address is derived from the rank-0 pod: ``status.podIP`` and the container port
named ``progress`` (:mod:`distgnn_operator.monitoring`), falling back to
:data:`~distgnn.contract.TRAINER_PROGRESS_PORT`. The trainer pods must be reachable from
the operator on that port (mind default-deny NetworkPolicies).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import kopf

from distgnn import contract
from distgnn.api.progress import progress_status
from distgnn_operator.kube import ApiError, KubeApi
from distgnn_operator.metrics import OperatorMetrics
from distgnn_operator.monitoring import PROGRESS_PORT_NAME

log = logging.getLogger("distgnn_operator")

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MAX_BODY = 64 << 10


def rank0_address(pods: list[dict[str, Any]]) -> tuple[str, int] | None:
    """``(pod IP, progress port)`` of the running rank-0 pod among ``pods``, if any."""
    for pod in pods:
        md = pod.get("metadata") or {}
        index = (md.get("labels") or {}).get(COMPLETION_INDEX) or (md.get("annotations") or {}).get(
            COMPLETION_INDEX
        )
        st = pod.get("status") or {}
        if str(index) != "0" or st.get("phase") != "Running" or not st.get("podIP"):
            continue
        port = contract.TRAINER_PROGRESS_PORT
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == PROGRESS_PORT_NAME and isinstance(p.get("containerPort"), int):
                    port = p["containerPort"]
        return str(st["podIP"]), port
    return None


def same_progress(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Equal apart from ``updateTime``."""
    strip = {k: v for k, v in (old or {}).items() if k != "updateTime"}
    return strip == {k: v for k, v in new.items() if k != "updateTime"}


class _Locks(Protocol):
    dirty: set[tuple[str, str, str]]

    def get(self, kind: str, ns: str, name: str) -> asyncio.Lock: ...


class ProgressReader:
    """Reads rank 0's progress of one job and writes it into its status when it changed."""

    def __init__(
        self,
        api: KubeApi,
        timeout_s: float = 2.0,
        metrics: OperatorMetrics | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.api = api
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, connect=timeout_s)
        self.metrics = metrics
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.progress_reads.labels(outcome).inc()

    async def fetch(self, host: str, port: int) -> Any:
        """The decoded snapshot, or None (no answer in time, not JSON, too large)."""
        if self._session is None or self._session.closed:
            # no Authorization header: the API server's credentials never reach a pod
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        h = f"[{host}]" if ":" in host else host
        try:
            async with self._session.get(f"http://{h}:{port}{contract.PROGRESS_PATH}") as r:
                if r.status != 200:
                    return None
                raw = await r.content.read(MAX_BODY + 1)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        if len(raw) > MAX_BODY:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def refresh(self, ns: str, name: str) -> bool:
        """One read; True when ``status.progress`` was written."""
        body = await self.api.get("DistGNNJob", ns, name)
        status = (body or {}).get("status") or {}
        if body is None or status.get("phase") != "Running":
            return False
        pods = await self.api.list("Pod", ns, {"job-name": f"{name}-trainers"})
        addr = rank0_address(pods)
        new = progress_status(await self.fetch(*addr)) if addr else None
        if new is None:
            self._count("unavailable")
            return False
        if same_progress(status.get("progress"), new):
            self._count("unchanged")
            return False
        new["updateTime"] = self.clock().astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await self.api.patch(
            "DistGNNJob", ns, name, {"status": {"progress": new}}, subresource="status"
        )
        self._count("changed")
        return True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _running(status: Mapping[str, Any] | None, spec: Mapping[str, Any], **_: Any) -> bool:
    """A running job of this operator's (another controller's job may carry a status
    copied from elsewhere, MultiKueue's: it is never written)."""
    return (status or {}).get("phase") == "Running" and contract.managed_elsewhere(spec) is None


def register(
    registry: kopf.OperatorRegistry,
    reader: ProgressReader,
    locks: _Locks,
    run_pass: Callable[[str, str, str], Awaitable[None]],
    interval: float,
) -> None:
    """A timer per running DistGNNJob; it shares the resource's lock with the reconcile
    passes (skipping a tick while one runs) and runs a pass requested meanwhile."""
    kind = "DistGNNJob"

    @kopf.timer(
        contract.API_GROUP,
        contract.API_VERSION,
        "distgnnjobs",
        registry=registry,
        interval=interval,
        initial_delay=interval,
        when=_running,
    )
    async def progress(namespace: str | None, name: str, **_: Any) -> None:
        ns = namespace or "default"
        lock = locks.get(kind, ns, name)
        if lock.locked() or reader.api.closed:
            return
        async with lock:
            try:
                await reader.refresh(ns, name)
            except ApiError as e:
                log.debug(
                    "progress not written",
                    extra={"fields": {"namespace": ns, "name": name, "error": str(e)}},
                )
        if (kind, ns, name) in locks.dirty:
            await run_pass(kind, ns, name)

    @kopf.on.cleanup(registry=registry)
    async def close_progress(**_: Any) -> None:
        await reader.close()
