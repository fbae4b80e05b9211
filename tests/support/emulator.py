"""kmock's Kubernetes API emulator, made a little more like a real API server.

Shared by the operator's integration tests and ``bench/bench_operator.py`` so both run
the operator against the same stand-in (see ../shared/docs/TESTING.md for kmock's gaps).
"""

from __future__ import annotations

import datetime as dt
import gzip
import importlib.resources
import itertools
import uuid
from pathlib import Path
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
import yaml

from distgnn import contract

GV = f"{contract.API_GROUP}/{contract.API_VERSION}"
_RV = itertools.count(1)


class StampingEmulator(kmock.KubernetesEmulator):
    """Adds what a real API server stamps: uid, resourceVersion, generation, timestamps."""

    async def _handle(self, request: Any) -> Any:
        if request.resource is not None and isinstance(request.data, dict):
            rv = str(next(_RV))
            md = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                if not md.get("name") and md.get("generateName"):
                    md["name"] = md["generateName"] + uuid.uuid4().hex[:8]
                md.setdefault("uid", str(uuid.uuid4()))
                md.setdefault("generation", 1)
                md.setdefault(
                    "creationTimestamp", dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
                md["resourceVersion"] = rv
            elif request.action == kmock.action.UPDATE:
                md["resourceVersion"] = rv
                key = (request.resource, request.namespace, request.name)
                if "spec" in request.data and key in self.objects:
                    cur = self.objects[key]
                    if not cur.deleted:
                        md["generation"] = int(cur.get("metadata", {}).get("generation", 1)) + 1
        elif request.resource is not None and isinstance(request.data, list):
            # a JSON patch (kopf's finalizers) gets the new resourceVersion appended
            request.data.append(
                {"op": "add", "path": "/metadata/resourceVersion", "value": str(next(_RV))}
            )
        try:
            return await super()._handle(request)
        except jsonpatch.JsonPatchTestFailed as e:
            # the real API server answers a failed "test" operation with 422, not 500
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "status": "Failure",
                    "code": 422,
                    "reason": "Invalid",
                    "message": str(e),
                },
                status=422,
            )


def declare_resources(k: kmock.KubernetesEmulator) -> None:
    """Kubernetes' built-in resources plus our CRDs, with the status subresource."""
    # kmock's load_bundled() uses a deprecated importlib call (warnings are errors here)
    bundled = importlib.resources.files("kmock._internal").joinpath("resources.json.gz")
    k.resources.load_data(gzip.decompress(bundled.read_bytes()))
    for kind, plural in (("DistGNNJob", "distgnnjobs"), ("GraphServer", "graphservers")):
        k.resources[f"{GV}/{plural}"] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            subresources={"status"},
            verbs={"list", "watch", "get", "patch", "create", "delete"},
        )
    for gvp, kind in (
        ("batch/v1/jobs", "Job"),
        ("apps/v1/statefulsets", "StatefulSet"),
        ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
    ):
        k.resources[gvp] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            subresources={"status"},
            verbs={"list", "watch", "get", "patch", "create", "delete"},
        )


def write_kubeconfig(k: kmock.KubernetesEmulator, path: Path, token: str = "test-token") -> Path:
    """A kubeconfig pointing at the emulator (the operator logs in as in production)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "emu",
                "clusters": [{"name": "emu", "cluster": {"server": str(k.url).rstrip("/")}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
            }
        )
    )
    return path
