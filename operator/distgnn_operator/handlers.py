"""Thin kopf wiring: one level-based handler per kind, a resync timer, child watches,
the GraphServer finalizer, login and settings. All logic lives in :mod:`reconcile`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from distgnn import contract
from distgnn_operator import progress
from distgnn_operator.kube import ApiError
from distgnn_operator.reconcile import Emit, OperatorContext, Reconciler

GROUP, VERSION = contract.API_GROUP, contract.API_VERSION
MANAGED = {contract.LABEL_MANAGED_BY: contract.MANAGED_BY}
OWNER_KINDS = {"DistGNNJob", "GraphServer"}


@dataclass(frozen=True)
class HandlerSettings:
    """Timing knobs of the handlers and of kopf's watches."""

    resync_seconds: float = 30.0
    watch_server_timeout: int = 300
    watch_client_timeout: int = 330
    connect_timeout: float = 30.0
    request_timeout: float = 60.0
    progress_seconds: float = 5.0
    """How often a running job's rank-0 progress is read (:mod:`progress`)."""
    peering: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def make_settings(hs: HandlerSettings) -> kopf.OperatorSettings:
    """kopf settings: watch timeouts, annotation storage, our finalizer, peering."""
    st = kopf.OperatorSettings()
    st.watching.server_timeout = hs.watch_server_timeout
    st.watching.client_timeout = hs.watch_client_timeout
    st.watching.connect_timeout = hs.connect_timeout
    st.networking.request_timeout = hs.request_timeout
    st.persistence.finalizer = f"{contract.LABEL_PREFIX}/finalizer"
    st.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=contract.LABEL_PREFIX)
    st.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=contract.LABEL_PREFIX, key="last-handled-configuration"
    )
    st.posting.level = logging.INFO
    st.peering.standalone = hs.peering is None
    if hs.peering:
        st.peering.name = hs.peering
        st.peering.mandatory = True
    return st


class _Locks:
    """One asyncio lock per resource, so passes over the same resource never overlap.

    Requests arriving while a pass runs are coalesced into one more pass (``dirty``):
    a burst of child events costs two passes, not one per event.
    """

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str, str], asyncio.Lock] = {}
        self.dirty: set[tuple[str, str, str]] = set()

    def get(self, kind: str, ns: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((kind, ns, name), asyncio.Lock())

    def drop(self, kind: str, ns: str, name: str) -> None:
        self._locks.pop((kind, ns, name), None)


def register(registry: kopf.OperatorRegistry, octx: OperatorContext, hs: HandlerSettings) -> None:
    """Register every handler on ``registry`` (no kopf global state)."""
    rec = Reconciler(octx)
    locks = _Locks()
    log = logging.getLogger("distgnn_operator")

    async def run_pass(kind: str, ns: str, name: str) -> None:
        if octx.api.closed:  # stopping: nothing more to do
            return
        key = (kind, ns, name)
        lock = locks.get(kind, ns, name)
        if lock.locked():  # the running pass will go again
            locks.dirty.add(key)
            return
        async with lock:
            while True:
                locks.dirty.discard(key)
                await one_pass(kind, ns, name)
                if key not in locks.dirty or octx.api.closed:
                    return

    async def one_pass(kind: str, ns: str, name: str) -> None:
        try:
            body = await octx.api.get(kind, ns, name)
        except ApiError:
            if octx.api.closed:
                return
            raise
        if body is None:
            locks.drop(kind, ns, name)
            if octx.metrics is not None:
                octx.metrics.gone(kind, ns, name)
            return
        emit = _emitter(body)
        fn: Callable[[dict[str, Any], Emit], Awaitable[dict[str, Any]]] = (
            rec.reconcile_job if kind == "DistGNNJob" else rec.reconcile_graphserver
        )
        t0 = time.monotonic()
        try:
            st = await fn(body, emit)
        except ApiError as e:
            if octx.metrics is not None:
                octx.metrics.failed(kind, time.monotonic() - t0)
            if octx.api.closed:
                return
            log.warning(
                "reconcile failed, will retry",
                extra={"fields": {"kind": kind, "namespace": ns, "name": name, "error": str(e)}},
            )
            raise kopf.TemporaryError(str(e), delay=5) from e
        if octx.metrics is not None:
            octx.metrics.reconciled(kind, ns, name, time.monotonic() - t0, st.get("phase"))
        log.debug(
            "reconciled",
            extra={
                "fields": {
                    "kind": kind,
                    "namespace": ns,
                    "name": name,
                    "phase": st.get("phase"),
                }
            },
        )

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
        if info is not None:
            octx.api.set_credentials(info)
        return info

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await octx.api.close()

    for kind, plural in (("DistGNNJob", "distgnnjobs"), ("GraphServer", "graphservers")):
        _register_kind(registry, kind, plural, run_pass, hs)
    reader = progress.ProgressReader(octx.api, metrics=octx.metrics)
    progress.register(registry, reader, locks, run_pass, hs.progress_seconds)

    @kopf.on.delete(GROUP, VERSION, "graphservers", registry=registry, optional=False)
    async def graphserver_delete(namespace: str | None, name: str, **_: Any) -> None:
        jobs = await rec.attached_jobs(namespace or "default", name)
        if jobs:
            raise kopf.TemporaryError(f"still attached: {', '.join(jobs)}", delay=5)

    for group, version, plural in (("batch", "v1", "jobs"), ("apps", "v1", "statefulsets")):

        @kopf.on.event(group, version, plural, labels=MANAGED, registry=registry)
        async def child_event(body: kopf.Body, **_: Any) -> None:
            for ref in body.metadata.get("ownerReferences") or []:
                if ref.get("kind") in OWNER_KINDS and ref.get("controller"):
                    await run_pass(ref["kind"], body.metadata.namespace or "default", ref["name"])


def _register_kind(
    registry: kopf.OperatorRegistry,
    kind: str,
    plural: str,
    run_pass: Callable[[str, str, str], Awaitable[None]],
    hs: HandlerSettings,
) -> None:
    @kopf.on.event(GROUP, VERSION, plural, registry=registry)
    async def on_event(event: kopf.RawEvent, namespace: str | None, name: str, **_: Any) -> None:
        if event.get("type") != "DELETED":
            await run_pass(kind, namespace or "default", name)

    @kopf.timer(
        GROUP,
        VERSION,
        plural,
        registry=registry,
        interval=hs.resync_seconds,
        initial_delay=hs.resync_seconds,
    )
    async def resync(namespace: str | None, name: str, **_: Any) -> None:
        await run_pass(kind, namespace or "default", name)


def _emitter(body: dict[str, Any]) -> Emit:
    def emit(typ: str, reason: str, message: str) -> None:
        kopf.event(cast(kopf.Body, body), type=typ, reason=reason, message=message)
        logging.getLogger("distgnn_operator").info(
            message,
            extra={
                "fields": {
                    "kind": body.get("kind"),
                    "namespace": body["metadata"].get("namespace"),
                    "name": body["metadata"].get("name"),
                    "reason": reason,
                }
            },
        )

    return emit
