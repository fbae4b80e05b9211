"""A co-located DistGNNJob on the Kubernetes API emulator: no server StatefulSet; the
trainer Job (one pod per partition, its server as a sidecar) starts once partitioned,
its ready pods count as ready servers, and the job runs and succeeds as any other; on an
API server older than 1.29 (no native sidecars) the job fails and nothing is created."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from test_operator_emulator import (  # noqa: F401  (fixtures)
    Cluster,
    Operator,
    _pod,
    _succeed_partition,
    assert_settled,
    cluster,
    cond,
    job_manifest,
    operator_args,
)

pytestmark = pytest.mark.timeout(120)


async def test_colocated_job_lifecycle(
    cluster: Cluster,  # noqa: F811  (the emulator module's fixtures)
    operator_args: argparse.Namespace,  # noqa: F811
) -> None:
    c = cluster
    c.k.server_version = "1.29"  # the first release with native sidecars on by default
    async with Operator(operator_args):
        trainers = {
            "replicas": 4,
            "colocate": True,
            "app": {"name": "node-classification", "epochs": 1},
        }
        await c.create(job_manifest("colo", trainers=trainers))
        await c.child("Service", "colo-trainers")
        await c.phase("DistGNNJob", "colo", "Partitioning")
        assert await c.get("Job", "colo-trainers") is None

        await _succeed_partition(c, "colo")
        tjob = await c.child("Job", "colo-trainers")
        assert tjob["spec"]["completions"] == 2
        pod = tjob["spec"]["template"]["spec"]
        assert pod["initContainers"][0]["restartPolicy"] == "Always"
        for kind in ("StatefulSet", "NetworkPolicy"):
            assert await c.get(kind, "colo-server") is None
        pol = await c.child("NetworkPolicy", "colo-trainers")  # guards the co-located pods
        assert pol["spec"]["podSelector"]["matchLabels"]["distgnn.dev/role"] == "trainer"

        await c.patch("Job", "colo-trainers", {"status": {"active": 2, "ready": 0}}, "status")
        st = await c.phase("DistGNNJob", "colo", "Starting")
        await c.patch("Job", "colo-trainers", {"status": {"active": 2, "ready": 2}}, "status")
        st = await c.phase("DistGNNJob", "colo", "Running")
        assert st["partitionsReady"] == 2

        # one pod done before the other: its server served until then, the job runs on
        await c.patch(
            "Job", "colo-trainers", {"status": {"active": 1, "ready": 1, "succeeded": 1}}, "status"
        )

        async def one_done() -> dict[str, Any] | None:
            st = await c.status("DistGNNJob", "colo")
            return st if st.get("trainers", {}).get("succeeded") == 1 else None

        st = await c.until("one pod done", one_done)
        assert (st["phase"], st["partitionsReady"]) == ("Running", 2), st

        metrics = {"test_accuracy": 0.8, "val_accuracy": 0.78, "epochs": 1}
        await c.create(_pod("colo-trainers-0-abc", "colo-trainers", 0, 0, json.dumps(metrics)))
        done = {"active": 0, "succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}
        await c.patch("Job", "colo-trainers", {"status": done}, "status")
        st = await c.phase("DistGNNJob", "colo", "Succeeded")
        assert st["metrics"]["testAccuracy"] == metrics["test_accuracy"]
        assert await c.get("StatefulSet", "colo-server") is None
        await assert_settled(c)


@pytest.mark.parametrize("minor", ["1.28", "1.26"])
async def test_colocated_job_fails_before_sidecars(
    cluster: Cluster,  # noqa: F811
    operator_args: argparse.Namespace,  # noqa: F811
    minor: str,
) -> None:
    c = cluster
    c.k.server_version = minor
    async with Operator(operator_args):
        trainers = {"replicas": 2, "colocate": True, "app": {"name": "node-classification"}}
        await c.create(job_manifest("colo", trainers=trainers))
        st = await c.phase("DistGNNJob", "colo", "Failed")
        failed = cond(st, "Failed")
        assert failed["reason"] == "SidecarsUnsupported"
        assert f"v{minor}" in failed["message"] and "1.29" in failed["message"]
        assert cond(st, "Created")["status"] == "False"
        ev = await c.event("colo", "SidecarsUnsupported")
        assert ev["type"] == "Warning"
        assert f"v{minor}" in ev["message"] and "without trainers.colocate" in ev["message"]
        await assert_settled(c)
        made = [
            f"{kind}/{o['metadata']['name']}"
            for kind in ("Secret", "Job", "Service", "StatefulSet", "NetworkPolicy")
            for o in await c.items(kind)
        ]
        assert made == ["Secret/s3-creds"]  # the test's own credentials only
        # a job without colocate runs on the same cluster
        await c.create(job_manifest("tcp"))
        await c.phase("DistGNNJob", "tcp", "Partitioning")
