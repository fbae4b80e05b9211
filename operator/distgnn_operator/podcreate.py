"""Pods a child's controller cannot create, from its ``FailedCreate`` events. Pure.

A pod the API server refuses (a ``serviceAccountName`` or ``priorityClassName`` that does
not exist, a ResourceQuota exceeded, Pod Security admission, a webhook) is reported by
the StatefulSet and Job controllers only as a Warning Event with reason ``FailedCreate``
on the StatefulSet or Job: its owner would just wait. When a child has fewer pods than it
asks for (:func:`short_of_pods`) for longer than a grace period, the reconcile reads that
child's events (``involvedObject.uid``, read-only) and :func:`newest_failed_create` picks
the newest, whose message goes into the status (:func:`describe`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

FAILED_CREATE = "FailedCreate"
"""Event reason of the StatefulSet and Job controllers for a pod they could not create."""
GRACE_SECONDS = 10.0
"""How long a child may be short of pods before its events are read."""
RECHECK_SECONDS = 15.0
"""While a child stays short of pods, its events are read again this often (a pass)."""
MESSAGE_MAX = 600
_COMBINED = "(combined from similar events): "
_DONE = ("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget")


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def short_of_pods(obj: dict[str, Any]) -> bool:
    """Whether a StatefulSet or an unfinished, unsuspended batch Job has fewer pods than
    it asks for (its controller has not created them, or cannot)."""
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    if obj.get("kind") == "StatefulSet":
        have = max(_int(st.get("replicas")), _int(st.get("readyReplicas")))
        return _int(spec.get("replicas")) > have
    if obj.get("kind") != "Job" or spec.get("suspend"):
        return False
    for c in st.get("conditions") or []:
        if c.get("type") in _DONE and c.get("status") == "True":
            return False
    parallelism = _int(spec.get("parallelism")) if "parallelism" in spec else 1
    completions = _int(spec.get("completions")) if spec.get("completions") else parallelism
    want = min(parallelism, completions - _int(st.get("succeeded")))
    return want > _int(st.get("active")) + _int(st.get("terminating"))


def parse_time(v: Any) -> dt.datetime | None:
    """An API timestamp (``2026-11-25T14:00:00Z``) as an aware datetime (UTC when it
    names no zone); None when ``v`` is not one."""
    if not isinstance(v, str) or not v:
        return None
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def last_seen(ev: dict[str, Any]) -> dt.datetime:
    """When the event last happened: ``series.lastObservedTime``, ``lastTimestamp``,
    ``eventTime`` (events.k8s.io writers leave ``lastTimestamp`` empty), or its creation."""
    times = [
        (ev.get("series") or {}).get("lastObservedTime"),
        ev.get("lastTimestamp"),
        ev.get("eventTime"),
        ev.get("firstTimestamp"),
        (ev.get("metadata") or {}).get("creationTimestamp"),
    ]
    parsed = [t for t in map(parse_time, times) if t is not None]
    return max(parsed, default=_EPOCH)


def newest_failed_create(events: Iterable[dict[str, Any]], uid: str) -> dict[str, Any] | None:
    """The newest Warning ``FailedCreate`` event about the object ``uid`` (the list may hold
    others: a server that ignores the field selector, as the test emulator does)."""
    mine = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("uid") == uid
        and e.get("reason") == FAILED_CREATE
        and e.get("type", "Warning") == "Warning"
    ]
    return max(mine, key=last_seen, default=None)


def field_selector(uid: str) -> dict[str, str]:
    """The server-side filter of :func:`newest_failed_create` (core/v1 Event fields)."""
    return {"involvedObject.uid": uid, "reason": FAILED_CREATE}


def describe(kind: str, name: str, ev: dict[str, Any]) -> str:
    """One line: ``StatefulSet NAME cannot create its pods: MESSAGE``."""
    msg = " ".join(str(ev.get("message") or "").split())
    msg = msg.removeprefix(_COMBINED)
    if len(msg) > MESSAGE_MAX:
        msg = msg[: MESSAGE_MAX - 1] + "…"
    return f"{kind} {name} cannot create its pods: {msg or 'no message'}"
