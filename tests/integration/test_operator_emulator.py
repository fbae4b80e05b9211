"""The operator (production code path: kopf + our aiohttp client + kubeconfig login)
against kmock's Kubernetes API emulator."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import kmock
import pytest
from kopf.testing import KopfRunner
from tests.support.emulator import GV, StampingEmulator, declare_resources, write_kubeconfig

from distgnn import contract
from distgnn_operator.__main__ import build_parser, setup

pytestmark = pytest.mark.timeout(120)

NS = "ml"
PLURAL = {
    "DistGNNJob": "distgnnjobs",
    "GraphServer": "graphservers",
    "Job": "jobs",
    "StatefulSet": "statefulsets",
    "Secret": "secrets",
    "Service": "services",
    "NetworkPolicy": "networkpolicies",
    "Pod": "pods",
}
PREFIX = {
    "DistGNNJob": GV,
    "GraphServer": GV,
    "Job": "batch/v1",
    "StatefulSet": "apps/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "Secret": "v1",
    "Service": "v1",
    "Pod": "v1",
}


CREDS = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "s3-creds"},
    "stringData": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
}


class Cluster:
    """Test-side API access (through the emulator's own HTTP server)."""

    def __init__(self, k: kmock.KubernetesEmulator) -> None:
        self.k = k

    def _url(self, kind: str, name: str | None = None, sub: str | None = None) -> str:
        p = PREFIX[kind]
        base = f"/api/{p}" if p == "v1" else f"/apis/{p}"
        url = f"{base}/namespaces/{NS}/{PLURAL[kind]}"
        return url + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")

    async def _req(self, method: str, url: str, body: Any = None) -> Any:
        kw: dict[str, Any] = {}
        if body is not None:
            kw = {
                "data": json.dumps(body),
                "headers": {"Content-Type": "application/merge-patch+json"},
            }
        async with self.k.request(method, url, **kw) as r:
            text = await r.text()
            assert r.status < 300, (method, url, r.status, text)
            return json.loads(text) if text else None

    async def create(self, obj: dict[str, Any]) -> Any:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": NS}}
        return await self._req("POST", self._url(obj["kind"]), obj)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        async with self.k.request("GET", self._url(kind, name)) as r:
            return json.loads(await r.text()) if r.status == 200 else None

    async def items(self, kind: str) -> list[dict[str, Any]]:
        res = await self._req("GET", self._url(kind))
        return list(res["items"])

    async def patch(
        self, kind: str, name: str, body: dict[str, Any], sub: str | None = None
    ) -> Any:
        return await self._req("PATCH", self._url(kind, name, sub), body)

    async def delete(self, kind: str, name: str) -> Any:
        return await self._req("DELETE", self._url(kind, name))

    async def until(self, what: str, fn: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
        """Poll ``fn`` until it returns something truthy (generous: the machine is loaded)."""
        deadline = asyncio.get_running_loop().time() + timeout
        last: Any = None
        while asyncio.get_running_loop().time() < deadline:
            last = await fn()
            if last:
                return last
            await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; last: {last!r}")

    async def status(self, kind: str, name: str) -> dict[str, Any]:
        obj = await self.get(kind, name)
        return dict((obj or {}).get("status") or {})

    async def phase(self, kind: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            st = await self.status(kind, name)
            return st if st.get("phase") == phase else None

        return dict(await self.until(f"{kind} {name} phase {phase}", check, timeout))

    async def child(self, kind: str, name: str) -> dict[str, Any]:
        return dict(await self.until(f"{kind} {name}", lambda: self.get(kind, name)))


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    async with StampingEmulator() as k, kmock.Server(k):
        declare_resources(k)
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(k, tmp_path / "kubeconfig")))
        c = Cluster(k)
        await c.create(CREDS)  # the jobs' storage.credentialsSecret
        yield c


@pytest.fixture
def operator_args() -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "--resync-seconds",
            "1",
            "--liveness",
            "",
            "--runtime-image",
            "example.org/distgnn:test",
            "--partitions-url",
            "s3://parts",
        ]
    )


class Operator:
    """The operator running in kopf's thread while the test's loop serves the emulator."""

    def __init__(self, args: argparse.Namespace) -> None:
        registry, settings, _ = setup(args)
        self.runner = KopfRunner(
            ["run", "-A", "--standalone"], registry=registry, settings=settings
        )

    async def __aenter__(self) -> Operator:
        self.runner.__enter__()
        await asyncio.sleep(1.0)  # let the watches start before creating resources
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.runner.__exit__, None, None, None)
        assert self.runner.exit_code == 0, self.runner.output
        assert "failed with an exception" not in self.runner.output, self.runner.output


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "graph": {"source": {"url": "s3://graphs/cora.npz"}},
        "partitioning": {"numParts": 2},
        "storage": {"credentialsSecret": {"name": "s3-creds"}},
        "trainers": {"replicas": 2, "app": {"name": "node-classification", "epochs": 1}},
    }
    base.update(spec)
    return {"apiVersion": GV, "kind": "DistGNNJob", "metadata": {"name": name}, "spec": base}


