"""kmock's Kubernetes API emulator, made a little more like a real API server.

Shared by the operator's integration tests and ``bench/bench_operator.py`` so both run
the operator against the same stand-in (see ../shared/docs/TESTING.md for kmock's gaps).
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import importlib.resources
import itertools
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
import yaml
from tests.support.apiserver_defaults import apply_defaults

from distgnn import contract
from distgnn_operator.quantity import QuantityError, canonical

GV = f"{contract.API_GROUP}/{contract.API_VERSION}"
_RV = itertools.count(1)


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        },
        status=code,
    )


def _canonical_quantity(v: Any) -> Any:
    try:
        return canonical(str(v))
    except QuantityError:
        return v


OMIT_EMPTY = {"env": ("value",), "tolerations": ("key", "operator", "value", "effect")}
"""List fields whose items' string fields Go's encoder drops when empty."""


def server_rewrites(obj: dict[str, Any]) -> None:
    """What the API server rewrites in a stored object (documented behaviour):

    * quantities in canonical form (``resources.requests``/``limits``, ``emptyDir.sizeLimit``:
      ``0.5`` -> ``500m``, ``2048Mi`` -> ``2Gi``);
    * a Secret's ``stringData`` merged into base64 ``data`` (write-only field);
    * ``fieldRef.apiVersion`` defaulted to ``v1``;
    * an env var's ``value: ""`` and a toleration's empty strings dropped (``omitempty``),
      on every write, so a client that sends them sees a change on every read.
    """
    if obj.get("kind") == "Secret" or "stringData" in obj:
        plain = obj.pop("stringData", None) or {}
        data = obj.setdefault("data", {}) if plain else obj.get("data")
        for k, v in plain.items():
            data[k] = base64.b64encode(str(v).encode()).decode()

    def walk(x: Any, key: str | None = None) -> None:
        if isinstance(x, dict):
            for k, v in list(x.items()):
                if k in ("requests", "limits") and isinstance(v, dict):
                    x[k] = {q: _canonical_quantity(n) for q, n in v.items()}
                elif k == "sizeLimit" and v is not None:
                    x[k] = _canonical_quantity(v)
                elif k == "fieldRef" and isinstance(v, dict):
                    v.setdefault("apiVersion", "v1")
                elif k in OMIT_EMPTY and isinstance(v, list):
                    for item in v:  # Go's encoder drops an omitempty string holding ""
                        for field in OMIT_EMPTY[k]:
                            if isinstance(item, dict) and item.get(field) == "":
                                del item[field]
                    walk(v, k)
                else:
                    walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)

    walk(obj.get("spec"))


CRD_GROUPS = (contract.API_GROUP, "kueue.x-k8s.io")
"""Groups of custom resources: the API server neither defaults nor rewrites their fields."""
STATUS_SUBRESOURCE = {"distgnnjobs", "graphservers", "jobs", "statefulsets", "workloads"}
"""Plurals served with the status subresource whose status the operator reads or writes."""


def status_subresource(data: dict[str, Any], action: Any, subresource: str | None) -> None:
    """What the API server keeps of a write to a resource with the status subresource: a
    create's ``status`` is dropped (the CRD strategy's and the Job/StatefulSet strategies'
    PrepareForCreate), a write to the resource ignores ``status``, and a write to
    ``/status`` ignores everything else, metadata included (PrepareForUpdate of the status
    strategies), so a client that sent a field to the wrong endpoint would see it lost."""
    if subresource == "status":
        for k in [k for k in data if k not in ("status", "apiVersion", "kind")]:
            del data[k]
    elif subresource is None and action in (kmock.action.CREATE, kmock.action.UPDATE):
        data.pop("status", None)


OPERATOR_AGENTS = ("kopf/", "distgnn-operator/")
"""User-Agent prefixes of the operator's requests (kopf's and its own client's); the tests'
own requests carry aiohttp's."""


def rbac_verb(method: str, named: bool, params: Any) -> str:
    """The RBAC verb the API server authorizes a request as (``GET`` of a collection is
    ``list``, or ``watch`` with ``?watch=``; ``DELETE`` of one is ``delete``)."""
    if method == "GET":
        if (params or {}).get("watch") in ("true", "1", "True"):
            return "watch"
        return "get" if named else "list"
    if method == "DELETE" and not named:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


@dataclass(frozen=True, order=True)
class Request:
    """What RBAC authorizes for one request of the operator: ``resource`` is the plural,
    or ``plural/subresource``."""

    group: str
    resource: str
    verb: str


@dataclass(frozen=True)
class Write:
    """A write the emulator served (for asserting that a settled resource sees none)."""

    method: str
    path: str
    plural: str
    name: str | None
    body: Any
    agent: str = ""
    """the client's User-Agent (``kopf/...``, ``distgnn-operator/...``, the tests' own)"""


KOPF_PREFIX = contract.LABEL_PREFIX
"""kopf's annotations of our resources (its progress storage prefix)."""


def kopf_finalizer_attempt(w: Write) -> bool:
    """kopf's JSON patch adding its finalizer (resources are created without it, as users
    do; a pass adds it: test_operator_finalizer_emulator.py), sent for an event older than the pass
    that added it (kopf handles every event in turn): tested against that event's
    resourceVersion, it fails (422) and changes nothing. Counted only after the
    finalizer is in place (see ``passes_in_quiet`` in test_operator_settled.py)."""
    if not (w.method == "PATCH" and isinstance(w.body, list) and w.agent.startswith("kopf/")):
        return False
    paths = {op.get("path") for op in w.body if op.get("op") != "test"}
    return paths <= {"/metadata/finalizers", "/metadata/resourceVersion"}


