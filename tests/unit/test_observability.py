"""Observability building blocks: log context and format, the supervisor's JSON lines,
the progress snapshot, the server's worker counters, the operator's pod pieces."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from distgnn import contract
from distgnn import log as dlog
from distgnn.api import parse_job
from distgnn.api.progress import progress_status, progress_text
from distgnn.api.schema import job_crd
from distgnn.local.runner import child_env
from distgnn.local.supervisor import ProcessSpec, Supervisor
from distgnn.rpc.protocol import Frame, Gathered, MsgType
from distgnn.rpc.stats import ClientStats
from distgnn.server import metrics as sm
from distgnn_operator import monitoring as mon
from distgnn_operator.desired import DesiredContext, desired_job_children
from distgnn_operator.metrics import OperatorMetrics
from distgnn_operator.progress import rank0_address, same_progress
from distgnn_operator.status import JobObservation, job_status

# --- logs ------------------------------------------------------------------------------


def _log_line(fmt: str, env: dict[str, str], **extra: Any) -> str:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        dlog.setup(fmt=fmt, stream=stream, context=dlog.context_from_env(env))
        dlog.add_context(**extra)
        logging.getLogger("distgnn.test").info("hello", extra=dlog.kv(value="x" * 500))
        assert dlog.current_format() == fmt
    finally:
        for h in list(root.handlers):
            if getattr(h, "_distgnn", False):
                root.removeHandler(h)
        for h in saved[0]:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(saved[1])
    return stream.getvalue().strip()


def test_every_line_carries_job_rank_and_partition() -> None:
    env = {"DISTGNN_JOB_NAME": "cora", "JOB_COMPLETION_INDEX": "2"}
    obj = json.loads(_log_line("json", env, partition=1))
    assert (obj["job"], obj["rank"], obj["partition"], obj["msg"]) == ("cora", 2, 1, "hello")
    text = _log_line("text", {"DISTGNN_JOB_NAME": "cora", "RANK": "0"})
    assert "job=cora rank=0" in text
    assert "(+340 chars)" in text and len(text) < 300  # long values are cut in text lines


def test_children_inherit_the_runs_log_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.ENV_LOG_FORMAT, "text")
    assert child_env({}, "json")[contract.ENV_LOG_FORMAT] == "json"
    assert child_env({}, "text")[contract.ENV_LOG_FORMAT] == "text"


def test_supervisor_json_lines_tag_wrap_and_keep_structure(tmp_path: Path) -> None:
    code = (
        "import json; print(json.dumps({'ts': 1, 'level': 'info', 'logger': 'x', 'msg': 'm'}));"
        "print('plain text'); print(json.dumps({'test_accuracy': 0.8}))"
    )
    out = io.StringIO()
    with Supervisor(out, json_lines=True, fields={"job": "j"}) as sup:
        sup.start(ProcessSpec("trainer-0", [sys.executable, "-c", code]))
        assert sup.wait_first(["trainer-0"], 60) is not None
        sup.procs["trainer-0"].reader.join(10)
    lines = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert [o["process"] for o in lines] == ["trainer-0"] * 3
    assert all(o["job"] == "j" for o in lines)
    assert lines[0]["msg"] == "m" and lines[0]["logger"] == "x"
    assert lines[1]["msg"] == "plain text"
    assert lines[2]["output"] == {"test_accuracy": 0.8}
    assert sup.procs["trainer-0"].last_lines(1) == ['{"test_accuracy": 0.8}']  # raw tail


# --- progress ---------------------------------------------------------------------------


def test_progress_status_keeps_known_valid_fields_only() -> None:
    p = progress_status(
        {
            "completedEpochs": 7,
            "totalEpochs": 25,
            "loss": 0.41,
            "validationMetric": "valAccuracy",
            "validationValue": 0.78,
            "epochSeconds": float("nan"),
            "samplesPerSecond": "fast",
            "extra": {"x": 1},
        }
    )
    assert p == {
        "completedEpochs": 7,
        "epoch": "7/25",
        "loss": 0.41,
        "totalEpochs": 25,
        "validationMetric": "valAccuracy",
        "validationValue": 0.78,
    }
    assert progress_text(p) == "epoch 7/25 loss=0.41 valAccuracy=0.78"
    assert progress_status({"state": "starting"}) is None
    assert progress_status({"completedEpochs": True, "totalEpochs": 3}) is None
    assert progress_status([1, 2]) is None


def test_rank0_address_from_the_running_rank0_pod() -> None:
    def pod(index: str, phase: str, ip: str | None, port: int | None) -> dict[str, Any]:
        ports = [{"name": "progress", "containerPort": port}] if port else []
        return {
            "metadata": {"labels": {"batch.kubernetes.io/job-completion-index": index}},
            "spec": {
                "containers": [
                    {"ports": [{"name": "rendezvous", "containerPort": 1}]},
                    {"ports": ports},
                ]
            },
            "status": {"phase": phase, **({"podIP": ip} if ip else {})},
        }

    assert rank0_address([pod("1", "Running", "10.0.0.2", 9), pod("0", "Running", "10.0.0.1", 9)])
    assert rank0_address([pod("0", "Running", "10.0.0.1", 9)]) == ("10.0.0.1", 9)
    assert rank0_address([pod("0", "Running", "fd00::1", None)]) == (
        "fd00::1",
        contract.TRAINER_PROGRESS_PORT,
    )
    assert rank0_address([pod("0", "Pending", "10.0.0.1", 9)]) is None
    assert rank0_address([pod("0", "Running", None, 9)]) is None
    assert rank0_address([pod("1", "Running", "10.0.0.1", 9)]) is None


def test_progress_survives_reconcile_and_compares_without_update_time() -> None:
    old = {"phase": "Running", "progress": {"epoch": "3/9", "updateTime": "t1"}}
    st = job_status(JobObservation(trainer_job="running", trainers_active=1), old, "now")
    assert st["progress"] == old["progress"]
    assert same_progress({"epoch": "3/9", "updateTime": "t1"}, {"epoch": "3/9"})
    assert not same_progress({"epoch": "3/9"}, {"epoch": "4/9"})


def test_crd_epoch_column_beside_accuracy() -> None:
    cols = job_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [c["name"] for c in cols]
    assert names[names.index("Epoch") + 1] == "Accuracy"
    assert cols[names.index("Epoch")]["jsonPath"] == ".status.progress.epoch"


# --- server and client counters ----------------------------------------------------------


def test_worker_stats_sum_in_the_parent_and_survive_a_restart(tmp_path: Path) -> None:
    ids = np.arange(10, dtype=np.int64)
    rows = Gathered(np.zeros((100, 4), np.float32), ids)
    w0 = sm.WorkerStats(sm.stats_path(str(tmp_path), 0))
    w1 = sm.WorkerStats(sm.stats_path(str(tmp_path), 1))
    w0.connection(1)
    w0.observe(Frame(MsgType.PULL, 1, {}, [ids]), [rows], sm.OK, 0.0)
    w1.connection(1)
    w1.observe(Frame(MsgType.PULL, 1, {}, [ids[:3]]), [], sm.CLIENT_ERROR, 0.0)
    w1.observe(Frame(MsgType.PUSH, 2, {}, [ids[:4], np.zeros((4, 4))]), [], sm.OK, 0.0)
    w0.protocol_error()
    w1.close()
    w1 = sm.WorkerStats(sm.stats_path(str(tmp_path), 1))  # a restarted worker, same slot
    state = sm.ServerState(part_id=3, shm_root=str(tmp_path), loaded=True, workers=[1, 2])
    text = generate_latest(sm.server_registry(state)).decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }

    def v(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert v("distgnn_server_requests_total", type="pull", outcome="ok") == 1
    assert v("distgnn_server_requests_total", type="pull", outcome="client_error") == 1
    assert v("distgnn_server_rows_served_total") == 10  # failed pulls serve no rows
    assert v("distgnn_server_rows_written_total") == 4
    assert v("distgnn_server_sent_bytes_total") == 160
    assert v("distgnn_server_received_bytes_total") == 80 + 24 + 32 + 128
    assert v("distgnn_server_open_connections") == 1  # the restarted worker's are gone
    assert v("distgnn_server_connections_total") == 2
    assert v("distgnn_server_protocol_errors_total") == 1
    assert v("distgnn_server_request_duration_seconds_count", type="pull") == 2
    assert v("distgnn_server_request_duration_seconds_bucket", type="pull", le="+Inf") == 2
    assert v("distgnn_server_partition_loaded", partition="3") == 1
    assert v("distgnn_server_workers") == 2
    w0.close()
    w1.close()


def test_client_stats_count_pulled_rows_and_bytes() -> None:
    st = ClientStats()
    ids = np.arange(5, dtype=np.int64)
    st.record(MsgType.PULL, [ids], Frame(MsgType.PULL, 1, {}, [np.zeros((0, 8), np.float32)]))
    st.record(MsgType.PULL, [ids[:2]], Frame(MsgType.PULL, 2, {}, [np.zeros((2, 8), np.int64)]))
    st.record(MsgType.SAMPLE_NEIGHBORS, [ids], Frame(MsgType.SAMPLE_NEIGHBORS, 3, {}, []))
    assert (st.requests, st.pull_requests, st.rows_pulled) == (3, 2, 7)
    assert st.bytes_pulled == 5 * 32 + 2 * 64


def test_local_reads_are_counted_next_to_pulled_rows(tmp_path: Path) -> None:
    """A co-located trainer's rows read from shared memory show as ``local_rows`` /
    ``local_bytes`` beside the pulled ones (which stay at what went over TCP)."""
    from distgnn.distributed.localread import LocalReader
    from distgnn.distributed.localsample import SampleStats
    from distgnn.train.telemetry import Telemetry, TrainerMetrics

    store = tmp_path / "store-0"
    store.mkdir()
    (store / "info.json").write_text(json.dumps({"part_id": 0}))
    feat = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(store / (b"feat".hex() + ".npy"), feat)
    reader = LocalReader.open(str(tmp_path), 0, "store-0", lambda: "store-0")
    out = [np.empty((2, 4), np.float32), np.empty((1, 4), np.float32)]
    assert reader.gather("feat", np.array([7, 1, 3]), out, rows=10)
    np.testing.assert_array_equal(np.concatenate(out), feat[[7, 1, 3]])

    tcp = ClientStats()
    tcp.record(MsgType.PULL, [np.arange(2)], Frame(MsgType.PULL, 1, {}, [np.zeros((2, 4))]))
    tel = Telemetry(metrics=TrainerMetrics())
    tel.attach(tcp, reader.stats)
    assert reader.gather("feat", np.array([0, 9]), [np.empty((2, 4), np.float32)], rows=10)

    assert tel.metrics is not None
    got = {
        s.name: s.value
        for fam in text_string_to_metric_families(generate_latest(tel.metrics.registry).decode())
        for s in fam.samples
    }
    assert got["distgnn_trainer_local_rows_total"] == 5  # read at scrape time: both gathers
    assert got["distgnn_trainer_local_bytes_total"] == 5 * 4 * 4
    assert got["distgnn_trainer_pulled_rows_total"] == 2
    assert got["distgnn_trainer_local_sample_requests_total"] == 0  # sampling over TCP
    sampled = SampleStats()
    tel.attach(tcp, reader.stats, sampled)
    sampled.requests += 3
    text = generate_latest(tel.metrics.registry).decode()
    assert "distgnn_trainer_local_sample_requests_total 3.0" in text
    tel.attach(tcp)  # not co-located: zero, still exported
    text = generate_latest(tel.metrics.registry).decode()
    assert "distgnn_trainer_local_rows_total 0.0" in text
    assert "distgnn_trainer_local_sample_requests_total 0.0" in text


# --- operator -------------------------------------------------------------------------------

JOB: dict[str, Any] = {
    "apiVersion": "distgnn.dev/v1alpha1",
    "kind": "DistGNNJob",
    "metadata": {"name": "j", "namespace": "ml", "uid": "u"},
    "spec": {
        "graph": {"partitions": {"manifestURL": "s3://p/j.json"}},
        "trainers": {"replicas": 2, "app": {"name": "node-classification"}},
    },
}


def _pods(metrics: bool) -> dict[str, dict[str, Any]]:
    obj = json.loads(json.dumps(JOB))
    obj["spec"]["monitoring"] = {"metrics": metrics}
    out = {}
    for o in desired_job_children(parse_job(obj), DesiredContext()):
        if o["kind"] in ("StatefulSet", "Job"):
            out[o["kind"]] = o["spec"]["template"]
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "j-server":
            out["netpol"] = o
    return out


@pytest.mark.parametrize("metrics", [False, True])
def test_pods_carry_endpoints_and_scrape_annotations_only_when_enabled(metrics: bool) -> None:
    pods = _pods(metrics)
    for kind, port in (("StatefulSet", 30052), ("Job", 30061)):
        tpl = pods[kind]
        c = tpl["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        env = {e["name"]: e.get("value") for e in c["env"]}
        ann = tpl["metadata"].get("annotations", {})
        if metrics:
            assert ports["metrics"] == port and env[contract.ENV_METRICS_PORT] == str(port)
            assert ann == {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics",
            }
        else:
            assert "metrics" not in ports and contract.ENV_METRICS_PORT not in env
            assert "prometheus.io/scrape" not in ann
    trainer_ports = {p["name"] for p in pods["Job"]["spec"]["containers"][0]["ports"]}
    assert mon.PROGRESS_PORT_NAME in trainer_ports  # always: the operator reads rank 0
    rules = pods["netpol"]["spec"]["ingress"]
    assert (len(rules) == 2) is metrics
    if metrics:
        assert rules[1] == {"ports": [{"protocol": "TCP", "port": 30052}]}


def test_operator_api_errors_skip_expected_answers() -> None:
    m = OperatorMetrics()
    for code in (404, 409, 500, 0, 500):
        m.api_error(code)
    text = generate_latest(m.registry).decode()
    assert 'distgnn_operator_api_errors_total{code="500"} 2.0' in text
    assert 'distgnn_operator_api_errors_total{code="0"} 1.0' in text
    assert 'code="404"' not in text and 'code="409"' not in text


def test_progress_watch_reads_rank0_and_reports_changes_only() -> None:
    from distgnn.local.ports import free_port
    from distgnn.local.progress import ProgressWatch
    from distgnn.train.telemetry import ProgressServer

    assert ProgressWatch(free_port(), interval=0).poll() is None  # nobody listening
    srv = ProgressServer("127.0.0.1", 0)
    try:
        watch = ProgressWatch(srv.port, interval=0)
        assert watch.poll() is None  # starting: no epochs yet
        srv.update(completedEpochs=1, totalEpochs=4, loss=1.5)
        assert (watch.poll() or {}).get("epoch") == "1/4"
        assert watch.poll() is None  # unchanged
        srv.update(completedEpochs=2, loss=1.0)
        assert (watch.poll() or {}).get("loss") == 1.0
        slow = ProgressWatch(srv.port, interval=3600)
        assert slow.poll(now=0.0) is not None and slow.poll(now=1.0) is None  # not due
    finally:
        srv.close()


def test_kopf_object_log_lines_carry_the_object_not_the_settings() -> None:
    import kopf

    stream = io.StringIO()
    root = logging.getLogger()
    saved = list(root.handlers)
    try:
        dlog.setup(fmt="json", stream=stream, context={})
        body = {"apiVersion": "distgnn.dev/v1alpha1", "kind": "DistGNNJob",
                "metadata": {"name": "cora", "namespace": "ml", "uid": "u1"}}  # fmt: skip
        from kopf._core.actions.loggers import ObjectLogger

        ObjectLogger(body=kopf.Body(body), settings=kopf.OperatorSettings()).info("handled")
    finally:
        for h in list(root.handlers):
            if h not in saved:
                root.removeHandler(h)
        for h in saved:
            if h not in root.handlers:
                root.addHandler(h)
    obj = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert (obj["kind"], obj["namespace"], obj["name"]) == ("DistGNNJob", "ml", "cora")
    assert "settings" not in obj and "k8s_ref" not in obj and len(json.dumps(obj)) < 300


def test_graphserver_pods_get_metrics_when_enabled() -> None:
    from distgnn.api import parse_graphserver
    from distgnn_operator.desired import desired_graphserver_children

    gs = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "GraphServer",
        "metadata": {"name": "papers", "namespace": "ml", "uid": "u"},
        "spec": {
            "graph": {"partitions": {"manifestURL": "s3://p/papers.json"}},
            "monitoring": {"metrics": True},
        },
    }
    objs = desired_graphserver_children(parse_graphserver(gs), DesiredContext())
    (sts,) = [o for o in objs if o["kind"] == "StatefulSet"]
    tpl = sts["spec"]["template"]
    c = tpl["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 30052, "protocol": "TCP"} in c["ports"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env[contract.ENV_METRICS_PORT] == "30052" and env[contract.ENV_JOB_NAME] == "papers"
    assert tpl["metadata"]["annotations"]["prometheus.io/port"] == "30052"
