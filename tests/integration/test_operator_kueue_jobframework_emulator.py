"""What the Kueue integration (``--kueue``) does besides admitting and evicting, as Kueue's
jobframework does for its own jobs, against the emulator (the test plays Kueue): the
assigned flavors' node labels and tolerations on the pods, the partitioning pod inside
the quota, deactivation while the user suspends the job, and a Workload rebuilt when the
job's pod sets change before admission."""

from __future__ import annotations

from typing import Any

from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    _servers_ready,
    _succeed_partition,
    assert_settled,
    cluster,
    cond,
    job_manifest,
    make_args,
    phase_reason,
    st_msg,
)
from test_operator_kueue_emulator import ADMITTED, QUEUE, _c, _queued, _stopped, _workload

FLAVORS = "/apis/kueue.x-k8s.io/v1beta1/resourceflavors"
SPOT = {"cloud.example.com/spot": "true"}
SPOT_TOLERATION = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


async def _flavor(c: Cluster, name: str, labels: dict[str, str], tolerations: list[Any]) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels, "tolerations": tolerations},
    }
    await c._req("POST", FLAVORS, body)


def _admitted(**flavors: str) -> dict[str, Any]:
    """ADMITTED, each pod set named in ``flavors`` assigned that flavor for cpu and memory."""
    sets = [
        {"name": ps, "flavors": {"cpu": fl, "memory": fl}, "count": 1} for ps, fl in flavors.items()
    ]
    return {**ADMITTED, "admission": {"clusterQueue": "cq", "podSetAssignments": sets}}


def _evicted(reason: str, message: str) -> dict[str, Any]:
    return {
        "conditions": [*ADMITTED["conditions"], _c("Evicted", "True", reason, message)],
    }


async def _released(c: Cluster, name: str) -> dict[str, Any]:
    async def released() -> dict[str, Any] | None:
        got = await c.get("Workload", name)
        qr = cond(got["status"], "QuotaReserved") if got else {}
        return (
            got if got and not got["status"].get("admission") and qr["status"] == "False" else None
        )

    return dict(await c.until("quota released", released))


def _pod_spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    return dict(obj["spec"]["template"]["spec"])


async def test_flavors_node_labels_and_tolerations_go_on_the_pods_until_evicted(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
) -> None:
    c = cluster
    await _flavor(c, "spot", SPOT, [SPOT_TOLERATION])
    await _flavor(c, "on-demand", {"cloud.example.com/spot": "false"}, [])
    job = _queued("fl")
    job["spec"]["servers"] = {"podTemplate": {"nodeSelector": {"pool": "mem"}}}
    async with Operator(make_args(1, "--kueue")):
        await c.create(job)
        name = (await _workload(c))["metadata"]["name"]
        await c.reason("DistGNNJob", "fl", "WaitingForAdmission")
        await c.patch(
            "Workload", name, {"status": _admitted(servers="spot", trainers="on-demand")}, "status"
        )
        await _servers_ready(c, "fl-server", 2)
        servers = _pod_spec(await c.get("StatefulSet", "fl-server"))
        assert servers["nodeSelector"] == {"pool": "mem", **SPOT}  # merged with the user's
        assert servers["tolerations"] == [SPOT_TOLERATION]
        trainers = _pod_spec(await c.child("Job", "fl-trainers"))
        assert trainers["nodeSelector"] == {"cloud.example.com/spot": "false"}
        assert "tolerations" not in trainers
        await assert_settled(c)  # injected once: no drift patch pass after pass
        # evicted: stopped, and what admission put on the server template is gone
        await c.patch("Workload", name, {"status": _evicted("Preempted", "p")}, "status")
        await c.until("the job stopped", lambda: _stopped(c, "fl"))

        async def restored() -> bool:
            spec = _pod_spec(await c.get("StatefulSet", "fl-server"))
            return spec.get("nodeSelector") == {"pool": "mem"} and not spec.get("tolerations")

        await c.until("the server template restored", restored)
        await _released(c, name)
        await assert_settled(c)


