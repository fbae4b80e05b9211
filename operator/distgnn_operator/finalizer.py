"""kopf's finalizer (``distgnn.dev/finalizer``), put in place by the reconcile pass.

kopf (1.45) adds it only from its per-object event cycle: after the cycle's handlers ran,
it sends a JSON patch ``[test /metadata/resourceVersion == the event's version, add
/metadata/finalizers]`` (``kopf/_cogs/clients/patching.py``, ``patch_obj``); a failed test
(422: the object changed meanwhile) keeps the patch in memory until the object's *next*
watch event (``processing.py``: ``memory.remaining_patch``), no timer retries it. Our
``on.event`` handler runs a pass inside that cycle, so a pass that writes the status makes
kopf's patch of the same cycle fail, and under steady writes (passes, the progress timer,
other clients) every cycle can lose. Without the finalizer a GraphServer's deletion is not
held for its attached jobs, and kopf never stops a deleted resource's timers.

So every pass checks: a resource that is not being deleted and lacks the finalizer gets
it here, right after the pass read it (a window of one round trip, where kopf's spans its
cycle), with the same precondition, so no concurrent change of the list is lost. A failed
test means a newer version exists: its watch event runs the pass again (and the resync
does, without one). A pass over a resource that has it sends nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from distgnn import contract
from distgnn_operator.kube import ApiError, KubeApi

log = logging.getLogger("distgnn_operator")

FINALIZER = f"{contract.LABEL_PREFIX}/finalizer"
"""kopf's finalizer marker (``settings.persistence.finalizer``)."""


def finalizer_patch(
    body: dict[str, Any], finalizer: str = FINALIZER
) -> list[dict[str, Any]] | None:
    """The JSON patch that adds ``finalizer`` to ``body`` as read, or None when nothing is
    to be done: it is there, or the resource is being deleted (the API server refuses a
    new finalizer then)."""
    md = body.get("metadata") or {}
    have = list(md.get("finalizers") or [])
    if finalizer in have or md.get("deletionTimestamp"):
        return None
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": md.get("resourceVersion")},
        {"op": "add", "path": "/metadata/finalizers", "value": [*have, finalizer]},
    ]


async def ensure(api: KubeApi, kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """``body`` with the finalizer in place (patched, or as read when it was there or a
    newer version will run the pass again); None when the resource is gone."""
    ops = finalizer_patch(body)
    if ops is None:
        return body
    md = body["metadata"]
    try:
        return await api.json_patch(kind, md["namespace"], md["name"], ops)
    except ApiError as e:
        if e.status == 404:
            return None
        if e.status in (409, 422):  # changed meanwhile: its event runs the pass again
            log.debug(
                "finalizer not added yet: the resource changed",
                extra={"fields": {"kind": kind, "namespace": md["namespace"], "name": md["name"]}},
            )
            return body
        raise
