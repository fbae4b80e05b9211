"""A pass where nothing changed sends no write, in every state of every kind.

The operator (kopf, resync every second) on the emulator, which stores what a real API
server stores (defaults of the built-in kinds, canonical quantities, omitted empty
fields) and carries status the way the test (standing in for the kubelet and the
controllers) writes it. Each resource is brought to a state, then over several resync
passes of each nothing is written: no PATCH, PUT, POST or DELETE, and no Event.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    SERVE_NO_OBJECT,
    SERVE_UNREACHABLE,
    Cluster,
    Operator,
    _graphserver,
    _running,
    _servers_ready,
    assert_settled,
    cluster,
    crash_looping_status,
    job_manifest,
    make_args,
    operator_args,
    server_pod,
    st_msg,
)
from test_operator_stuck_pods import (
    colocated_status,
    sidecar_crash_status,
    trainer_pod,
    waiting_status,
)
from tests.support.emulator import kopf_diffbase, kopf_finalizer_attempt

from distgnn import contract
from distgnn_operator.finalizer import FINALIZER

pytestmark = pytest.mark.timeout(300)

PARTS = {"partitions": {"manifestURL": "s3://p/x.json"}}
QUANTITIES = {"requests": {"cpu": "1000m", "memory": "1024Mi"}, "limits": {"cpu": 2}}


async def passes_in_quiet(c: Cluster, names: list[tuple[str, str]], passes: int = 2) -> None:
    """Until every resource in ``names`` had ``passes`` more passes (resyncs), nothing is
    written (once kopf's finalizer is on each: a pass puts it there)."""

    async def finalized() -> bool:
        objs = [await c.get(kind, name) for kind, name in names]
        return all(FINALIZER in ((o or {})["metadata"].get("finalizers") or []) for o in objs)

    await c.until("kopf's finalizer on each", finalized)
    await asyncio.sleep(1.0)  # in-flight events of the last change
    n, calls = len(c.k.writes), len(c.k.calls)

    def seen() -> dict[str, int]:
        window = c.k.calls[calls:]
        return {name: window.count(("GET", c._url(kind, name))) for kind, name in names}

    async def enough() -> bool:
        return min(seen().values()) >= passes

    await c.until(f"{passes} passes of each resource", enough, timeout=120)
    writes = [w for w in c.k.writes_since(n) if not (kopf_diffbase(w) or kopf_finalizer_attempt(w))]
    assert writes == [], (writes, seen())
    once = [w.name for w in c.k.writes_since(n) if kopf_diffbase(w)]
    assert len(once) == len(set(once)), once  # kopf's diff-base: once, never each pass


@pytest.fixture
def resync2() -> argparse.Namespace:
    """A resync every 2 s: several passes of each resource, at half the load of 1 s."""
    return make_args(2)


async def test_every_job_state_writes_nothing_on_an_unchanged_pass(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    resync2: argparse.Namespace,
) -> None:
    """Jobs partitioning, starting (one with a crash-looping server pod named in its
    status, one with a trainer pod that cannot pull its image, a co-located one with a
    crash-looping server sidecar, a co-located one whose trainer container cannot pull
    its image beside ready servers), running (own servers, co-located), suspended, and
    pending on a missing credentials Secret and on PodGroups (succeeded and failed jobs:
    test_operator_emulator.py's lifecycle tests)."""
    c = cluster
    async with Operator(resync2):
        servers = {"resources": QUANTITIES, "podTemplate": {"env": [{"name": "EMPTY"}]}}
        await c.create(job_manifest("parting", servers=servers))
        await c.create(job_manifest("starting", graph=PARTS, servers=servers))
        await c.create(job_manifest("running", graph=PARTS, servers=servers))
        await c.create(job_manifest("sus", graph=PARTS, runPolicy={"suspend": True}))
        colo = {"replicas": 2, "colocate": True, "app": {"name": "node-classification"}}
        await c.create(job_manifest("colo", graph=PARTS, trainers=colo | {"resources": QUANTITIES}))
        await c.create(
            job_manifest(
                "nocreds", graph=PARTS, storage={"credentialsSecret": {"name": "missing"}}
            ),
        )
        gang = {"schedulingPolicy": {"gang": {"enabled": True}}}
        await c.create(job_manifest("gang", graph=PARTS, runPolicy=gang))  # no PodGroup CRD
        await c.create(job_manifest("crashing", graph=PARTS))
        await server_pod(c, "crashing-server", 0, contract.LABEL_JOB, "crashing")
        await c.patch("StatefulSet", "crashing-server", {"status": {"replicas": 2}}, "status")
        crash = crash_looping_status(1, SERVE_UNREACHABLE, 4)
        await c.patch("Pod", "crashing-server-0", {"status": crash})

        async def named() -> bool:
            st = await c.status("DistGNNJob", "crashing")  # no conditions before its 1st pass
            return bool(st.get("conditions")) and "CrashLoopBackOff" in st_msg(st)

        await c.until("the crash-looping pod named", named)
        # a trainer pod that cannot start; a co-located pod whose server sidecar crash-loops
        await c.create(job_manifest("tpend", graph=PARTS))
        await _servers_ready(c, "tpend-server", 2)
        await c.child("Job", "tpend-trainers")
        await trainer_pod(c, "tpend-trainers", 1, waiting_status("ImagePullBackOff", "x"))
        await c.patch("Job", "tpend-trainers", {"status": {"active": 2, "ready": 1}}, "status")
        await c.create(job_manifest("colocrash", graph=PARTS, trainers=colo))
        await c.child("Job", "colocrash-trainers")
        sidecar = sidecar_crash_status(1, SERVE_UNREACHABLE, 3)
        await trainer_pod(c, "colocrash-trainers", 0, sidecar, colocated=True)
        await c.patch("Job", "colocrash-trainers", {"status": {"active": 2, "ready": 0}}, "status")
        # co-located, its servers ready, a trainer container that cannot pull its image
        await c.create(job_manifest("colopull", graph=PARTS, trainers=colo))
        await c.child("Job", "colopull-trainers")
        pull = {"waiting": {"reason": "ImagePullBackOff", "message": "x"}}
        run = {"running": {"startedAt": "2026-11-25T14:00:01Z"}}
        await trainer_pod(c, "colopull-trainers", 0, colocated_status(pull), colocated=True)
        await trainer_pod(c, "colopull-trainers", 1, colocated_status(run, True), colocated=True)
        await c.patch("Job", "colopull-trainers", {"status": {"active": 2, "ready": 1}}, "status")

        async def pods_named() -> bool:
            a = st_msg(await c.status("DistGNNJob", "tpend"))
            b = st_msg(await c.status("DistGNNJob", "colocrash"))
            cp = st_msg(await c.status("DistGNNJob", "colopull"))
            return (
                "ImagePullBackOff" in a
                and "(container server): CrashLoopBackOff" in b
                and "(container trainer): ImagePullBackOff" in cp
            )

        await c.until("the stuck trainer pods named", pods_named)

        await c.phase("DistGNNJob", "parting", "Partitioning")
        await c.phase("DistGNNJob", "starting", "Starting")
        await c.phase("DistGNNJob", "sus", "Suspended")
        await c.reason("DistGNNJob", "nocreds", "CredentialsSecretNotFound")
        await c.reason("DistGNNJob", "gang", "PodGroupUnavailable")
        await _running(c, "running")
        await c.child("Job", "colo-trainers")
        await c.patch("Job", "colo-trainers", {"status": {"active": 2, "ready": 2}}, "status")
        await c.phase("DistGNNJob", "colo", "Running")
        names = ["parting", "starting", "running", "sus", "colo", "nocreds", "gang", "crashing"]
        names += ["tpend", "colocrash", "colopull"]
        await passes_in_quiet(c, [("DistGNNJob", n) for n in names])


async def test_graphserver_states_and_attached_jobs_write_nothing_on_an_unchanged_pass(
    cluster: Cluster,  # noqa: F811
    resync2: argparse.Namespace,
) -> None:
    """GraphServers partitioning, starting (a job waiting for it; another with a server
    pod that crash-loops, which a job waiting for it names), failed on a server's
    configuration error (its pods kept; a job waiting for it names the failure) and ready
    (a job running on it), a job waiting for a GraphServer that does not exist, then a
    deletion held by the attached job (phase Terminating): nothing is written while
    nothing changes."""
    c = cluster
    async with Operator(resync2):
        parting = _graphserver("gsp", 2)
        parting["spec"]["graph"] = {"source": {"url": "s3://graphs/cora.npz"}}
        parting["spec"]["servers"] = {"resources": QUANTITIES}
        await c.create(parting)
        await c.create(_graphserver("gss", 2))
        await c.create(_graphserver("gsr", 2))
        await c.create(_graphserver("gsx", 2))
        await server_pod(c, "gsx-server", 1, contract.LABEL_GRAPHSERVER, "gsx")
        await c.patch("StatefulSet", "gsx-server", {"status": {"replicas": 2}}, "status")
        crash = crash_looping_status(2, SERVE_NO_OBJECT, 2)
        await c.patch("Pod", "gsx-server-1", {"status": crash})
        await c.create(_graphserver("gsk", 2))  # Starting: a server pod crash-loops (exit 1)
        await server_pod(c, "gsk-server", 0, contract.LABEL_GRAPHSERVER, "gsk")
        await c.patch("StatefulSet", "gsk-server", {"status": {"replicas": 2}}, "status")
        crash = crash_looping_status(1, SERVE_UNREACHABLE, 3)
        await c.patch("Pod", "gsk-server-0", {"status": crash})
        await c.create(job_manifest("onstuck", graph={"graphServer": {"name": "gsk"}}))
        await c.create(job_manifest("waits", graph={"graphServer": {"name": "gss"}}))
        await c.create(job_manifest("onfailed", graph={"graphServer": {"name": "gsx"}}))
        await c.create(job_manifest("orphan", graph={"graphServer": {"name": "nope"}}))
        await _servers_ready(c, "gsr-server", 2)
        await c.phase("GraphServer", "gsr", "Ready")
        await c.create(job_manifest("att", graph={"graphServer": {"name": "gsr"}}))
        await _running(c, "att", own_servers=False)
        await c.phase("GraphServer", "gsp", "Partitioning")
        await c.phase("GraphServer", "gss", "Starting")
        await c.phase("GraphServer", "gsx", "Failed")
        await c.reason("DistGNNJob", "waits", "GraphServerNotReady")

        async def names_failure() -> bool:
            return "it is Failed: ServerConfigError" in st_msg(
                await c.status("DistGNNJob", "onfailed")
            )

        await c.until("the Failed GraphServer named", names_failure)

        async def names_stuck_pod() -> bool:
            msg = st_msg(await c.status("DistGNNJob", "onstuck"))
            return "it is Starting: ServersStarting: 0/2 servers ready; pod gsk-server-0" in msg

        await c.until("the GraphServer's stuck pod named", names_stuck_pod)
        await c.reason("DistGNNJob", "orphan", "GraphServerNotFound")

        async def attached() -> Any:
            return (await c.status("GraphServer", "gsr")).get("attachedJobs") == ["att"]

        await c.until("attachedJobs current", attached)
        names = [("GraphServer", n) for n in ("gsp", "gss", "gsr", "gsx", "gsk")]
        names += [("DistGNNJob", n) for n in ("waits", "orphan", "att", "onfailed", "onstuck")]
        await passes_in_quiet(c, names)

        await c.delete("GraphServer", "gsr")  # held by "att"
        await c.phase("GraphServer", "gsr", "Terminating")
        await c.event("gsr", "AttachedJobs")
        m = len(c.k.calls)

        async def att_saw_it() -> bool:  # its one change: the GraphServer is going
            return c.k.calls[m:].count(("GET", c._url("DistGNNJob", "att"))) >= 2

        await c.until("the attached job's passes", att_saw_it)
        # the held deletion rechecks (reads) at every resync; a kopf retry would write
        # its progress annotation every 5 s: six reads of the GraphServer outlast that
        await passes_in_quiet(c, [("GraphServer", "gsr"), ("DistGNNJob", "att")], passes=6)
        await c.delete("DistGNNJob", "att")  # the deletion goes on at once
        await c.until("GraphServer deleted", lambda: _gone(c, "GraphServer", "gsr"))


async def _gone(c: Cluster, kind: str, name: str) -> bool:
    return await c.get(kind, name) is None


async def test_a_failing_pass_posts_one_event_not_one_per_retry(
    cluster: Cluster,  # noqa: F811
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    """A pass that fails the same way on every resync (here: NetworkPolicies forbidden)
    posts one Warning ReconcileFailed, not an Event per pass and retry (kopf's own)."""
    c = cluster
    c.k.forbidden.add("networkpolicies")
    async with Operator(operator_args):
        await c.create(job_manifest("nope", graph=PARTS))
        ev = await c.event("nope", "ReconcileFailed")
        assert ev["type"] == "Warning" and "HTTP 403" in ev["message"], ev
        await assert_settled(c, 3.5)
        assert [e["reason"] for e in await c.events("nope")] == ["ReconcileFailed"]


async def test_a_held_name_sends_no_create_after_an_operator_restart(
    cluster: Cluster,  # noqa: F811
    resync2: argparse.Namespace,
) -> None:
    """A job held because a user's Service has its server Service's name (ResourceExists):
    a new operator process (no memory of the refused create) reads who holds the name, as
    its status says it is taken, and sends nothing, its first pass included."""
    c = cluster
    user_svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "taken-server"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }
    await c.create(user_svc)
    async with Operator(resync2):
        await c.create(job_manifest("taken", graph=PARTS))
        await c.reason("DistGNNJob", "taken", "ResourceExists")
        await passes_in_quiet(c, [("DistGNNJob", "taken")], passes=1)
    n, calls = len(c.k.writes), len(c.k.calls)
    async with Operator(resync2):
        await passes_in_quiet(c, [("DistGNNJob", "taken")])
    assert ("GET", c._url("Service", "taken-server")) in c.k.calls[calls:]
    assert ("POST", c._url("Service")) not in c.k.calls[calls:], c.k.calls[calls:]
    assert [w for w in c.k.writes_since(n) if not kopf_finalizer_attempt(w)] == []
    st = await c.status("DistGNNJob", "taken")
    assert st["takenNames"] == [{"kind": "Service", "name": "taken-server"}]
    # the names are state of their own: a message in other words (a later wording) changes
    # nothing a new operator process does but that status, written back once
    conds = [
        {**cd, "message": "reworded"} if cd["reason"] == "ResourceExists" else cd
        for cd in st["conditions"]
    ]
    await c.patch("DistGNNJob", "taken", {"status": {"conditions": conds}}, "status")
    calls = len(c.k.calls)
    async with Operator(resync2):

        async def rewritten() -> bool:
            return "reworded" not in st_msg(await c.status("DistGNNJob", "taken"))

        await c.until("the status written back", rewritten)
        await passes_in_quiet(c, [("DistGNNJob", "taken")])
    assert ("POST", c._url("Service")) not in c.k.calls[calls:], c.k.calls[calls:]