def cond(st: dict[str, Any], typ: str) -> dict[str, Any]:
    return next(c for c in st["conditions"] if c["type"] == typ)


async def _succeed_partition(c: Cluster, name: str) -> None:
    await c.child("Job", f"{name}-partition")
    await c.patch(
        "Job",
        f"{name}-partition",
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
        "status",
    )


async def _servers_ready(c: Cluster, sts: str, n: int) -> None:
    async def scaled() -> bool:
        obj = await c.get("StatefulSet", sts)
        return bool(obj and obj["spec"]["replicas"] == n)

    await c.until(f"{sts} scaled to {n}", scaled)
    await c.patch("StatefulSet", sts, {"status": {"readyReplicas": n}}, "status")


def _pod(name: str, job: str, index: int, exit_code: int, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"job-name": job, "batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"containers": [{"name": "trainer", "image": "x"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"terminated": {"exitCode": exit_code, "message": message}},
                }
            ]
        },
    }


async def _versions(c: Cluster) -> dict[str, str]:
    out = {}
    for kind in ("Job", "StatefulSet", "Service", "Secret", "NetworkPolicy"):
        for o in await c.items(kind):
            out[f"{kind}/{o['metadata']['name']}"] = o["metadata"]["resourceVersion"]
    return out


async def test_job_lifecycle(cluster: Cluster, operator_args: argparse.Namespace) -> None:
    c = cluster
    async with Operator(operator_args):
        created = await c.create(job_manifest("cora"))
        uid = created["metadata"]["uid"]
        kinds = [
            ("Secret", "cora-token"),
            ("Job", "cora-partition"),
            ("Service", "cora-server"),
            ("StatefulSet", "cora-server"),
            ("NetworkPolicy", "cora-server"),
            ("Service", "cora-trainers"),
        ]
        for kind, name in kinds:
            obj = await c.child(kind, name)
            ref = obj["metadata"]["ownerReferences"][0]
            assert ref["uid"] == uid and ref["kind"] == "DistGNNJob" and ref["controller"]
        st = await c.phase("DistGNNJob", "cora", "Partitioning")
        assert st["manifestURL"] == "s3://parts/ml/cora/cora.json"
        assert (await c.get("StatefulSet", "cora-server"))["spec"]["replicas"] == 0
        assert await c.get("Job", "cora-trainers") is None

        await _succeed_partition(c, "cora")
        await _servers_ready(c, "cora-server", 2)
        tjob = await c.child("Job", "cora-trainers")
        assert tjob["spec"]["completionMode"] == "Indexed"
        st = await c.phase("DistGNNJob", "cora", "Starting")
        assert cond(st, "ServersReady")["status"] == "True"
        assert cond(st, "Partitioned")["reason"] == "PartitionsReady"

        await c.patch("Job", "cora-trainers", {"status": {"active": 2}}, "status")
        st = await c.phase("DistGNNJob", "cora", "Running")
        assert st["trainers"]["active"] == 2 and cond(st, "Running")["status"] == "True"

        # a settled job: further resyncs (every second) change nothing
        await asyncio.sleep(0.5)
        before = await _versions(c)
        await asyncio.sleep(2.5)
        assert await _versions(c) == before

        metrics = {"test_accuracy": 0.81, "val_accuracy": 0.79, "epochs": 1}
        await c.create(_pod("cora-trainers-0-abc", "cora-trainers", 0, 0, json.dumps(metrics)))
        await c.patch(
            "Job",
            "cora-trainers",
            {
                "status": {
                    "active": 0,
                    "succeeded": 2,
                    "conditions": [{"type": "Complete", "status": "True"}],
                }
            },
            "status",
        )
        st = await c.phase("DistGNNJob", "cora", "Succeeded")
        assert st["metrics"]["testAccuracy"] == metrics["test_accuracy"]
        assert st["completionTime"] and cond(st, "Succeeded")["status"] == "True"
        # cleanPodPolicy Running: the servers are scaled away, the trainer Job is kept

        async def servers_gone() -> bool:
            return bool((await c.get("StatefulSet", "cora-server"))["spec"]["replicas"] == 0)

        await c.until("servers scaled down", servers_gone)
        assert await c.get("Job", "cora-trainers") is not None

        # deletion: the operator keeps running; children carry owner references for GC
        await c.delete("DistGNNJob", "cora")
        await asyncio.sleep(1.5)


