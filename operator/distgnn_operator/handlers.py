"""Thin kopf wiring: one level-based handler per kind, a resync timer, child watches,
requeues at due times, pokes between GraphServers and their jobs, the GraphServer
finalizer, login and settings. All logic lives in :mod:`reconcile`."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from distgnn import contract
from distgnn_operator import finalizer, peering, progress
from distgnn_operator import multikueue as mk
from distgnn_operator.kube import ApiError
from distgnn_operator.reconcile import Emit, Key, OperatorContext, PassResult, Reconciler

GROUP, VERSION = contract.API_GROUP, contract.API_VERSION
MANAGED = {contract.LABEL_MANAGED_BY: contract.MANAGED_BY}
OWNER_KINDS = {"DistGNNJob", "GraphServer"}
CHILD_RESOURCES = (
    ("batch", "v1", "jobs"),
    ("apps", "v1", "statefulsets"),
    ("", "v1", "services"),
    ("networking.k8s.io", "v1", "networkpolicies"),
)
"""Children whose changes (a deletion included) re-run their owner's pass at once. Not the
token Secrets: watching them needs list/watch on every Secret of the namespaces (RBAC cannot
narrow a watch by label or name); a deleted one is recreated by the next pass (resync)."""
KUEUE_RESOURCES = (("kueue.x-k8s.io", "v1beta1", "workloads"),)
"""Also watched with ``--kueue``: a job's Workload (its admission, eviction) re-runs its pass."""


def child_resources(kueue: bool) -> tuple[tuple[str, str, str], ...]:
    """The children watched (:data:`CHILD_RESOURCES`, and Workloads with ``--kueue``)."""
    return CHILD_RESOURCES + (KUEUE_RESOURCES if kueue else ())


REPORTING_COMPONENT = "distgnn-operator"
RECONCILE_FAILED = "ReconcileFailed"
"""Warning event reason of a pass that failed (posted again only when the error changes)."""
KOPF_EVENTS_OFF = logging.CRITICAL + 10
"""kopf's posting level above every log level: no kopf log record becomes an Event."""
RETRY_SECONDS = 5.0
MIN_REQUEUE_SECONDS = 0.05


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
    namespaces: tuple[str, ...] = ()
    """Watched namespaces (empty: all); where the peering objects go (:mod:`peering`)."""
    kueue: bool = False
    """Kueue integration (``--kueue``): Workloads are watched too."""
    extra: dict[str, Any] = field(default_factory=dict)


def make_settings(hs: HandlerSettings) -> kopf.OperatorSettings:
    """kopf settings: watch timeouts, annotation storage, our finalizer, peering."""
    st = kopf.OperatorSettings()
    st.watching.server_timeout = hs.watch_server_timeout
    st.watching.client_timeout = hs.watch_client_timeout
    st.watching.connect_timeout = hs.connect_timeout
    st.networking.request_timeout = hs.request_timeout
    st.persistence.finalizer = finalizer.FINALIZER
    st.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=contract.LABEL_PREFIX)
    st.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=contract.LABEL_PREFIX, key="last-handled-configuration"
    )
    # Events: ours (kopf.event) only, from "distgnn-operator". kopf's log-derived events
    # (handler succeeded / failed / retrying) would post a new Event on every failing pass
    # and every retry; a failing pass posts one ReconcileFailed Warning per new error instead
    st.posting.level = KOPF_EVENTS_OFF
    st.posting.reporting_component = REPORTING_COMPONENT
    st.posting.reporting_instance = os.environ.get("POD_NAME") or socket.gethostname()
    st.posting.event_name_prefix = f"{REPORTING_COMPONENT}-"
    managed = f"{contract.LABEL_MANAGED_BY}={contract.MANAGED_BY}"
    for group, version, plural in child_resources(hs.kueue):  # only our children stream
        st.watching.label_selectors[group, version, plural] = managed
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
        self._locks: dict[Key, asyncio.Lock] = {}
        self.dirty: set[Key] = set()

    def get(self, kind: str, ns: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((kind, ns, name), asyncio.Lock())

    def drop(self, kind: str, ns: str, name: str) -> None:
        self._locks.pop((kind, ns, name), None)


class _Failures:
    """The last error of each resource's failing passes, so that a pass failing the same
    way again (every retry and resync) posts no new event."""

    def __init__(self) -> None:
        self._last: dict[Key, str] = {}

    def failed(self, key: Key, error: str) -> bool:
        """Record a failed pass; True when its error is new for the resource."""
        new = self._last.get(key) != error
        self._last[key] = error
        return new

    def ok(self, key: Key) -> None:
        self._last.pop(key, None)


class _Wakers:
    """Wakes a held GraphServer deletion when a pass of that GraphServer is asked for (a
    job attached to it finished or was deleted)."""

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}

    async def wait(self, key: Key, timeout: float) -> None:
        ev = self._events.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self._events.pop(key, None)

    def wake(self, key: Key) -> None:
        ev = self._events.get(key)
        if ev is not None:
            ev.set()