async def test_a_flavor_conflicting_with_the_node_selector_fails_the_job(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    await _flavor(c, "spot", SPOT, [])
    job = _queued("cf")
    job["spec"]["servers"] = {"podTemplate": {"nodeSelector": {"cloud.example.com/spot": "no"}}}
    async with Operator(make_args(1, "--kueue")):
        await c.create(job)
        name = (await _workload(c))["metadata"]["name"]
        await c.patch("Workload", name, {"status": _admitted(servers="spot")}, "status")
        st = await c.phase("DistGNNJob", "cf", "Failed")
        assert phase_reason(st) == "FailedToStart"
        assert "cloud.example.com/spot=no" in st_msg(st) and "spot=true" in st_msg(st)
        assert await _stopped(c, "cf")  # nothing ran
        wl = await c.get("Workload", name)
        assert wl is not None
        fin = cond(wl["status"], "Finished")
        assert (fin["status"], fin["reason"]) == ("True", "FailedToStart")
        await assert_settled(c)


async def test_partitioning_waits_for_admission_and_is_in_the_quota(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    await _flavor(c, "spot", SPOT, [])
    job = job_manifest("pq")  # a source graph: partitioned by the job
    job["metadata"]["labels"] = {QUEUE: "team-a"}
    async with Operator(make_args(1, "--kueue")):
        await c.create(job)
        wl = await _workload(c)
        name = wl["metadata"]["name"]
        sets = [(p["name"], p["count"]) for p in wl["spec"]["podSets"]]
        assert sets == [("partition", 1), ("servers", 2), ("trainers", 2)]
        await c.reason("DistGNNJob", "pq", "WaitingForAdmission")
        await assert_settled(c)
        assert await c.get("Job", "pq-partition") is None  # not before admission
        await c.patch("Workload", name, {"status": _admitted(partition="spot")}, "status")
        part = _pod_spec(await c.child("Job", "pq-partition"))
        assert part["nodeSelector"] == SPOT  # its flavor too
        await c.phase("DistGNNJob", "pq", "Partitioning")
        await _succeed_partition(c, "pq")
        await _servers_ready(c, "pq-server", 2)

        async def reclaimed() -> dict[str, Any] | None:
            got = await c.get("Workload", name)
            return got if got and got["status"].get("reclaimablePods") else None

        wl = await c.until("the partitioning pod's quota given back", reclaimed)
        assert wl["status"]["reclaimablePods"] == [{"name": "partition", "count": 1}]
        await c.child("Job", "pq-trainers")
        await assert_settled(c)
        # evicted: servers and trainers stop; the finished partitioning Job is kept
        await c.patch("Workload", name, {"status": _evicted("Preempted", "p")}, "status")
        await c.until("the job stopped", lambda: _stopped(c, "pq"))
        await _released(c, name)
        assert await c.get("Job", "pq-partition") is not None
        await assert_settled(c)


async def test_a_running_partitioning_stops_on_eviction(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    job = job_manifest("pe")
    job["metadata"]["labels"] = {QUEUE: "team-a"}
    async with Operator(make_args(1, "--kueue")):
        await c.create(job)
        name = (await _workload(c))["metadata"]["name"]
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await c.child("Job", "pe-partition")
        await c.patch("Workload", name, {"status": _evicted("Preempted", "p")}, "status")

        async def gone() -> bool:
            return await c.get("Job", "pe-partition") is None

        await c.until("the partitioning Job deleted", gone)
        await _released(c, name)
        await assert_settled(c)


async def test_suspending_an_admitted_job_deactivates_its_workload(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        await c.create(_queued("sq"))
        wl = await _workload(c)
        name = wl["metadata"]["name"]
        assert wl["spec"]["active"] is True
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await _servers_ready(c, "sq-server", 2)
        await c.child("Job", "sq-trainers")
        await c.patch("DistGNNJob", "sq", {"spec": {"runPolicy": {"suspend": True}}})

        async def active(want: bool) -> dict[str, Any] | None:
            got = await c.get("Workload", name)
            return got if got and got["spec"].get("active") is want else None

        await c.until("the Workload deactivated", lambda: active(False))
        await c.until("the job stopped", lambda: _stopped(c, "sq"))
        # Kueue evicts a deactivated Workload; the operator gives its quota back
        inactive = _evicted("InactiveWorkload", "The workload is deactivated")
        await c.patch("Workload", name, {"status": inactive}, "status")
        wl = await _released(c, name)
        assert cond(wl["status"], "QuotaReserved")["message"] == "The workload is deactivated"
        st = await c.reason("DistGNNJob", "sq", "Suspended")
        assert st["phase"] == "Suspended"
        await assert_settled(c)
        # resumed: reactivated, so Kueue queues it again; it waits for admission
        await c.patch("DistGNNJob", "sq", {"spec": {"runPolicy": {"suspend": False}}})
        await c.until("the Workload reactivated", lambda: active(True))
        await c.reason("DistGNNJob", "sq", "WaitingForAdmission")
        await assert_settled(c)
        assert await _stopped(c, "sq")


async def test_a_deactivation_kueue_makes_itself_is_not_undone(
    cluster: Cluster,  # noqa: F811
) -> None:
    """Kueue deactivates a Workload itself (its requeuing limit reached): the operator,
    whose user did not suspend, leaves ``spec.active`` false and the job stopped; only a
    suspend and resume of the user's reactivates it."""
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        await c.create(_queued("kd"))
        name = (await _workload(c))["metadata"]["name"]
        await c.patch("Workload", name, {"status": ADMITTED}, "status")
        await _servers_ready(c, "kd-server", 2)
        await c.child("Job", "kd-trainers")
        await c.patch("Workload", name, {"spec": {"active": False}})
        limit = _evicted("InactiveWorkload", "The workload is deactivated due to exceeding")
        await c.patch("Workload", name, {"status": limit}, "status")
        await c.until("the job stopped", lambda: _stopped(c, "kd"))
        await _released(c, name)
        await assert_settled(c)
        wl = await c.get("Workload", name)
        assert wl is not None and wl["spec"]["active"] is False
        await c.patch("DistGNNJob", "kd", {"spec": {"runPolicy": {"suspend": True}}})
        await c.reason("DistGNNJob", "kd", "Suspended")
        await assert_settled(c)
        await c.patch("DistGNNJob", "kd", {"spec": {"runPolicy": {"suspend": False}}})

        async def reactivated() -> bool:
            got = await c.get("Workload", name)
            return bool(got and got["spec"].get("active") is True)

        await c.until("the Workload reactivated by the user's resume", reactivated)
        await assert_settled(c)


async def test_a_job_created_suspended_gets_an_inactive_workload(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    job = _queued("cs")
    job["spec"]["runPolicy"] = {"suspend": True}
    async with Operator(make_args(1, "--kueue")):
        await c.create(job)
        wl = await _workload(c)
        assert wl["spec"]["active"] is False  # not queued while the user suspends it
        await c.reason("DistGNNJob", "cs", "Suspended")
        await assert_settled(c)


async def test_workload_recreated_when_pod_sets_change_before_admission(
    cluster: Cluster,  # noqa: F811
) -> None:
    c = cluster
    async with Operator(make_args(1, "--kueue")):
        await c.create(_queued("rc"))
        old = await _workload(c)
        await c.reason("DistGNNJob", "rc", "WaitingForAdmission")
        trainers = {"replicas": 3, "app": {"name": "node-classification", "epochs": 1}}
        await c.patch("DistGNNJob", "rc", {"spec": {"trainers": trainers}})

        async def rebuilt() -> dict[str, Any] | None:
            items = await c.items("Workload")
            new = [w for w in items if w["metadata"]["uid"] != old["metadata"]["uid"]]
            return new[0] if new and len(items) == 1 else None

        wl = await c.until("the Workload re-created", rebuilt)
        assert wl["metadata"]["name"] == old["metadata"]["name"]
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("servers", 2),
            ("trainers", 3),
        ]
        await assert_settled(c)
        # admitted: a change is left to the running job (Kueue keeps its pod sets)
        await c.patch("Workload", wl["metadata"]["name"], {"status": ADMITTED}, "status")
        await _servers_ready(c, "rc-server", 2)
        await c.child("Job", "rc-trainers")
        trainers["replicas"] = 4
        await c.patch("DistGNNJob", "rc", {"spec": {"trainers": trainers}})
        await assert_settled(c)
        (same,) = await c.items("Workload")
        assert same["metadata"]["uid"] == wl["metadata"]["uid"]
        # suspended: deactivated, evicted and released, then rebuilt from the edited spec
        await c.patch("DistGNNJob", "rc", {"spec": {"runPolicy": {"suspend": True}}})
        inactive = _evicted("InactiveWorkload", "The workload is deactivated")
        await c.patch("Workload", wl["metadata"]["name"], {"status": inactive}, "status")
        old = wl
        wl = await c.until("the Workload re-created", rebuilt)
        assert [p["count"] for p in wl["spec"]["podSets"]] == [2, 4]
        assert wl["spec"]["active"] is False
        await assert_settled(c)


async def test_a_started_job_is_left_running_when_its_flavor_cannot_be_read(
    cluster: Cluster,  # noqa: F811
) -> None:
    """A flavor deleted (or forbidden) after admission does not stop a started job nor
    patch its pods' node labels away: the pass fails, is retried and says so once; read
    again, nothing is written."""
    c = cluster
    await _flavor(c, "spot", SPOT, [SPOT_TOLERATION])
    async with Operator(make_args(1, "--kueue")):
        await c.create(_queued("gone"))
        name = (await _workload(c))["metadata"]["name"]
        await c.patch("Workload", name, {"status": _admitted(servers="spot")}, "status")
        await _servers_ready(c, "gone-server", 2)
        await c.child("Job", "gone-trainers")
        await c._req("DELETE", f"{FLAVORS}/spot")
        ev = await c.event("gone", "ReconcileFailed")
        assert "ResourceFlavor spot" in ev["message"]
        await assert_settled(c, 2.5)  # retried pass after pass: no write
        servers = _pod_spec(await c.get("StatefulSet", "gone-server"))
        assert servers["nodeSelector"] == SPOT and servers["tolerations"] == [SPOT_TOLERATION]
        assert await c.get("Job", "gone-trainers") is not None
        assert (await c.status("DistGNNJob", "gone")).get("phase") != "Suspended"
        await _flavor(c, "spot", SPOT, [SPOT_TOLERATION])
        await assert_settled(c)
