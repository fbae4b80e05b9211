"""Live progress in a DistGNNJob's status and the operator's metrics, against kmock's
emulator: the real operator (kopf, our clients) reads a real rank-0 ``/progress``
endpoint (``distgnn.train.telemetry.ProgressServer`` on 127.0.0.1), found through the
rank-0 pod's IP and its ``progress`` container port."""

from __future__ import annotations

import argparse
import asyncio
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from prometheus_client.parser import text_string_to_metric_families
from test_operator_emulator import Cluster, _servers_ready, cluster, job_manifest

from distgnn.metrics_http import serve
from distgnn.train.telemetry import ProgressServer
from distgnn_operator.__main__ import build_parser, setup
from distgnn_operator.reconcile import OperatorContext

pytestmark = pytest.mark.timeout(120)
__all__ = ["cluster"]  # the emulator fixture, shared with test_operator_emulator


@pytest.fixture
def rank0() -> Iterator[ProgressServer]:
    srv = ProgressServer("127.0.0.1", 0)
    try:
        yield srv
    finally:
        srv.close()


class Operator:
    """The operator in kopf's thread, with its context (metrics) kept for the test."""

    def __init__(self, args: argparse.Namespace) -> None:
        registry, settings, self.octx = setup(args)
        self.runner = KopfRunner(
            ["run", "-A", "--standalone"], registry=registry, settings=settings
        )

    async def __aenter__(self) -> Operator:
        self.runner.__enter__()
        await asyncio.sleep(1.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.runner.__exit__, None, None, None)
        assert self.runner.exit_code == 0, self.runner.output
        assert "failed with an exception" not in self.runner.output, self.runner.output


def rank0_pod(job: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-trainers-0-x",
            "labels": {
                "job-name": f"{job}-trainers",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "x",
                    "ports": [{"name": "progress", "containerPort": port, "protocol": "TCP"}],
                }
            ]
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


def scrape(octx: OperatorContext) -> dict[str, float]:
    assert octx.metrics is not None
    ep = serve(octx.metrics.registry, 0, "127.0.0.1")  # what main() serves
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ep.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        ep.close()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{key}}}"] = s.value
    return out


async def test_running_job_progress_in_status(cluster: Cluster, rank0: ProgressServer) -> None:
    c = cluster
    args = build_parser().parse_args(
        ["--resync-seconds", "1", "--progress-seconds", "0.5", "--liveness", "",
         "--runtime-image", "example.org/distgnn:test", "--metrics-port", "0"]
    )  # fmt: skip
    async with Operator(args) as op:
        await c.create(job_manifest("prog", graph={"partitions": {"manifestURL": "s3://p/x.json"}}))
        await _servers_ready(c, "prog-server", 2)
        tjob = await c.child("Job", "prog-trainers")
        ports = {p["name"] for p in tjob["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert "progress" in ports and "metrics" not in ports  # monitoring.metrics is off
        await c.create(rank0_pod("prog", rank0.port))
        await c.patch("Job", "prog-trainers", {"status": {"active": 2}}, "status")
        await c.phase("DistGNNJob", "prog", "Running")
        # rank 0 still starting: read, nothing to show, nothing written
        unavailable = "distgnn_operator_progress_reads_total{outcome=unavailable}"

        async def read_once() -> bool:
            return (await asyncio.to_thread(scrape, op.octx))[unavailable] >= 1

        await c.until("a progress read", read_once)
        assert "progress" not in await c.status("DistGNNJob", "prog")

        rank0.update(
            state="training", completedEpochs=3, totalEpochs=10, loss=0.73,
            validationMetric="valAccuracy", validationValue=0.61, epochSeconds=1.25,
            samplesPerSecond=800.0,
        )  # fmt: skip

        async def progress(epoch: str) -> dict[str, Any] | None:
            p = (await c.status("DistGNNJob", "prog")).get("progress") or {}
            return p if p.get("epoch") == epoch else None

        p = await c.until("progress 3/10", lambda: progress("3/10"))
        assert p["completedEpochs"] == 3 and p["totalEpochs"] == 10 and p["loss"] == 0.73
        assert p["validationMetric"] == "valAccuracy" and p["validationValue"] == 0.61
        assert p["epochSeconds"] == 1.25 and p["samplesPerSecond"] == 800.0
        assert p["updateTime"]

        # unchanged progress: several reads, no status write (waits for the reads rather
        # than sleeping a fixed time: a tick is skipped while a pass holds the resource,
        # and on a loaded machine passes are slow)
        before = (await c.get("DistGNNJob", "prog"))["metadata"]["resourceVersion"]
        unchanged = "distgnn_operator_progress_reads_total{outcome=unchanged}"
        seen = (await asyncio.to_thread(scrape, op.octx))[unchanged]

        async def read_unchanged() -> bool:
            return (await asyncio.to_thread(scrape, op.octx))[unchanged] >= seen + 2

        await c.until("two unchanged progress reads", read_unchanged)
        assert (await c.get("DistGNNJob", "prog"))["metadata"]["resourceVersion"] == before

        rank0.update(completedEpochs=4, loss=0.5)
        p = await c.until("progress 4/10", lambda: progress("4/10"))
        assert p["loss"] == 0.5

        m = scrape(op.octx)
        assert m["distgnn_operator_progress_reads_total{outcome=changed}"] == 2
        assert m["distgnn_operator_progress_reads_total{outcome=unchanged}"] >= 2
        assert m["distgnn_operator_resources{kind=DistGNNJob,phase=Running}"] == 1
        assert m["distgnn_operator_reconciles_total{kind=DistGNNJob,outcome=ok}"] >= 3
        assert m["distgnn_operator_reconcile_duration_seconds_count{kind=DistGNNJob}"] >= 3

        # finished: the progress stays as last seen and nothing is read or written again
        await c.patch(
            "Job",
            "prog-trainers",
            {"status": {"active": 0, "succeeded": 2,
                        "conditions": [{"type": "Complete", "status": "True"}]}},
            "status",
        )  # fmt: skip
        st = await c.phase("DistGNNJob", "prog", "Succeeded")
        assert st["progress"]["epoch"] == "4/10"
        reads = scrape(op.octx)
        rank0.update(completedEpochs=10)
        await asyncio.sleep(2.0)
        assert (await c.status("DistGNNJob", "prog"))["progress"]["epoch"] == "4/10"
        after = scrape(op.octx)
        for outcome in ("changed", "unchanged", "unavailable"):
            key = f"distgnn_operator_progress_reads_total{{outcome={outcome}}}"
            assert after[key] == reads[key], key
        assert after["distgnn_operator_resources{kind=DistGNNJob,phase=Succeeded}"] == 1
        assert after["distgnn_operator_resources{kind=DistGNNJob,phase=Running}"] == 0