class _Scheduler:
    """Passes due later (deadline, TTL, GraphServer wait) and passes of other resources
    (pokes), run as tasks on kopf's loop; one timer per resource, the earliest wins."""

    def __init__(self) -> None:
        self._timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def at(self, key: Key, delay: float, run: Callable[[Key], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, MIN_REQUEUE_SECONDS)
        cur = self._timers.get(key)
        if cur is not None and cur[0] <= when:
            return
        if cur is not None:
            cur[1].cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.spawn(run(key))

        self._timers[key] = (when, loop.call_at(when, fire))

    def cancel(self, key: Key) -> None:
        cur = self._timers.pop(key, None)
        if cur is not None:
            cur[1].cancel()

    async def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _namespace_terminating(e: ApiError) -> bool:
    """403 "... because it is being terminated": the namespace is going away, not an error."""
    return e.status == 403 and "being terminated" in str(e)


def register(registry: kopf.OperatorRegistry, octx: OperatorContext, hs: HandlerSettings) -> None:
    """Register every handler on ``registry`` (no kopf global state)."""
    rec = Reconciler(octx)
    locks = _Locks()
    sched = _Scheduler()
    failures = _Failures()
    wakers = _Wakers()
    keeper = finalizer.FinalizerKeeper()
    foreign: set[Key] = set()  # jobs of another controller (spec.managedBy), logged
    log = logging.getLogger("distgnn_operator")

    async def run_pass(kind: str, ns: str, name: str) -> None:
        if octx.api.closed:  # stopping: nothing more to do
            return
        key = (kind, ns, name)
        wakers.wake(key)
        lock = locks.get(*key)
        if lock.locked():  # the running pass will go again
            locks.dirty.add(key)
            return
        async with lock:
            while True:
                locks.dirty.discard(key)
                await one_pass(key)
                if key not in locks.dirty or octx.api.closed:
                    return

    async def run_key(key: Key) -> None:
        try:
            await run_pass(*key)
        except kopf.TemporaryError:
            sched.at(key, RETRY_SECONDS, run_key)  # a timer or poke has no kopf retry

    async def one_pass(key: Key) -> None:
        kind, ns, name = key
        try:
            body = await octx.api.get(kind, ns, name)
        except ApiError:
            if octx.api.closed:
                return
            raise
        if body is None:
            locks.drop(*key)
            sched.cancel(key)
            rec.forget(key)
            keeper.forget(*key)
            failures.ok(key)
            foreign.discard(key)
            if octx.metrics is not None:
                octx.metrics.gone(kind, ns, name)
            return
        # MultiKueue's job on a manager cluster: its Workload only (no write to the job)
        dispatched = kind == "DistGNNJob" and octx.kueue and mk.dispatched(body)
        if not dispatched and not ours(body.get("spec")):  # another controller's: no write
            if key not in foreign:
                foreign.add(key)
                log.debug(
                    "managed by another controller, left alone",
                    extra={"fields": {**_f(key), "managedBy": contract.job_manager(body["spec"])}},
                )
            return
        emit = _emitter(body)
        fn: Callable[[dict[str, Any], Emit], Awaitable[PassResult]] = (
            rec.reconcile_job if kind == "DistGNNJob" else rec.reconcile_graphserver
        )
        t0 = time.monotonic()
        try:
            if dispatched:  # no finalizer either: MultiKueue copies the job's metadata
                res = await rec.reconcile_dispatched(body, emit)
            else:
                fresh = await keeper.ensure(octx.api, kind, body)  # kopf's may never land
                if fresh is None:  # gone: its DELETED event ends it
                    return
                res = await fn(fresh, emit)
        except ApiError as e:
            if octx.metrics is not None:
                octx.metrics.failed(kind, time.monotonic() - t0)
            if octx.api.closed:
                return
            if _namespace_terminating(e):
                log.debug("namespace terminating, pass skipped", extra={"fields": _f(key)})
                return
            log.warning(
                "reconcile failed, will retry",
                extra={"fields": {**_f(key), "error": str(e)}},
            )
            if failures.failed(key, str(e)):
                emit("Warning", RECONCILE_FAILED, f"{str(e)[:1000]} (retried every pass)")
            if dispatched:  # no resync timer (kopf's needs its finalizer): retry here
                sched.at(key, RETRY_SECONDS, run_key)
            raise kopf.TemporaryError(str(e), delay=RETRY_SECONDS) from e
        except Exception as e:  # a bug: kopf logs it; the event says it once
            if failures.failed(key, repr(e)):
                emit("Warning", RECONCILE_FAILED, f"{repr(e)[:1000]} (see the operator's log)")
            raise
        failures.ok(key)
        if octx.metrics is not None:
            octx.metrics.reconciled(kind, ns, name, time.monotonic() - t0, res.status.get("phase"))
        if res.requeue_after is not None:
            sched.at(key, res.requeue_after, run_key)
        for other in res.poke:
            sched.spawn(run_key(other))
        log.debug("reconciled", extra={"fields": {**_f(key), "phase": res.status.get("phase")}})

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        def again() -> kopf.ConnectionInfo | None:
            return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

        info = again()
        if info is not None:
            octx.api.set_credentials(info)
            octx.api.relogin = again
        return info

    if hs.peering:
        peering_name = hs.peering

        @kopf.on.startup(registry=registry)
        async def create_peering(settings: kopf.OperatorSettings, **_: Any) -> None:
            """The peering object(s) exist before kopf's peering starts (it starts after
            the startup handlers; so does kopf's login, hence this one's own)."""
            info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
                settings=settings
            )
            if info is not None:
                octx.api.set_credentials(info)
            try:
                await peering.ensure(octx.api, peering_name, hs.namespaces)
            except ApiError as e:
                raise kopf.TemporaryError(str(e), delay=RETRY_SECONDS) from e

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await sched.close()
        await octx.api.close()

    for kind, plural in (("DistGNNJob", "distgnnjobs"), ("GraphServer", "graphservers")):
        _register_kind(registry, kind, plural, run_pass, hs)
    reader = progress.ProgressReader(octx.api, metrics=octx.metrics)
    progress.register(registry, reader, locks, run_pass, hs.progress_seconds)

    @kopf.on.event(GROUP, VERSION, "distgnnjobs", registry=registry)
    async def job_gone(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        """A deleted job leaves its GraphServer's attachedJobs at once."""
        if event.get("type") != "DELETED":
            return
        ref = ((body.get("spec") or {}).get("graph") or {}).get("graphServer") or {}
        if ref.get("name"):
            sched.spawn(run_key(("GraphServer", body.metadata.namespace or "default", ref["name"])))

    @kopf.on.delete(GROUP, VERSION, "graphservers", registry=registry, optional=False)
    async def graphserver_delete(namespace: str | None, name: str, **_: Any) -> None:
        """Hold the deletion (kopf's finalizer) while jobs are attached. The handler waits
        rather than failing and being retried: each kopf retry writes its progress
        annotation (and an event), a write every few seconds while nothing changes. It
        rechecks when a pass of the GraphServer is asked for (an attached job finished or
        was deleted) and at every resync; each check only reads, unless the jobs changed."""
        key = ("GraphServer", namespace or "default", name)
        while True:
            try:
                body = await octx.api.get(*key)
                if body is None:
                    return
                jobs = await rec.graphserver_terminating(body, _emitter(body))
            except ApiError as e:
                if octx.api.closed:
                    return
                raise kopf.TemporaryError(str(e), delay=RETRY_SECONDS) from e
            if not jobs:
                return
            await wakers.wait(key, hs.resync_seconds)

    for group, version, plural in child_resources(hs.kueue):

        @kopf.on.event(group, version, plural, labels=MANAGED, registry=registry)
        async def child_event(body: kopf.Body, **_: Any) -> None:
            for ref in body.metadata.get("ownerReferences") or []:
                if ref.get("kind") in OWNER_KINDS and ref.get("controller"):
                    await run_pass(ref["kind"], body.metadata.namespace or "default", ref["name"])


def ours(spec: Any) -> bool:
    """A resource this operator reconciles: a DistGNNJob whose ``spec.managedBy`` names
    another controller (Kueue's MultiKueue) is not (a GraphServer always is)."""
    return contract.managed_elsewhere(spec) is None


def when_ours(spec: kopf.Spec, **_: Any) -> bool:
    """kopf filter of the handlers that would write (timers): only our resources."""
    return ours(spec)


def _f(key: Key) -> dict[str, str]:
    return {"kind": key[0], "namespace": key[1], "name": key[2]}


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
        when=when_ours,  # else kopf puts its finalizer (timers need one) on another's job
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
