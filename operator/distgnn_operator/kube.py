"""A small async Kubernetes API client on aiohttp, using kopf's credentials.

Why not the ``kubernetes`` package: it is synchronous (every call would block kopf's
event loop or need a thread), and it would log in separately. This client reuses the
:class:`kopf.ConnectionInfo` that kopf's login produced (service account in a pod,
kubeconfig outside), so production and the emulator tests share one code path.
Every request has a timeout; patches are JSON merge patches (valid for every kind), but
for the one JSON patch (:meth:`KubeApi.json_patch`, kopf's finalizer: :mod:`finalizer`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from distgnn import __version__, contract

RESOURCES: dict[str, tuple[str, str]] = {
    "Secret": ("api/v1", "secrets"),
    "Service": ("api/v1", "services"),
    "Pod": ("api/v1", "pods"),
    "Event": ("api/v1", "events"),
    "Job": ("apis/batch/v1", "jobs"),
    "StatefulSet": ("apis/apps/v1", "statefulsets"),
    "NetworkPolicy": ("apis/networking.k8s.io/v1", "networkpolicies"),
    "PodGroup": ("apis/scheduling.x-k8s.io/v1alpha1", "podgroups"),
    "Workload": ("apis/kueue.x-k8s.io/v1beta1", "workloads"),
    "ResourceFlavor": ("apis/kueue.x-k8s.io/v1beta1", "resourceflavors"),
    "DistGNNJob": (f"apis/{contract.API_GROUP}/{contract.API_VERSION}", "distgnnjobs"),
    "GraphServer": (f"apis/{contract.API_GROUP}/{contract.API_VERSION}", "graphservers"),
    "KopfPeering": ("apis/kopf.dev/v1", "kopfpeerings"),
    "ClusterKopfPeering": ("apis/kopf.dev/v1", "clusterkopfpeerings"),
}
"""kind -> (API prefix, plural); namespaced but for :data:`CLUSTER_SCOPED`."""
CLUSTER_SCOPED = frozenset({"ClusterKopfPeering", "ResourceFlavor"})


USER_AGENT = f"distgnn-operator/{__version__}"
"""Names the operator's own requests in the API server's audit log (kopf's are ``kopf/...``)."""


class ApiError(Exception):
    """A non-2xx answer of the API server; status 0: no answer (connection failed, or the
    client is closed because the operator is stopping)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class Credentials:
    """The parts of kopf's ConnectionInfo this client uses."""

    server: str
    token: str | None = None
    scheme: str | None = None
    ca_path: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    certificate_path: str | None = None
    private_key_path: str | None = None

    @classmethod
    def from_kopf(cls, info: Any, tmpdir: str) -> Credentials:
        """Convert a ConnectionInfo; inline client certificates go to private temp files."""

        def _file(data: Any, name: str) -> str | None:
            if not data:
                return None
            raw = data if isinstance(data, bytes) else data.encode()
            if not raw.lstrip().startswith(b"-----"):
                raw = base64.b64decode(raw)
            path = os.path.join(tmpdir, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            return path

        ca_data = info.ca_data
        if isinstance(ca_data, bytes):
            ca_data = ca_data.decode()
        if ca_data and "-----" not in ca_data:
            ca_data = base64.b64decode(ca_data).decode()
        return cls(
            server=str(info.server).rstrip("/"),
            token=info.token,
            scheme=info.scheme,
            ca_path=os.fsdecode(info.ca_path) if info.ca_path else None,
            ca_data=ca_data or None,
            insecure=bool(info.insecure),
            certificate_path=os.fsdecode(info.certificate_path)
            if info.certificate_path
            else _file(info.certificate_data, "client.crt"),
            private_key_path=os.fsdecode(info.private_key_path)
            if info.private_key_path
            else _file(info.private_key_data, "client.key"),
        )


@dataclass(frozen=True, order=True)
class ServerVersion:
    """The API server's ``major.minor`` (``GET /version``), comparable as a tuple."""

    major: int
    minor: int
    git_version: str = ""

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> ServerVersion:
        """From a ``/version`` answer; managed clusters write minors like ``"29+"``, and
        ``gitVersion`` (``v1.29.3-eks-...``) is the fallback. Raises ValueError."""
        git = str(body.get("gitVersion") or "")
        digits = [re.match(r"\d+", str(body.get(k) or "")) for k in ("major", "minor")]
        if digits[0] and digits[1]:
            return cls(int(digits[0].group()), int(digits[1].group()), git)
        m = re.match(r"v?(\d+)\.(\d+)", git)
        if m is None:
            raise ValueError(f"no Kubernetes version in {dict(body)!r}"[:300])
        return cls(int(m.group(1)), int(m.group(2)), git)

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def __str__(self) -> str:
        return self.git_version or f"v{self.major}.{self.minor}"


class KubeApi:
    """CRUD on the kinds in :data:`RESOURCES`. Create one per operator."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(10.0, timeout_s))
        self._creds: Credentials | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._closed = False
        self._version: ServerVersion | None = None
        self.on_error: Callable[[int], None] | None = None
        """Called with the status of every error answer (0: none); the metrics hook."""
        self.relogin: Callable[[], Any] | None = None
        """Logs in again (a kopf ConnectionInfo, or None) after a 401: set by the login
        handler to the login it made, so a request whose token expired is sent once more
        with the token the kubelet has rewritten into the service account's file."""

    def set_credentials(self, info: Any) -> None:
        """Use kopf's ConnectionInfo (called from the login handler)."""
        if self._tmp is None:  # private folder for inline client certificates
            self._tmp = tempfile.TemporaryDirectory(prefix="distgnn-operator-")
        self._creds = Credentials.from_kopf(info, self._tmp.name)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Close the session; later calls raise ApiError (the operator is stopping)."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _ssl(self, c: Credentials) -> ssl.SSLContext | bool:
        if not c.server.startswith("https"):
            return False
        if c.insecure:
            return False
        ctx = ssl.create_default_context(cafile=c.ca_path, cadata=c.ca_data)
        if c.certificate_path and c.private_key_path:
            ctx.load_cert_chain(c.certificate_path, c.private_key_path)
        return ctx

    def _sess(self) -> tuple[aiohttp.ClientSession, Credentials]:
        if self._closed:
            raise ApiError(0, "client closed: the operator is stopping")
        if self._creds is None:
            raise ApiError(0, "not logged in yet")
        if self._session is None or self._session.closed:
            # no Authorization here: it is set per request (:meth:`_auth`), from the
            # credentials of kopf's latest login
            headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
            conn = aiohttp.TCPConnector(ssl=self._ssl(self._creds), limit=32)
            self._session = aiohttp.ClientSession(
                headers=headers, timeout=self._timeout, connector=conn
            )
        return self._session, self._creds

    def _relogin(self) -> bool:
        """New credentials from :attr:`relogin` (kopf's login functions); True if any."""
        if self.relogin is None:
            return False
        try:
            info = self.relogin()
        except Exception:  # no new credentials: the 401 stands
            return False
        if info is None:
            return False
        self.set_credentials(info)
        return True

    def _auth(self) -> dict[str, str]:
        """The Authorization header of the current credentials. A service-account token
        is short-lived (bound tokens: an hour where the API server does not extend them;
        the kubelet rewrites the file), and kopf logs in again when its own requests get
        401, calling :meth:`set_credentials`: a header fixed on the session at the first
        request would keep the expired token, and every pass would fail with 401."""
        c = self._creds
        return {"Authorization": f"{c.scheme or 'Bearer'} {c.token}"} if c and c.token else {}

    def _url(self, kind: str, ns: str, name: str | None = None, sub: str | None = None) -> str:
        prefix, plural = RESOURCES[kind]
        _, c = self._sess()
        where = "" if kind in CLUSTER_SCOPED else f"/namespaces/{quote(ns)}"
        url = f"{c.server}/{prefix}{where}/{plural}"
        if name:
            url += f"/{quote(name)}"
        if sub:
            url += f"/{sub}"
        return url

    async def _call(
        self,
        method: str,
        url: str,
        body: Any = None,
        ctype: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        s, _ = self._sess()
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": ctype} if body is not None else {}
        try:
            for retry in (False, True):
                headers.update(self._auth())
                async with s.request(method, url, data=data, headers=headers, params=params) as r:
                    text = await r.text()
                # an expired token: log in again (the kubelet has rewritten the token file
                # well before), once, rather than wait for kopf's next 401
                if r.status != 401 or retry or not self._relogin():
                    break
        except (TimeoutError, aiohttp.ClientError) as e:
            # a connection failure (or the session closed under a request while stopping):
            # an ApiError, so callers retry it or, when stopping, drop it
            if self.on_error is not None:
                self.on_error(0)
            raise ApiError(0, f"{method} {url}: {type(e).__name__}: {e}"[:500]) from e
        if r.status >= 300:
            if self.on_error is not None:
                self.on_error(r.status)
            try:
                msg = json.loads(text).get("message", text)
            except (ValueError, AttributeError):
                msg = text
            raise ApiError(r.status, str(msg)[:500])
        return json.loads(text) if text else {}

    async def server_version(self, *, refresh: bool = False) -> ServerVersion:
        """The API server's version, read once per client (one client per operator process)
        and again with ``refresh`` (the control plane may have been upgraded since).
        Raises ApiError, also for an answer without a version."""
        if self._version is None or refresh:
            _, c = self._sess()
            body = await self._call("GET", f"{c.server}/version")
            try:
                self._version = ServerVersion.parse(body if isinstance(body, dict) else {})
            except ValueError as e:
                raise ApiError(0, f"GET /version: {e}") from e
        return self._version

    async def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        try:
            return dict(await self._call("GET", self._url(kind, ns, name)))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(
        self,
        kind: str,
        ns: str,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of a kind in a namespace matching ``labels`` (also filtered here) and
        ``fields`` (a field selector: filtered by the server only, so callers filter too).

        A kind the cluster does not serve (e.g. PodGroup without its CRD) lists as empty.
        """
        params: dict[str, str] = {}
        if labels:
            params["labelSelector"] = ",".join(f"{k}={v}" for k, v in labels.items())
        if fields:
            params["fieldSelector"] = ",".join(f"{k}={v}" for k, v in fields.items())
        try:
            res = await self._call("GET", self._url(kind, ns), params=params)
        except ApiError as e:
            if e.status == 404:
                return []
            raise
        items = [i for i in res.get("items") or [] if isinstance(i, dict)]
        if labels:
            items = [
                i
                for i in items
                if all(
                    (i.get("metadata", {}).get("labels") or {}).get(k) == v
                    for k, v in labels.items()
                )
            ]
        return items

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        return dict(await self._call("POST", self._url(obj["kind"], md.get("namespace", "")), obj))

    async def patch(
        self, kind: str, ns: str, name: str, patch: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        return dict(
            await self._call(
                "PATCH",
                self._url(kind, ns, name, subresource),
                patch,
                "application/merge-patch+json",
            )
        )

    async def json_patch(
        self, kind: str, ns: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """A JSON patch (RFC 6902): its ``test`` operations are preconditions the API server
        checks against the stored object (a failed one: 422, nothing written)."""
        return dict(
            await self._call("PATCH", self._url(kind, ns, name), ops, "application/json-patch+json")
        )

    async def delete(self, kind: str, ns: str, name: str) -> bool:
        """Delete with background propagation; False if it was already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            await self._call("DELETE", self._url(kind, ns, name), body)
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise
