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
from tests.support.chart_rbac import operator_grants
from tests.support.emulator import (
    GV,
    StampingEmulator,
    declare_resources,
    kopf_diffbase,
    kopf_finalizer_attempt,
    write_kubeconfig,
)

from distgnn import contract
from distgnn_operator.__main__ import build_parser, setup
from distgnn_operator.handlers import CHILD_RESOURCES

pytestmark = pytest.mark.timeout(120)

NS = "ml"
# waits for what must act on events or due times, not on the 300 s resync of slow_resync:
# far below that resync, generous for a loaded machine (fires only on a real hang)
PROMPT = 60.0
PLURAL = {
    "DistGNNJob": "distgnnjobs",
    "GraphServer": "graphservers",
    "Job": "jobs",
    "StatefulSet": "statefulsets",
    "Secret": "secrets",
    "Service": "services",
    "NetworkPolicy": "networkpolicies",
    "Pod": "pods",
    "Event": "events",
    "Workload": "workloads",
    "PodGroup": "podgroups",
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
    "Event": "v1",
    "Workload": "kueue.x-k8s.io/v1beta1",
    "PodGroup": "scheduling.x-k8s.io/v1alpha1",
}


CREDS = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "s3-creds"},
    "stringData": {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
}


class Cluster:
    """Test-side API access (through the emulator's own HTTP server)."""

    def __init__(self, k: StampingEmulator) -> None:
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

    async def child(self, kind: str, name: str, timeout: float = 60) -> dict[str, Any]:
        return dict(await self.until(f"{kind} {name}", lambda: self.get(kind, name), timeout))

    async def reason(
        self, kind: str, name: str, reason: str, timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until the reason behind the phase (Failed or Running condition) is ``reason``."""

        async def check() -> dict[str, Any] | None:
            st = await self.status(kind, name)
            return st if st.get("conditions") and phase_reason(st) == reason else None

        return dict(await self.until(f"{kind} {name} reason {reason}", check, timeout))

    async def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in await self.items("Event") if e["involvedObject"]["name"] == name]

    async def event(self, name: str, reason: str, timeout: float = 30) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            return next((e for e in await self.events(name) if e["reason"] == reason), None)

        return dict(await self.until(f"event {reason} on {name}", check, timeout))


WATCHED = {"distgnnjobs", "graphservers", *(plural for _, _, plural in CHILD_RESOURCES)}
"""What the operator watches (kopf: its kinds and their children)."""
_EMULATOR: list[StampingEmulator] = []
"""The ``cluster`` fixture's emulator while it runs (``Operator`` waits for its watches)."""


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    async with StampingEmulator() as k, kmock.Server(k):
        declare_resources(k)
        _EMULATOR.append(k)
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(k, tmp_path / "kubeconfig")))
        c = Cluster(k)
        await c.create(CREDS)  # the jobs' storage.credentialsSecret
        try:
            yield c
        finally:
            _EMULATOR.remove(k)
        # everything the operator asked for is granted by the chart's RBAC (gang scheduling
        # and Kueue on: a test that forbids PodGroups makes the emulator refuse them as RBAC
        # would; without --kueue the operator never asks for Workloads)
        granted = operator_grants({"gangScheduling": {"enabled": True}, "kueue": {"enabled": True}})
        missing = sorted(r for r in k.requests if (r.group, r.resource, r.verb) not in granted)
        assert not missing, f"requests the chart's RBAC does not grant: {missing}"


def make_args(resync: float, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "--resync-seconds",
            str(resync),
            "--liveness",
            "",
            "--runtime-image",
            "example.org/distgnn:test",
            "--partitions-url",
            "s3://parts",
            *extra,
        ]
    )


@pytest.fixture
def operator_args() -> argparse.Namespace:
    """A resync every second: tests of steady state see many passes."""
    return make_args(1)


@pytest.fixture
def slow_resync() -> argparse.Namespace:
    """A resync far beyond the tests' waits: what happens, happens on events and due times."""
    return make_args(300)


class Operator:
    """The operator running in kopf's thread while the test's loop serves the emulator."""

    def __init__(self, args: argparse.Namespace, **ctx: Any) -> None:
        registry, settings, octx = setup(args)
        for k, v in ctx.items():  # OperatorContext knobs (e.g. graphserver_wait_seconds)
            setattr(octx, k, v)
        self.runner = KopfRunner(
            ["run", "-A", "--standalone"], registry=registry, settings=settings
        )

    async def __aenter__(self) -> Operator:
        k = _EMULATOR[-1] if _EMULATOR else None
        since = len(k.watches) if k is not None else 0
        self.runner.__enter__()
        if k is None:
            await asyncio.sleep(1.0)  # let the watches start before creating resources
            return self
        # the watches start before resources are created (one created before a watch's
        # request arrives comes with its first events, one created after on its stream)
        expected = WATCHED - k.forbidden - k.unserved  # refused, as RBAC or a missing CRD
        deadline = asyncio.get_running_loop().time() + PROMPT
        while not expected.issubset(k.watches[since:]):
            assert asyncio.get_running_loop().time() < deadline, ("watches", k.watches[since:])
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # each watch's stream subscribes to the emulator's events
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
    """The condition of that type; an empty one before the operator's first status write
    (a poll may come first)."""
    return next((c for c in st.get("conditions", []) if c["type"] == typ), {})


def phase_reason(st: dict[str, Any]) -> str:
    return str(cond(st, "Failed" if st.get("phase") == "Failed" else "Running").get("reason", ""))


def st_msg(st: dict[str, Any]) -> str:
    return str(cond(st, "Failed" if st.get("phase") == "Failed" else "Running").get("message", ""))


async def assert_settled(c: Cluster, seconds: float = 3.5) -> None:
    """A settled cluster: over several passes (resync every second) nothing is written,
    no object and no event."""

    async def kopf_done() -> bool:
        """kopf's own one-time writes (retried on conflicts): its finalizer on every resource
        and, on GraphServers (they have a delete handler), its diff-base annotation."""
        jobs, servers = await c.items("DistGNNJob"), await c.items("GraphServer")
        fin = all(
            "distgnn.dev/finalizer" in (o["metadata"].get("finalizers") or [])
            for o in jobs + servers
        )
        diffbase = "distgnn.dev/last-handled-configuration"
        return fin and all(diffbase in (g["metadata"].get("annotations") or {}) for g in servers)

    await c.until("kopf's finalizer and diff-base written", kopf_done)
    await asyncio.sleep(0.5)  # in-flight events of the last change
    n = len(c.k.writes)
    await asyncio.sleep(seconds)
    # kopf handles every event in turn: on a loaded machine, one older than its finalizer
    # or diff-base write may still be handled in the window; what it sends again then
    # changes nothing (a real API server refuses or ignores it), and is never repeated
    window = c.k.writes_since(n)
    writes = [w for w in window if not (kopf_diffbase(w) or kopf_finalizer_attempt(w))]
    assert writes == [], writes
    once = [w.name for w in window if kopf_diffbase(w)]
    assert len(once) == len(set(once)), once  # kopf's diff-base: once, never each pass


async def _succeed_partition(c: Cluster, name: str) -> None:
    await c.child("Job", f"{name}-partition")
    await c.patch(
        "Job",
        f"{name}-partition",
        {"status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}},
        "status",
    )


async def _fail_job(c: Cluster, name: str, reason: str = "", message: str = "") -> None:
    """Job ``name`` as the Job controller marks it after a pod failed (backoffLimit 0);
    with ``reason`` ``PodFailurePolicy``, as a ``podFailurePolicy`` FailJob rule fails it
    (``FailureTarget`` first, since Kubernetes 1.31)."""
    why = {"reason": reason, "message": message} if reason else {}
    conds = [{"type": "Failed", "status": "True", **why}]
    if reason == "PodFailurePolicy":
        conds.insert(0, {"type": "FailureTarget", "status": "True", **why})
    await c.patch("Job", name, {"status": {"failed": 1, "conditions": conds}}, "status")


async def _servers_ready(c: Cluster, sts: str, n: int) -> None:
    async def scaled() -> bool:
        obj = await c.get("StatefulSet", sts)
        return bool(obj and obj["spec"]["replicas"] == n)

    await c.until(f"{sts} scaled to {n}", scaled)
    await c.patch("StatefulSet", sts, {"status": {"readyReplicas": n}}, "status")


def _pod(
    name: str, job: str, index: int, exit_code: int, message: str, container: str = "trainer"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"job-name": job, "batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"containers": [{"name": container, "image": "x"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": container,
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
        app = {"name": "node-classification", "epochs": 1, "inferAfterTraining": True}
        trainers = {
            "replicas": 2,
            "checkpoint": {"url": "s3://out/cora-ckpt"},
            "app": app | {"outputURL": "s3://out/cora-emb"},
        }
        created = await c.create(job_manifest("cora", trainers=trainers))
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

        # pods created but Pending (no node yet): not Running
        await c.patch("Job", "cora-trainers", {"status": {"active": 2, "ready": 0}}, "status")
        st = await c.reason("DistGNNJob", "cora", "TrainersPending")
        assert st["phase"] == "Starting" and "0/2 trainer pod(s) running" in st_msg(st)
        await c.patch("Job", "cora-trainers", {"status": {"active": 2, "ready": 2}}, "status")
        st = await c.phase("DistGNNJob", "cora", "Running")
        assert st["trainers"]["active"] == 2 and cond(st, "Running")["status"] == "True"
        assert st["trainers"]["ready"] == 2
        assert "outputURL" not in st  # the output is not complete yet
        argv = tjob["spec"]["template"]["spec"]["containers"][0]["command"]
        assert "--infer-after-training" in argv

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
        assert st["outputURL"] == "s3://out/cora-emb"  # where inference wrote
        # cleanPodPolicy Running: the servers are scaled away (before the final status is
        # written), the trainer Job is kept
        assert (await c.get("StatefulSet", "cora-server"))["spec"]["replicas"] == 0
        assert await c.get("Job", "cora-trainers") is not None
        await assert_settled(c)

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
        await _fail_job(c, "pr-trainers")

        async def recreated() -> dict[str, Any] | None:
            j = await c.get("Job", "pr-trainers")
            ok = j and j["metadata"]["uid"] != first["metadata"]["uid"]
            return j if ok else None

        second = await c.until("trainer Job recreated", recreated)
        assert second["metadata"]["annotations"]["distgnn.dev/restarts"] == "1"
        assert (await c.status("DistGNNJob", "pr"))["restarts"] == 1
        await c.create(_pod("pr-trainers-0-y", "pr-trainers", 0, 1, "NaN loss at epoch 3"))
        await _fail_job(c, "pr-trainers")
        st = await c.phase("DistGNNJob", "pr", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert "NaN loss" in failed["message"]


async def test_a_trainers_configuration_error_fails_the_job_without_a_restart(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A trainer container's exit code 2 (``distgnn train``'s configuration error) fails the
    job at once although backoffLimit allows restarts; a finished job then writes nothing."""
    c = cluster
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "cfg",
                graph={"partitions": {"manifestURL": "s3://p/cfg.json"}},
                runPolicy={"backoffLimit": 3},
            )
        )
        await _servers_ready(c, "cfg-server", 2)
        first = await c.child("Job", "cfg-trainers")
        msg = "distgnn train: error: --feat (trainers.app.feat): the graph has no node field"
        await c.create(_pod("cfg-trainers-0-x", "cfg-trainers", 0, 2, msg))
        await _fail_job(c, "cfg-trainers")
        st = await c.phase("DistGNNJob", "cfg", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "TrainerConfigError"
        assert "configuration error (exit code 2), not retried" in failed["message"]
        assert "--feat (trainers.app.feat)" in failed["message"]
        assert st.get("restarts", 0) == 0
        job = await c.get("Job", "cfg-trainers")
        assert job is not None and job["metadata"]["uid"] == first["metadata"]["uid"]
        ev = await c.event("cfg", "TrainerConfigError")
        assert ev["type"] == "Warning" and "not retried" in ev["message"]
        assert (await c.event("cfg", "PodFailed"))["message"].endswith(msg)
        assert all(e["reason"] != "TrainerGroupRestarting" for e in await c.events("cfg"))
        await assert_settled(c)


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
        pol = await c.child("NetworkPolicy", "att-trainers")  # the trainers' own policy
        assert pol["spec"]["podSelector"]["matchLabels"] == {
            contract.LABEL_JOB: "att",
            contract.LABEL_ROLE: contract.ROLE_TRAINER,
        }

        async def attached() -> bool:
            return (await c.status("GraphServer", "shared")).get("attachedJobs") == ["att"]

        await c.until("job attached", attached)

        async def finalized() -> bool:
            gs = await c.get("GraphServer", "shared")
            return "distgnn.dev/finalizer" in ((gs or {})["metadata"].get("finalizers") or [])

        await c.until("finalizer added", finalized)
        await c.delete("GraphServer", "shared")
        # a held deletion is visible: phase Terminating, a condition naming the jobs, an event
        gs = await c.phase("GraphServer", "shared", "Terminating")
        term = cond(gs, "Terminating")
        assert term["status"] == "True" and term["reason"] == "AttachedJobs"
        assert "att" in term["message"]
        ev = await c.event("shared", "AttachedJobs")
        assert ev["type"] == "Warning" and "att" in ev["message"]
        held = await c.get("GraphServer", "shared")
        assert held is not None and held["metadata"].get("deletionTimestamp")
        await c.delete("DistGNNJob", "att")
        await c.until("GraphServer deleted", lambda: _gone(c, "GraphServer", "shared"))


async def _gone(c: Cluster, kind: str, name: str) -> bool:
    return await c.get(kind, name) is None


async def _collect_garbage(c: Cluster, uid: str) -> list[str]:
    """What Kubernetes' garbage collector does once an owner is gone (kmock has none):
    delete every object whose owner reference names ``uid``; returns what it deleted."""
    gone = []
    for kind in ("Job", "StatefulSet", "Service", "Secret", "NetworkPolicy"):
        for o in await c.items(kind):
            if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or []):
                await c.delete(kind, o["metadata"]["name"])
                gone.append(f"{kind}/{o['metadata']['name']}")
    return gone


async def test_trainer_network_policy_follows_the_job(
    cluster: Cluster, slow_resync: argparse.Namespace
) -> None:
    """``NAME-trainers`` of a job with its own servers: created with the job, it selects
    the trainer Job's pods and not the servers, a change to it is reverted at once, and
    it is owned by the job, so it is deleted with it and not created again."""
    c = cluster
    async with Operator(slow_resync):
        created = await c.create(
            job_manifest("np", graph={"partitions": {"manifestURL": "s3://p/np.json"}})
        )
        uid = created["metadata"]["uid"]
        pol = await c.child("NetworkPolicy", "np-trainers")
        ref = pol["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("DistGNNJob", uid, True)
        await _servers_ready(c, "np-server", 2)
        tjob = await c.child("Job", "np-trainers")
        sel = pol["spec"]["podSelector"]["matchLabels"].items()
        assert sel <= tjob["spec"]["template"]["metadata"]["labels"].items()
        sts = await c.child("StatefulSet", "np-server")
        assert not sel <= sts["spec"]["template"]["metadata"]["labels"].items()
        ingress = pol["spec"]["ingress"]

        await c.patch("NetworkPolicy", "np-trainers", {"spec": {"ingress": [{}]}})  # open all

        async def reverted() -> bool:
            obj = await c.get("NetworkPolicy", "np-trainers")
            return bool(obj and obj["spec"]["ingress"] == ingress)

        await c.until("the trainers' NetworkPolicy drift corrected", reverted, timeout=PROMPT)

        await c.delete("DistGNNJob", "np")
        await c.until("job deleted", lambda: _gone(c, "DistGNNJob", "np"))
        assert "NetworkPolicy/np-trainers" in await _collect_garbage(c, uid)
        await asyncio.sleep(1.5)  # a pass that would recreate it
        assert await c.get("NetworkPolicy", "np-trainers") is None


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


# --- issue 12: behaviour on a real cluster -------------------------------------------------


async def _running(c: Cluster, name: str, own_servers: bool = True) -> dict[str, Any]:
    """Drive a job with given partitions to Running (servers ready, trainer pods running)."""
    if own_servers:
        await _servers_ready(c, f"{name}-server", 2)
    await c.child("Job", f"{name}-trainers")
    await c.patch("Job", f"{name}-trainers", {"status": {"active": 2, "ready": 2}}, "status")
    return await c.phase("DistGNNJob", name, "Running")


@pytest.mark.parametrize("policy", ["Running", "None"])
async def test_deadline_failed_job_settles(
    cluster: Cluster, operator_args: argparse.Namespace, policy: str
) -> None:
    """A job failed by activeDeadlineSeconds deletes its running trainers (Running) or leaves
    them (None), then writes nothing more: no create/delete loop, no events."""
    c = cluster
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "dl",
                graph={"partitions": {"manifestURL": "s3://p/dl.json"}},
                # long enough to reach Running first on a loaded machine (4 s flaked)
                runPolicy={"activeDeadlineSeconds": 8, "cleanPodPolicy": policy},
            )
        )
        await _running(c, "dl")
        first = await c.child("Job", "dl-trainers")
        st = await c.phase("DistGNNJob", "dl", "Failed", timeout=30)
        assert cond(st, "Failed")["reason"] == "DeadlineExceeded"
        await assert_settled(c)
        tjob = await c.get("Job", "dl-trainers")
        if policy == "Running":
            assert tjob is None
            assert (await c.get("StatefulSet", "dl-server"))["spec"]["replicas"] == 0
        else:
            assert tjob is not None and tjob["metadata"]["uid"] == first["metadata"]["uid"]


@pytest.mark.parametrize("policy", ["Running", "None"])
async def test_failed_partitioning_settles_and_reports_root_cause(
    cluster: Cluster, operator_args: argparse.Namespace, policy: str
) -> None:
    """A failed partitioning Job fails the job with its root cause in one line; no trainer
    Job is ever created (also not with cleanPodPolicy None), and the job settles."""
    c = cluster
    log_tail = "\n".join(
        [
            json.dumps({"level": "info", "msg": "reading s3://graphs/cora.npz"}),
            "Traceback (most recent call last):",
            '  File "/app/distgnn/storage.py", line 88, in read_bytes',
            "FileNotFoundError: s3://graphs/cora.npz: no such key",
        ]
    )
    async with Operator(operator_args):
        await c.create(job_manifest("pf", runPolicy={"cleanPodPolicy": policy}))
        await c.child("Job", "pf-partition")
        pod = _pod("pf-partition-abc", "pf-partition", 0, 1, log_tail, "partition")
        del pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        await c.create(pod)
        await _fail_job(c, "pf-partition")
        st = await c.phase("DistGNNJob", "pf", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "PartitioningFailed"
        assert failed["message"] == (
            "partitioning failed: FileNotFoundError: s3://graphs/cora.npz: no such key "
            "(pod pf-partition-abc)"
        )
        ev = await c.event("pf", "PodFailed")
        assert ev["type"] == "Warning" and "Traceback" in ev["message"]
        await assert_settled(c)
        assert await c.get("Job", "pf-trainers") is None


@pytest.mark.parametrize("pod_kept", [True, False])
async def test_a_partitioning_configuration_error_fails_the_job_at_once(
    cluster: Cluster, operator_args: argparse.Namespace, pod_kept: bool
) -> None:
    """The partitioning Job fails at once on the partitioner's exit status 2 (its
    podFailurePolicy; on a real cluster the Job controller fails it with reason
    PodFailurePolicy): the job fails with reason PartitionConfigError and the pod's
    termination message, or the Job's condition message when the pod is gone."""
    c = cluster
    line = "distgnn partition: error: s3://graphs/cora.npz: not found (NoSuchKey)"
    policy_msg = (
        "Container partition for pod ml/pce-partition-abc failed with exit code 2 "
        "matching FailJob rule at index 0"
    )
    async with Operator(operator_args):
        await c.create(job_manifest("pce"))
        pjob = await c.child("Job", "pce-partition")
        rules = pjob["spec"]["podFailurePolicy"]["rules"]
        assert rules[0]["onExitCodes"] == {
            "containerName": "partition",
            "operator": "In",
            "values": [2],
        }
        assert rules[0]["action"] == "FailJob" and rules[1]["action"] == "Ignore"
        if pod_kept:
            pod = _pod("pce-partition-abc", "pce-partition", 0, 2, line, "partition")
            del pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            await c.create(pod)
        await _fail_job(c, "pce-partition", "PodFailurePolicy", policy_msg)
        st = await c.phase("DistGNNJob", "pce", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "PartitionConfigError"
        head = "partitioning failed with a configuration error (exit code 2), not retried: "
        tail = f"{line} (pod pce-partition-abc)" if pod_kept else policy_msg
        assert failed["message"] == head + tail
        assert cond(st, "Partitioned")["reason"] == "PartitionConfigError"
        ev = await c.event("pce", "PartitionConfigError")
        assert ev["type"] == "Warning" and "not retried" in ev["message"]
        if pod_kept:
            assert (await c.event("pce", "PodFailed"))["message"].endswith(line)
        await assert_settled(c)
        assert await c.get("Job", "pce-trainers") is None


async def test_a_disrupted_trainer_group_restarts_without_using_the_backoff_limit(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A trainer pod evicted, preempted or on a drained node (the Job controller fails the
    trainer Job by its DisruptionTarget rule; the pod is gone) restarts the group even with
    backoffLimit 0, and the restart is not counted; a later real failure still is."""
    c = cluster
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "dis",
                graph={"partitions": {"manifestURL": "s3://p/dis.json"}},
                runPolicy={"backoffLimit": 0},
            )
        )
        await _running(c, "dis")
        first = await c.get("Job", "dis-trainers")
        assert first is not None
        assert first["spec"]["podFailurePolicy"]["rules"] == [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
        await _fail_job(
            c,
            "dis-trainers",
            "PodFailurePolicy",
            "Pod ml/dis-trainers-1-x has condition DisruptionTarget matching FailJob rule "
            "at index 0",
        )

        async def recreated() -> dict[str, Any] | None:
            j = await c.get("Job", "dis-trainers")
            return j if j and j["metadata"]["uid"] != first["metadata"]["uid"] else None

        await c.until("a new trainer Job", recreated)
        ev = await c.event("dis", "TrainerGroupRestarting")
        assert "not counted against backoffLimit" in ev["message"]
        assert "DisruptionTarget" in ev["message"]
        st = await c.status("DistGNNJob", "dis")
        assert st.get("restarts", 0) == 0 and st["phase"] != "Failed"
        await c.create(_pod("dis-trainers-0-y", "dis-trainers", 0, 1, "RuntimeError: NaN"))
        await _fail_job(c, "dis-trainers")
        st = await c.phase("DistGNNJob", "dis", "Failed")
        assert cond(st, "Failed")["reason"] == "BackoffLimitExceeded"


def _failed_create(name: str, child: dict[str, Any], message: str, at: str) -> dict[str, Any]:
    """The Warning event a StatefulSet or Job controller records for a pod the API server
    refused (core/v1, as client-go's recorder writes it)."""
    md = child["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {
            "apiVersion": child["apiVersion"],
            "kind": child["kind"],
            "name": md["name"],
            "namespace": NS,
            "uid": md["uid"],
        },
        "reason": "FailedCreate",
        "type": "Warning",
        "message": message,
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": "statefulset-controller"},
    }


async def test_pods_a_child_cannot_create_are_reported(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """The API server refuses the servers' pods (here a serviceAccountName that does not
    exist): the StatefulSet controller only records Warning events FailedCreate on the
    StatefulSet. The job shows the newest one's message (Pending, PodCreateFailed), writes
    again only when the message changes, ignores other objects' events, and goes on once
    the pods exist."""
    c = cluster
    async with Operator(operator_args, pod_create_grace_seconds=0.0):
        await c.create(
            job_manifest(
                "pcf",
                graph={"partitions": {"manifestURL": "s3://p/pcf.json"}},
                servers={"podTemplate": {"serviceAccountName": "nope"}},
            )
        )
        sts = await c.child("StatefulSet", "pcf-server")
        decoy = {**sts, "metadata": {**sts["metadata"], "uid": "another-object"}}
        await c.create(_failed_create("decoy", decoy, "not ours", "2026-01-01T00:00:30Z"))
        refused = (
            'create Pod pcf-server-0 in StatefulSet pcf-server failed error: pods "pcf-server-0" '
            "is forbidden: error looking up service account ml/nope: serviceaccount "
            '"nope" not found'
        )
        await c.create(_failed_create("e1", sts, refused, "2026-01-01T00:00:01Z"))
        st = await c.reason("DistGNNJob", "pcf", "PodCreateFailed")
        assert st["phase"] == "Pending"
        assert st_msg(st) == f"StatefulSet pcf-server cannot create its pods: {refused}"
        ev = await c.event("pcf", "PodCreateFailed")
        assert ev["type"] == "Warning" and "serviceaccount" in ev["message"]
        await assert_settled(c)  # the same newest event: nothing written
        quota = (
            'create Pod pcf-server-1 in StatefulSet pcf-server failed error: pods "pcf-server-1" '
            "is forbidden: exceeded quota: team, requested: cpu=1, used: cpu=8, limited: cpu=8"
        )
        await c.create(_failed_create("e2", sts, quota, "2026-01-01T00:00:09Z"))

        async def updated() -> bool:
            return st_msg(await c.status("DistGNNJob", "pcf")).endswith(quota)

        await c.until("the newest message in the status", updated)
        await _servers_ready(c, "pcf-server", 2)  # the pods exist now
        st = await c.reason("DistGNNJob", "pcf", "TrainersStarting")
        assert st["phase"] == "Starting"
        assert sum(e["reason"] == "PodCreateFailed" for e in await c.events("pcf")) == 1


SERVE_NO_OBJECT = "distgnn serve: error: s3://p/crash.json: not found (NoSuchKey)"
SERVE_UNREACHABLE = (
    "distgnn serve: error: s3://p/crash.json: cannot reach the S3 endpoint "
    "http://minio:9000 (EndpointConnectionError)"
)


def crash_looping_status(exit_code: int, log_tail: str, restarts: int) -> dict[str, Any]:
    """A server pod's status as the kubelet writes it while the container crash-loops:
    waiting in back-off, the last termination (its message from the log tail:
    ``FallbackToLogsOnError``), the restart count."""
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "server",
                "image": "example.org/distgnn:test",
                "ready": False,
                "started": False,
                "restartCount": restarts,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {10 * 2**restarts}s restarting failed "
                        "container=server",
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Error",
                        "message": log_tail,
                        "startedAt": f"2026-11-25T14:00:{restarts:02d}Z",
                        "finishedAt": f"2026-11-25T14:00:{restarts:02d}Z",
                    }
                },
            }
        ],
    }


async def server_pod(
    c: Cluster, sts_name: str, ordinal: int, owner_label: str, owner: str
) -> dict[str, Any]:
    """A pod of the StatefulSet ``sts_name`` as its controller creates it (the test plays
    the controller and, with :func:`crash_looping_status`, the kubelet)."""
    sts = await c.child("StatefulSet", sts_name)
    name = f"{sts_name}-{ordinal}"
    return dict(
        await c.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": {
                        owner_label: owner,
                        contract.LABEL_ROLE: contract.ROLE_SERVER,
                        "statefulset.kubernetes.io/pod-name": name,
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "StatefulSet",
                            "name": sts_name,
                            "uid": sts["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "server", "image": "example.org/distgnn:test"}]},
                "status": {"phase": "Pending"},
            }
        )
    )


async def test_a_crash_looping_server_is_named_and_a_configuration_error_fails_the_job(
    cluster: Cluster, slow_resync: argparse.Namespace
) -> None:
    """A server pod that crash-loops changes nothing its StatefulSet reports: the job's
    status names the pod and the last crash's root cause (read every 15 s while servers
    are not ready: pods are not watched), writes nothing while the pod's state only
    repeats (a new restart count), and fails the job at once (ServerConfigError, a
    Warning event, the servers scaled to 0) when the server exits 2."""
    c = cluster
    async with Operator(slow_resync):
        await c.create(
            job_manifest("crash", graph={"partitions": {"manifestURL": "s3://p/crash.json"}})
        )
        await c.phase("DistGNNJob", "crash", "Starting")
        for i in range(2):
            await server_pod(c, "crash-server", i, contract.LABEL_JOB, "crash")
        await c.patch("StatefulSet", "crash-server", {"status": {"replicas": 2}}, "status")
        await c.patch("StatefulSet", "crash-server", {"status": {"readyReplicas": 1}}, "status")
        tail = '{"level": "info", "msg": "graph server starting"}\n' + SERVE_UNREACHABLE
        await c.patch("Pod", "crash-server-1", {"status": crash_looping_status(1, tail, 1)})
        line = f"pod crash-server-1: CrashLoopBackOff: {SERVE_UNREACHABLE} (exit code 1)"

        async def named() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "crash")
            return st if st_msg(st) == f"1/2 servers ready; {line}" else None

        st = await c.until("the stuck pod in the status", named, timeout=PROMPT)
        assert st["phase"] == "Starting" and phase_reason(st) == "ServersStarting"
        assert cond(st, "ServersReady")["message"] == f"1/2 servers ready; {line}"
        # a restart more (the kubelet's new count and back-off): the same line, no write;
        # a StatefulSet status change runs the pass at once (pods are listed, not watched)
        n, calls = len(c.k.writes), len(c.k.calls)
        await c.patch("Pod", "crash-server-1", {"status": crash_looping_status(1, tail, 2)})
        await c.patch("StatefulSet", "crash-server", {"status": {"currentReplicas": 2}}, "status")

        async def listed() -> bool:
            return ("GET", c._url("Pod")) in c.k.calls[calls:]

        await c.until("a pass that lists the server pods", listed, timeout=PROMPT)
        await asyncio.sleep(0.5)
        assert c.k.writes_since(n, "distgnnjobs") == []

        await c.patch(
            "Pod", "crash-server-1", {"status": crash_looping_status(2, SERVE_NO_OBJECT, 3)}
        )
        st = await c.phase("DistGNNJob", "crash", "Failed", timeout=PROMPT)
        failed = cond(st, "Failed")
        assert failed["reason"] == cond(st, "ServersReady")["reason"] == "ServerConfigError"
        assert failed["message"] == (
            "graph server exited with a configuration error (exit code 2), not retried: "
            f"{SERVE_NO_OBJECT} (pod crash-server-1)"
        )
        ev = await c.event("crash", "ServerConfigError")
        assert ev["type"] == "Warning" and SERVE_NO_OBJECT in ev["message"]
        assert (await c.event("crash", "PodFailed"))["message"].endswith(SERVE_NO_OBJECT)
        sts = await c.get("StatefulSet", "crash-server")
        assert sts is not None and sts["spec"]["replicas"] == 0  # cleanPodPolicy Running
        await assert_settled(c)
        assert await c.get("Job", "crash-trainers") is None


async def test_a_graphservers_server_configuration_error_keeps_its_pods(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A GraphServer is long-lived: a server exiting 2 makes it Failed with reason
    ServerConfigError on its ServersReady condition, and nothing is deleted or scaled
    down; fixing the data lets the restarted server come up, and it is Ready again."""
    c = cluster
    async with Operator(operator_args):
        await c.create(_graphserver("gsc", 2))
        await c.phase("GraphServer", "gsc", "Starting")
        await server_pod(c, "gsc-server", 0, contract.LABEL_GRAPHSERVER, "gsc")
        await c.patch("StatefulSet", "gsc-server", {"status": {"replicas": 2}}, "status")
        await c.patch(
            "Pod", "gsc-server-0", {"status": crash_looping_status(2, SERVE_NO_OBJECT, 1)}
        )
        st = await c.phase("GraphServer", "gsc", "Failed", timeout=PROMPT)
        ready = cond(st, "ServersReady")
        assert ready["status"] == "False" and ready["reason"] == "ServerConfigError"
        assert ready["message"].startswith(
            "graph server exited with a configuration error (exit code 2), fix the spec or "
            "the partitions; its pods are kept: "
        )
        assert (await c.event("gsc", "ServerConfigError"))["type"] == "Warning"
        sts = await c.get("StatefulSet", "gsc-server")
        assert sts is not None and sts["spec"]["replicas"] == 2
        await assert_settled(c)
        await _servers_ready(c, "gsc-server", 2)  # the data fixed: the restarts came up
        await c.phase("GraphServer", "gsc", "Ready", timeout=PROMPT)


async def test_image_pull_secrets_reach_every_pod_and_follow_the_spec(
    cluster: Cluster,
) -> None:
    """The operator's default (``--image-pull-secret``, the chart's
    runtimeImage.pullSecrets) goes on every pod template; a pod template's own list
    replaces it; taking the servers' pull secrets out of the spec takes them off the
    StatefulSet (the Jobs keep theirs until recreated: their templates are immutable)."""
    c = cluster
    args = make_args(1, "--image-pull-secret", "regcred")
    async with Operator(args):
        await c.create(
            job_manifest(
                "ips",
                servers={"podTemplate": {"imagePullSecrets": [{"name": "team"}]}},
                trainers={
                    "replicas": 2,
                    "app": {"name": "node-classification", "epochs": 1},
                },
            )
        )
        part = await c.child("Job", "ips-partition")
        assert part["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "team"}]
        sts = await c.child("StatefulSet", "ips-server")
        assert sts["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "team"}]
        await _succeed_partition(c, "ips")
        await _servers_ready(c, "ips-server", 2)
        tj = await c.child("Job", "ips-trainers")
        assert tj["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        await c.patch("DistGNNJob", "ips", {"spec": {"servers": {"podTemplate": None}}})

        async def defaulted() -> bool:
            obj = await c.get("StatefulSet", "ips-server")
            pod = (obj or {})["spec"]["template"]["spec"]
            return pod.get("imagePullSecrets") == [{"name": "regcred"}]

        await c.until("the servers back on the default", defaulted)
        await c.patch(
            "DistGNNJob", "ips", {"spec": {"servers": {"podTemplate": {"imagePullSecrets": []}}}}
        )

        async def none() -> bool:
            obj = await c.get("StatefulSet", "ips-server")
            return "imagePullSecrets" not in (obj or {})["spec"]["template"]["spec"]

        await c.until("no pull secrets on the servers", none)


async def test_trainer_failure_message_is_the_root_cause(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """The trainers' JSON termination message becomes one line naming the error and the
    first failing pod; the traceback goes to an event; events come from distgnn-operator."""
    c = cluster
    tb = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 60
    oom = {
        "error": "RuntimeError",
        "message": "CUDA out of memory on rank 1",
        "rank": "1",
        "traceback": tb + "RuntimeError: CUDA out of memory on rank 1",
    }
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "oom",
                graph={"partitions": {"manifestURL": "s3://p/oom.json"}},
                runPolicy={"backoffLimit": 0},
            )
        )
        await _running(c, "oom")
        rank1 = _pod("oom-trainers-1-x", "oom-trainers", 1, 1, json.dumps(oom))
        rank1["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
            "2026-01-01T00:00:01Z"
        )
        rank0 = _pod("oom-trainers-0-y", "oom-trainers", 0, 1, "ConnectionResetError: peer")
        rank0["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
            "2026-01-01T00:00:05Z"
        )
        await c.create(rank0)
        await c.create(rank1)
        await c.patch(
            "Job",
            "oom-trainers",
            {"status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}},
            "status",
        )
        st = await c.phase("DistGNNJob", "oom", "Failed")
        msg = cond(st, "Failed")["message"]
        assert msg.endswith(
            ": RuntimeError: CUDA out of memory on rank 1 (rank 1, pod oom-trainers-1-x)"
        )
        assert "\n" not in msg and "{" not in msg and "Traceback" not in msg
        ev = await c.event("oom", "PodFailed")
        assert ev["type"] == "Warning" and "oom-trainers-1-x" in ev["message"]
        assert ev["message"].endswith("RuntimeError: CUDA out of memory on rank 1")
        assert len(ev["message"]) < 1100  # the traceback's end, cut sensibly
        events = await c.events("oom")
        assert events and all(e["source"]["component"] == "distgnn-operator" for e in events)
        assert all(e["reportingComponent"] == "distgnn-operator" for e in events)
        await assert_settled(c)


async def test_attached_job_fails_and_settles(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(_graphserver("gs2", 2))
        await _servers_ready(c, "gs2-server", 2)
        await c.phase("GraphServer", "gs2", "Ready")
        await c.create(
            job_manifest(
                "aj",
                graph={"graphServer": {"name": "gs2"}},
                runPolicy={"activeDeadlineSeconds": 4},
            )
        )
        await _running(c, "aj", own_servers=False)
        await c.phase("DistGNNJob", "aj", "Failed", timeout=30)

        async def detached() -> bool:
            return (await c.status("GraphServer", "gs2")).get("attachedJobs") == []

        await c.until("job detached", detached)
        await assert_settled(c)
        assert await c.get("Job", "aj-trainers") is None


def _graphserver(name: str, parts: int) -> dict[str, Any]:
    return {
        "apiVersion": GV,
        "kind": "GraphServer",
        "metadata": {"name": name},
        "spec": {
            "graph": {"partitions": {"manifestURL": f"s3://p/{name}.json"}},
            "partitioning": {"numParts": parts},
        },
    }


async def test_deadline_and_ttl_act_on_time(
    cluster: Cluster, slow_resync: argparse.Namespace
) -> None:
    """With a 300 s resync, a 3 s deadline and a 1 s TTL still act within seconds."""
    c = cluster
    async with Operator(slow_resync):
        await c.create(
            job_manifest(
                "soon",
                graph={"partitions": {"manifestURL": "s3://p/soon.json"}},
                runPolicy={"activeDeadlineSeconds": 3, "ttlSecondsAfterFinished": 1},
            )
        )
        await _running(c, "soon")
        st = await c.phase("DistGNNJob", "soon", "Failed", timeout=PROMPT)
        assert cond(st, "Failed")["reason"] == "DeadlineExceeded"
        await c.until("TTL deletion", lambda: _gone(c, "DistGNNJob", "soon"), timeout=PROMPT)


async def test_waiting_job_starts_when_graphserver_becomes_ready(
    cluster: Cluster, slow_resync: argparse.Namespace
) -> None:
    """No resync needed: a GraphServer's change runs its waiting jobs' passes, and a job's
    change (or deletion) updates the GraphServer's attachedJobs."""
    c = cluster
    async with Operator(slow_resync):
        await c.create(job_manifest("w", graph={"graphServer": {"name": "late"}}))
        st = await c.reason("DistGNNJob", "w", "GraphServerNotFound", timeout=PROMPT)
        assert st["phase"] == "Pending"
        await c.create(_graphserver("late", 2))
        st = await c.reason("DistGNNJob", "w", "GraphServerNotReady", timeout=PROMPT)

        async def attached() -> bool:
            return (await c.status("GraphServer", "late")).get("attachedJobs") == ["w"]

        await c.until("attachedJobs current", attached, timeout=PROMPT)
        await _servers_ready(c, "late-server", 2)
        await c.child("Job", "w-trainers", timeout=PROMPT)
        await c.delete("DistGNNJob", "w")

        async def detached() -> bool:
            return (await c.status("GraphServer", "late")).get("attachedJobs") == []

        await c.until("attachedJobs after delete", detached, timeout=PROMPT)


async def test_missing_graphserver_fails_after_the_wait(cluster: Cluster) -> None:
    c = cluster
    async with Operator(make_args(300, "--graphserver-wait-seconds", "3")):
        await c.create(job_manifest("orphan", graph={"graphServer": {"name": "nope"}}))
        st = await c.phase("DistGNNJob", "orphan", "Failed", timeout=PROMPT)
        failed = cond(st, "Failed")
        assert failed["reason"] == "GraphServerNotFound"
        assert "GraphServer nope did not appear within 3s" in failed["message"]


async def test_canonicalised_quantities_are_not_drift(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """The API server stores 0.5 as 500m and 2048Mi as 2Gi, and drops an env var's empty
    value (the emulator does too): passes that change nothing send no PATCH and post no
    "Updated" event."""
    c = cluster
    res = {"requests": {"cpu": "0.5", "memory": "2048Mi"}, "limits": {"memory": "3072Mi"}}
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "q",
                graph={"partitions": {"manifestURL": "s3://p/q.json"}},
                servers={"resources": res, "podTemplate": {"env": [{"name": "EMPTY"}]}},
                trainers={
                    "replicas": 2,
                    "app": {"name": "node-classification", "epochs": 1},
                    "resources": res,
                },
            )
        )
        sts = await c.child("StatefulSet", "q-server")
        stored = sts["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert stored == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "3Gi"}}
        await _running(c, "q")
        await assert_settled(c)
        assert not [e for e in await c.events("q") if e["reason"] == "Updated"]


async def test_fields_taken_out_of_the_spec_leave_the_children(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A field the user takes out of ``servers`` (a node selector, a label, a toleration, a
    resource limit) leaves the servers' StatefulSet too. Drift compares only the fields the
    operator sets and a merge patch keeps what it does not name, so without the record of
    what was applied last (``distgnn.dev/applied``) such a field stayed on the pods forever.
    What somebody else added to the child (``kubectl rollout restart``'s annotation) stays,
    and a pass after the change writes nothing again."""
    c = cluster
    tpl = {
        "nodeSelector": {"disk": "ssd", "zone": "a"},
        "labels": {"team": "graphs", "tier": "gold"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "priorityClassName": "high",
    }
    res = {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "rm",
                graph={"partitions": {"manifestURL": "s3://p/rm.json"}},
                servers={"resources": res, "podTemplate": tpl},
            )
        )
        sts = await c.child("StatefulSet", "rm-server")
        pod = sts["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "zone": "a"}
        assert pod["metadata"]["labels"]["tier"] == "gold"
        await _running(c, "rm")
        restarted = {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
        await c.patch(
            "StatefulSet",
            "rm-server",
            {"spec": {"template": {"metadata": {"annotations": restarted}}}},
        )
        await c.patch(
            "DistGNNJob",
            "rm",
            {
                "spec": {
                    "servers": {
                        "resources": {"limits": None},
                        "podTemplate": {
                            "nodeSelector": {"zone": None},
                            "labels": {"tier": None},
                            "tolerations": None,
                            "priorityClassName": None,
                        },
                    }
                }
            },
        )

        async def updated() -> dict[str, Any] | None:
            obj = await c.get("StatefulSet", "rm-server")
            tspec = (obj or {})["spec"]["template"]["spec"]
            return obj if "zone" not in tspec.get("nodeSelector", {}) else None

        sts = await c.until("the StatefulSet follows the spec", updated, timeout=PROMPT)
        pod = sts["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}
        assert "tier" not in pod["metadata"]["labels"]
        assert pod["metadata"]["labels"]["team"] == "graphs"
        assert "tolerations" not in pod["spec"] and "priorityClassName" not in pod["spec"]
        assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}
        assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
        await assert_settled(c)


@pytest.mark.parametrize(("code", "hint"), [(403, "gangScheduling.enabled=true"), (404, "CRD")])
async def test_gang_job_without_podgroups_is_held_and_reported(
    cluster: Cluster, operator_args: argparse.Namespace, code: int, hint: str
) -> None:
    c = cluster
    if code == 403:
        c.k.forbidden.add("podgroups")  # RBAC: the chart's gang scheduling is off
    # 404: the emulator does not serve podgroups by default, as a cluster without the CRD
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "gang",
                graph={"partitions": {"manifestURL": "s3://p/g.json"}},
                runPolicy={"schedulingPolicy": {"gang": {"enabled": True}}},
            )
        )
        st = await c.reason("DistGNNJob", "gang", "PodGroupUnavailable")
        assert st["phase"] == "Pending"
        msg = st_msg(st)
        assert f"HTTP {code}" in msg and "held" in msg
        if code == 403:
            assert hint in msg
        ev = await c.event("gang", "PodGroupUnavailable")
        assert ev["type"] == "Warning"
        await asyncio.sleep(1.5)
        assert await c.get("StatefulSet", "gang-server") is None  # held: nothing created
        assert await c.get("Secret", "gang-token") is None


async def test_a_podgroup_name_held_by_somebody_else_is_a_taken_name(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A gang job's PodGroup name held by a PodGroup nothing of ours controls is a taken
    child name as any other (ResourceExists naming it, ``status.takenNames``), not
    PodGroupUnavailable; the job stays held (nothing created before its PodGroup) and
    goes on once the name is free."""
    c = cluster
    c.k.unserved.discard("podgroups")  # scheduler-plugins installed
    theirs = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "gpg"},
        "spec": {"minMember": 1},
    }
    await c.create(theirs)
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "gpg",
                graph={"partitions": {"manifestURL": "s3://p/g.json"}},
                runPolicy={"schedulingPolicy": {"gang": {"enabled": True}}},
            )
        )
        st = await c.reason("DistGNNJob", "gpg", "ResourceExists")
        assert st["phase"] == "Pending"
        assert "PodGroup gpg already exists and is controlled by nothing" in st_msg(st)
        assert st["takenNames"] == [{"kind": "PodGroup", "name": "gpg"}]
        assert (await c.event("gpg", "ResourceExists"))["type"] == "Warning"
        await assert_settled(c)
        assert await c.get("StatefulSet", "gpg-server") is None  # held: nothing created
        await c.delete("PodGroup", "gpg")
        pg = await c.child("PodGroup", "gpg", timeout=PROMPT)
        assert pg["metadata"]["ownerReferences"][0]["name"] == "gpg"
        await c.child("StatefulSet", "gpg-server", timeout=PROMPT)
        st = await c.reason("DistGNNJob", "gpg", "ServersStarting")
        assert "takenNames" not in st


async def test_deleted_children_come_back_at_once_and_servers_roll_on_new_token(
    cluster: Cluster, slow_resync: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(slow_resync):
        await c.create(job_manifest("kids", graph={"partitions": {"manifestURL": "s3://p/k.json"}}))
        sts = await c.child("StatefulSet", "kids-server")
        ann = sts["spec"]["template"]["metadata"]["annotations"]["distgnn.dev/token-hash"]
        for kind, name in (
            ("Service", "kids-server"),
            ("Service", "kids-trainers"),
            ("NetworkPolicy", "kids-server"),
            ("NetworkPolicy", "kids-trainers"),
        ):
            await c.child(kind, name)
            await c.delete(kind, name)
            await c.child(kind, name, timeout=PROMPT)
        # Secrets are not watched (the operator has no list/watch on Secrets): a deleted
        # token Secret comes back at the job's next pass (the resync; here a label change)
        await c.delete("Secret", "kids-token")
        await c.patch("DistGNNJob", "kids", {"metadata": {"labels": {"poke": "1"}}})
        await c.child("Secret", "kids-token", timeout=PROMPT)

        async def rolled() -> bool:
            obj = await c.get("StatefulSet", "kids-server")
            tpl = obj["spec"]["template"]["metadata"].get("annotations") or {}
            return tpl.get("distgnn.dev/token-hash") not in (None, ann)

        await c.until("servers rolled onto the new token", rolled, timeout=PROMPT)


async def test_resource_being_deleted_is_not_reconciled(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        manifest = job_manifest("bye", graph={"partitions": {"manifestURL": "s3://p/b.json"}})
        manifest["metadata"]["finalizers"] = ["example.com/hold"]  # keeps it while deleting
        await c.create(manifest)
        await c.child("Service", "bye-trainers")
        await c.phase("DistGNNJob", "bye", "Starting")
        await c.delete("DistGNNJob", "bye")
        await asyncio.sleep(1.5)  # a pass that read the job before its deletion may finish
        await c.delete("Service", "bye-trainers")
        await asyncio.sleep(2.5)  # two resyncs
        assert await c.get("Service", "bye-trainers") is None


async def test_missing_credentials_secret_is_reported(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    c = cluster
    async with Operator(operator_args):
        await c.create(
            job_manifest(
                "nocreds",
                graph={"partitions": {"manifestURL": "s3://p/n.json"}},
                storage={"credentialsSecret": {"name": "missing-creds"}},
            )
        )
        st = await c.reason("DistGNNJob", "nocreds", "CredentialsSecretNotFound")
        assert st["phase"] == "Pending" and "missing-creds" in st_msg(st)
        ev = await c.event("nocreds", "CredentialsSecretNotFound")
        assert ev["type"] == "Warning"
        gs = _graphserver("gsnocreds", 1)
        gs["spec"]["storage"] = {"credentialsSecret": {"name": "missing-creds"}}
        await c.create(gs)
        st = await c.phase("GraphServer", "gsnocreds", "Pending")
        assert "missing-creds" in cond(st, "ServersReady")["message"]
        ev = await c.event("gsnocreds", "CredentialsSecretNotFound")
        assert ev["type"] == "Warning"
        await c.create({**CREDS, "metadata": {"name": "missing-creds"}})
        await c.reason("DistGNNJob", "nocreds", "ServersStarting")
        await c.phase("GraphServer", "gsnocreds", "Starting")


async def test_a_child_name_held_by_somebody_else_is_reported_and_the_job_held(
    cluster: Cluster, operator_args: argparse.Namespace
) -> None:
    """A create that finds the name taken by an object nothing of ours controls (a user's
    own Service, or a GraphServer of the same name: children are named after their owner)
    holds the resource Pending with reason ResourceExists naming the object, a Warning
    event, and goes on once the name is free (was: a silent 409 on every pass)."""
    c = cluster
    async with Operator(operator_args):
        await c.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "taken-server"},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
            }
        )
        await c.create(
            job_manifest("taken", graph={"partitions": {"manifestURL": "s3://p/t.json"}})
        )
        st = await c.reason("DistGNNJob", "taken", "ResourceExists")
        assert st["phase"] == "Pending"
        assert "Service taken-server already exists" in st_msg(st), st_msg(st)
        assert "not by DistGNNJob taken" in st_msg(st)
        assert (await c.event("taken", "ResourceExists"))["type"] == "Warning"
        assert await c.get("StatefulSet", "taken-server") is not None  # the rest is created
        # held: each pass (a resync every second) reads who holds the name and sends no
        # POST (was: the refused create again on every pass)
        await assert_settled(c)
        n, writes = len(c.k.calls), len(c.k.writes)

        async def read_twice() -> bool:
            return c.k.calls[n:].count(("GET", c._url("Service", "taken-server"))) >= 2

        await c.until("two passes reading the name's holder", read_twice)
        assert ("POST", c._url("Service")) not in c.k.calls[n:], c.k.calls[n:]
        assert c.k.writes_since(writes) == []
        await c.delete("Service", "taken-server")
        svc = await c.child("Service", "taken-server")
        assert svc["metadata"]["ownerReferences"][0]["name"] == "taken"
        await c.reason("DistGNNJob", "taken", "ServersStarting")
        # a GraphServer named like the job wants the same Secret, Service and StatefulSet
        await c.create(_graphserver("taken", 2))
        st = await c.phase("GraphServer", "taken", "Pending")
        assert "controlled by DistGNNJob taken, not by GraphServer taken" in str(
            st["conditions"]
        ), st
        assert (await c.event("taken", "ResourceExists"))["type"] == "Warning"