def kopf_diffbase(w: Write) -> bool:
    """kopf's one-time merge patch of a GraphServer's diff-base annotation and marker (it
    has a delete handler); under load it can land after the first passes."""
    md = w.body.get("metadata") if isinstance(w.body, dict) else None
    keys = set((md or {}).get("annotations") or {})
    return (
        w.method == "PATCH"
        and isinstance(w.body, dict)
        and set(w.body) == {"metadata"}
        and set(md or {}) <= {"annotations", "resourceVersion"}
        and bool(keys)
        and keys <= {f"{KOPF_PREFIX}/last-handled-configuration", f"{KOPF_PREFIX}/kopf-managed"}
    )


class StampingEmulator(kmock.KubernetesEmulator):
    """Adds what a real API server stamps (uid, resourceVersion, generation, timestamps) and
    rewrites (:func:`server_rewrites`); answers ``/version`` with :attr:`server_version`;
    records writes; answers 403 for ``forbidden``
    resources (RBAC) and 404 for ``unserved`` ones (CRD not installed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[Write] = []
        self.requests: set[Request] = set()
        """every (group, resource, verb) the operator (kopf or its client) asked for"""
        self.calls: list[tuple[str, str]] = []
        """(method, path) of every request of the operator's own client, in order"""
        self.watches: list[str] = []
        """the plural of every watch request of the operator, in order"""
        self.forbidden: set[str] = set()
        """plurals answered with 403, as RBAC does for resources the operator may not use"""
        self.racing: set[str] = set()
        """plurals whose objects another client writes just before each of kopf's JSON
        patches arrives (the worst interleaving of a concurrent update): kopf's patch,
        tested against the version it handled, then always fails (422)"""
        self.races = 0
        """how many such writes were made"""
        self.unserved: set[str] = {"podgroups"}
        """plurals answered with 404, as for a CRD that is not installed (kmock itself would
        store any kind; by default the cluster has no scheduler-plugins PodGroup CRD)"""

    server_version = "1.29"
    """What ``GET /version`` answers (``major.minor``; kmock's own answer is a fixed 1.26)."""

    async def _serve_server_version(self, request: Any) -> dict[str, str]:
        major, minor = self.server_version.split(".")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{self.server_version}.0",
            "platform": "linux/amd64",
        }

    async def _race(self, path: str) -> None:
        """Another client's write (an annotation) to the object at ``path``."""
        self.races += 1
        body = {"metadata": {"annotations": {"example.com/race": str(self.races)}}}
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.request("PATCH", path, data=json.dumps(body), headers=headers) as r:
            assert r.status == 200, await r.text()

    def writes_since(self, n: int, plural: str | None = None) -> list[Write]:
        return [w for w in self.writes[n:] if plural is None or w.plural == plural]

    async def _handle(self, request: Any) -> Any:
        try:
            return await self._serve(request)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        """Drop a served request from kmock's history (``_requests``). kmock finds the
        reaction for each request by testing its membership in each reaction's view, a scan
        of the whole history, so with the history kept a test's n requests cost O(n²): most
        of a long test's time. Nothing here reads that history (writes and calls are
        recorded above); in-flight requests (watches) stay in it, as kmock needs."""
        for i in range(len(self._requests) - 1, -1, -1):
            if self._requests[i] is request:
                del self._requests[i]
                return

    async def _serve(self, request: Any) -> Any:
        plural = getattr(request.resource, "plural", None) or ""
        if request.resource is not None and plural in self.forbidden:
            return _status(403, "Forbidden", f"{plural} is forbidden: RBAC")
        if request.resource is not None and plural in self.unserved:
            return _status(404, "NotFound", "the server could not find the requested resource")
        method = str(getattr(request.method, "value", request.method)).upper()
        agent = (getattr(request, "headers", None) or {}).get("User-Agent", "")
        if plural in self.racing and isinstance(request.data, list) and agent.startswith("kopf/"):
            await self._race(request.url.path)
        if agent.startswith("distgnn-operator/"):
            self.calls.append((method, request.url.path))
        if plural and agent.startswith(OPERATOR_AGENTS):  # not discovery (/apis/...)
            sub = getattr(request, "subresource", None)
            verb = rbac_verb(method, bool(request.name), getattr(request, "params", None))
            self.requests.add(
                Request(
                    getattr(request.resource, "group", None) or "",
                    f"{plural}/{sub}" if sub else plural,
                    verb,
                )
            )
            if verb == "watch":
                self.watches.append(plural)
        if request.resource is not None and method in ("POST", "PATCH", "PUT", "DELETE"):
            self.writes.append(
                Write(
                    method,
                    request.url.path,
                    plural,
                    request.name,
                    request.data,
                    agent,
                )
            )
        if plural in STATUS_SUBRESOURCE and isinstance(request.data, dict):
            status_subresource(request.data, request.action, request.subresource)
        # built-in kinds only: CRD fields (ours, Kueue's) are kept as sent
        builtin = getattr(request.resource, "group", None) not in CRD_GROUPS
        if request.resource is not None and isinstance(request.data, dict) and builtin:
            server_rewrites(request.data)
            if request.action == kmock.action.CREATE and not request.subresource:
                apply_defaults(request.data)  # what SetDefaults_* add, as a real server
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
            return _status(422, "Invalid", str(e))


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
    k.resources["kueue.x-k8s.io/v1beta1/resourceflavors"] = kmock.ResourceInfo(
        kind="ResourceFlavor",  # Kueue's cluster-scoped CRD
        namespaced=False,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    )
    for gvp, kind in (
        ("kueue.x-k8s.io/v1beta1/workloads", "Workload"),  # Kueue's CRD
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
