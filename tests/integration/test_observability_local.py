"""Observability of a real local job: Prometheus endpoints of real graph servers and
trainers scraped while ``distgnn run`` runs, its progress lines and its JSON logs."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_local_run import Running, write_manifest

pytestmark = pytest.mark.timeout(300)

EPOCHS = 3


def scrape(url: str) -> dict[str, float]:
    """Every sample of an endpoint as ``name{label="v",...}`` -> value."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def total(snaps: list[dict[str, float]], key: str) -> float:
    return sum(s[key] for s in snaps)


def urls(stderr: str, msg: str) -> list[str]:
    for line in stderr.splitlines():
        obj = json.loads(line)
        if obj["msg"] == msg:
            return str(obj["urls"]).split(",")
    return []


def job(cora_path: Path) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "obs"},
        "spec": {
            "graph": {"source": {"url": str(cora_path)}},
            "partitioning": {"numParts": 2},
            "servers": {"workers": 2},
            "trainers": {
                "replicas": 2,
                "numSamplers": 0,
                "app": {
                    "name": "node-classification",
                    "epochs": EPOCHS,
                    "hidden": 16,
                    "fanouts": [5, 5],
                    "batchSize": 32,
                },
            },
            "monitoring": {"metrics": True},
            "runPolicy": {"backoffLimit": 0},
        },
    }


def test_local_job_metrics_progress_and_logs(tmp_path: Path, cora_path: Path) -> None:
    manifest = write_manifest(tmp_path / "job.yaml", job(cora_path))
    argv = [sys.executable, "-m", "distgnn.cli", "--log-format", "json", "run", str(manifest)]
    argv += ["--workdir", str(tmp_path / "wd"), "--grace", "5"]
    # trainers keep /metrics up after training so the final counts can be scraped
    run = Running(argv, tmp_path / "logs", env={"DISTGNN_METRICS_LINGER_SECONDS": "120"})
    try:
        deadline = time.monotonic() + 240
        server_urls: list[str] = []
        trainer_urls: list[str] = []
        while not (server_urls and trainer_urls):
            assert run.popen.poll() is None, run.stderr()
            assert time.monotonic() < deadline, run.stderr()
            time.sleep(0.2)
            server_urls = urls(run.stderr(), "graph server metrics")
            trainer_urls = urls(run.stderr(), "trainer metrics")
        assert len(server_urls) == 2 and len(trainer_urls) == 2

        # the servers are up and nothing trained yet: a loaded partition, no rows served
        before = [scrape(u) for u in server_urls]
        loaded = [s[f'distgnn_server_partition_loaded{{partition="{i}"}}'] for i, s in
                  enumerate(before)]  # fmt: skip
        assert loaded == [1.0, 1.0]
        assert all(s["distgnn_server_workers"] == 2 for s in before)
        assert all(s["distgnn_server_shared_memory_bytes"] > 0 for s in before)

        def trainers() -> list[dict[str, float]] | None:
            try:
                return [scrape(u) for u in trainer_urls]
            except OSError:
                return None  # not listening yet

        snaps = trainers()
        while snaps is None or not all(s["distgnn_trainer_finished"] == 1 for s in snaps):
            assert run.popen.poll() is None, run.stderr()
            assert time.monotonic() < deadline, run.stderr()
            time.sleep(0.3)
            snaps = trainers()
        servers = [scrape(u) for u in server_urls]
        assert trainers() == snaps  # quiescent: nothing moved while the servers were read

        # rows served by the servers are exactly the rows the trainers pulled
        pulled = total(snaps, "distgnn_trainer_pulled_rows_total")
        assert pulled > 0
        assert total(servers, "distgnn_server_rows_served_total") == pulled
        assert total(before, "distgnn_server_rows_served_total") <= pulled / 10
        pulls_ok = 'distgnn_server_requests_total{outcome="ok",type="pull"}'
        assert total(servers, pulls_ok) == total(snaps, "distgnn_trainer_pull_requests_total")
        assert total(snaps, "distgnn_trainer_pulled_bytes_total") > pulled  # features: wide rows
        assert total(servers, "distgnn_server_sent_bytes_total") >= total(
            snaps, "distgnn_trainer_pulled_bytes_total"
        )
        lat = 'distgnn_server_request_duration_seconds_count{type="pull"}'
        assert total(servers, lat) == total(servers, pulls_ok)
        assert total(servers, "distgnn_server_connections_total") >= 2

        # the trainers' own counters follow the work: every step timed in each phase
        for s in snaps:
            assert s["distgnn_trainer_epoch"] == EPOCHS == s["distgnn_trainer_epochs"]
            steps = s["distgnn_trainer_steps_total"]
            assert steps >= EPOCHS
            assert s['distgnn_trainer_step_seconds_count{phase="compute"}'] == steps
            assert s['distgnn_trainer_step_seconds_count{phase="pull"}'] >= steps
            assert s['distgnn_trainer_step_seconds_count{phase="sample"}'] >= steps
            assert s["distgnn_trainer_samples_total"] > 0
            assert s["distgnn_trainer_loss"] > 0
        assert 'distgnn_trainer_validation_metric{metric="valAccuracy"}' in snaps[0]

        # the run prints rank 0's progress, the final one included (read while lingering)
        def final_progress() -> bool:
            return f'"epoch": "{EPOCHS}/{EPOCHS}"' in run.stderr()

        while not final_progress():
            assert time.monotonic() < deadline, run.stderr()
            time.sleep(0.3)
        run.signal(signal.SIGINT)
        res = run.wait(60)
    finally:
        if run.popen.poll() is None:
            run.kill()

    # one format per run: every line is a JSON object with the job; trainer lines carry
    # their rank, server lines their partition; no long dict dumps. (The CLI's own
    # one-line verdict for the user, here "interrupted", stays plain text.)
    text = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert text[-1] == "distgnn run: interrupted"
    lines = [json.loads(ln) for ln in text[:-1]]
    assert lines and all(o.get("job") == "obs" for o in lines)
    for o in lines:
        proc = o.get("process", "")
        if o["logger"].startswith("distgnn.local."):  # the runner's own lines about a
            continue  # process (its output wrapped, "did not stop; killing it" under load)
        if re.fullmatch(r"trainer-\d", proc):
            assert o.get("rank") == int(proc[-1]), o
        if re.fullmatch(r"server-\d", proc):
            assert o.get("partition") == int(proc[-1]), o
        assert all(len(json.dumps(v)) < 300 for v in o.values()), o
    progress = [o for o in lines if o["msg"].startswith("progress: epoch")]
    assert progress[-1]["completedEpochs"] == EPOCHS and "loss" in progress[-1]
    assert progress[-1]["validationMetric"] == "valAccuracy"
