"""kopf's peering objects (HA): the operator creates them, not Helm.

kopf never creates its peering object: a replica merge-patches its record into
``status`` of an object that must exist (a 404 is dropped silently, and then the replicas
never see each other: every one is active). The chart used to ship the object as a Helm
hook (the CR cannot be a plain template: its CRD comes with the same release), but Helm
deletes a hook's object before it creates it again (``before-hook-creation``, also Helm's
default policy) on every ``helm upgrade``, under running replicas: the recreated object has
no records, the standby replicas read that as "no peer of higher priority" and resume, and
every replica stays active until the next keep-alive (``lifetime`` minus 5 to 10 s). So each
replica creates the object(s) at startup, before kopf's peering starts, when missing (a 409
is the usual answer), and nothing else ever deletes them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from distgnn_operator.kube import ApiError, KubeApi

log = logging.getLogger("distgnn_operator")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def peering_objects(name: str, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The peering objects kopf uses for ``--peering name``: one ClusterKopfPeering when
    the operator watches every namespace, else one KopfPeering per watched namespace
    (kopf's glob patterns are skipped: no single namespace to create it in)."""
    if not namespaces:
        return [
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "ClusterKopfPeering",
                "metadata": {"name": name},
            }
        ]
    return [
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": name, "namespace": ns},
        }
        for ns in dict.fromkeys(namespaces)
        if _DNS_LABEL.match(ns)
    ]


async def ensure(api: KubeApi, name: str, namespaces: Sequence[str]) -> list[str]:
    """Create the missing peering objects; the ones created (``KIND [NS/]NAME``).

    A 409 (it exists) is the usual answer. Raises ApiError for an answer that may pass
    (no answer, 5xx, 429, and 404: the peering CRD, installed by the same ``helm install``,
    may not be served yet); a 403 (RBAC of an older chart) is logged: kopf then runs with
    the object if somebody else made it, else without peers.
    """
    created = []
    for obj in peering_objects(name, namespaces):
        md = obj["metadata"]
        what = f"{obj['kind']} {md.get('namespace', '') + '/' if 'namespace' in md else ''}{name}"
        try:
            await api.create(obj)
        except ApiError as e:
            if e.status == 409:
                continue
            if e.status == 403:
                log.error(
                    "cannot create the peering object: replicas will not see each other",
                    extra={"fields": {"object": what, "error": str(e)}},
                )
                continue
            raise
        created.append(what)
        log.info("created the peering object", extra={"fields": {"object": what}})
    return created