async def test_restart_then_backoff_limit(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "pr",
                graph={"partitions": {"manifestURL": "s3://p/pr.json"}},
                runPolicy={"backoffLimit": 1},
            )
        )
        await _servers_ready(c, "pr-server", 2)
        first = await c.child("Job", "pr-trainers")
        assert await c.get("Job", "pr-partition") is None
        await c.create(_pod("pr-trainers-1-x", "pr-trainers", 1, 1, "CUDA out of memory"))
        await c.patch(
            "Job",
            "pr-trainers",
            {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}},
            "status",
        )

        async def recreated() -> dict[str, Any] | None:
            j = await c.get("Job", "pr-trainers")
            ok = j and j["metadata"]["uid"] != first["metadata"]["uid"]
            return j if ok else None

        second = await c.until("trainer Job recreated", recreated)
        assert second["metadata"]["annotations"]["distgnn.dev/restarts"] == "1"
        assert (await c.status("DistGNNJob", "pr"))["restarts"] == 1
        await c.create(_pod("pr-trainers-0-y", "pr-trainers", 0, 1, "NaN loss at epoch 3"))
        await c.patch(
            "Job",
            "pr-trainers",
            {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}},
            "status",
        )
        st = await c.phase("DistGNNJob", "pr", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert "NaN loss" in failed["message"]


async def test_suspend_and_resume(cluster: Cluster, operator_args: argparse.Namespace) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(job_manifest("sus", graph={"partitions": {"manifestURL": "s3://p/x.json"}}))
        await _servers_ready(c, "sus-server", 2)
        await c.child("Job", "sus-trainers")
        await c.patch("DistGNNJob", "sus", {"spec": {"runPolicy": {"suspend": True}}})
        st = await c.phase("DistGNNJob", "sus", "Suspended")
        assert cond(st, "Suspended")["status"] == "True"
        assert await c.get("Job", "sus-trainers") is None
        assert (await c.get("StatefulSet", "sus-server"))["spec"]["replicas"] == 0
        await c.patch("DistGNNJob", "sus", {"spec": {"runPolicy": {"suspend": False}}})
        await _servers_ready(c, "sus-server", 2)
        await c.child("Job", "sus-trainers")
        st = await c.phase("DistGNNJob", "sus", "Starting")
        assert cond(st, "Suspended")["status"] == "False"


async def test_graphserver_attach_and_delete_held(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(
            {
                "apiVersion": GV,
                "kind": "GraphServer",
                "metadata": {"name": "shared"},
                "spec": {
                    "graph": {"partitions": {"manifestURL": "s3://p/g.json"}},
                    "partitioning": {"numParts": 3},
                },
            }
        )
        netpol = await c.child("NetworkPolicy", "shared-server")
        peers = netpol["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
        assert peers[contract.LABEL_GRAPHSERVER] == "shared"
        await c.phase("GraphServer", "shared", "Starting")
        await _servers_ready(c, "shared-server", 3)
        gs = await c.phase("GraphServer", "shared", "Ready")
        assert len(gs["endpoints"]) == 3

        await c.create(job_manifest("att", graph={"graphServer": {"name": "shared"}}))
        tjob = await c.child("Job", "att-trainers")
        pod = tjob["spec"]["template"]
        assert pod["metadata"]["labels"][contract.LABEL_GRAPHSERVER] == "shared"
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env[contract.ENV_MANIFEST] == "s3://p/g.json"
        assert len(contract.parse_servers(env[contract.ENV_SERVERS])) == 3
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["token"]["secret"]["secretName"] == "shared-token"
        assert await c.get("StatefulSet", "att-server") is None

        async def attached() -> bool:
            return (await c.status("GraphServer", "shared")).get("attachedJobs") == ["att"]

        await c.until("job attached", attached)

        async def finalized() -> bool:
            gs = await c.get("GraphServer", "shared")
            return "distgnn.dev/finalizer" in ((gs or {})["metadata"].get("finalizers") or [])

        await c.until("finalizer added", finalized)
        await c.delete("GraphServer", "shared")
        await asyncio.sleep(2.0)
        held = await c.get("GraphServer", "shared")
        assert held is not None and held["metadata"].get("deletionTimestamp")
        await c.delete("DistGNNJob", "att")
        await c.until("GraphServer deleted", lambda: _gone(c, "GraphServer", "shared"))


async def _gone(c: Cluster, kind: str, name: str) -> bool:
    return await c.get(kind, name) is None


async def test_invalid_manifest_reported_in_status(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        bad = job_manifest("bad")
        bad["spec"]["trainers"]["replicas"] = 0
        bad["spec"]["partitioning"]["method"] = "kahip"
        await c.create(bad)
        st = await c.phase("DistGNNJob", "bad", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "InvalidSpec"
        assert "spec.trainers.replicas: must be >= 1" in failed["message"]
        assert "spec.partitioning.method" in failed["message"]
        assert await c.get("Secret", "bad-token") is None
        # the operator is still healthy: a valid job next to it gets its children
        await c.create(job_manifest("good"))
        await c.child("StatefulSet", "good-server")
