"""`distgnn run` end to end: real servers, real trainers, real processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from distgnn.local.ports import is_listening

RUN_TIMEOUT = 420.0


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    pids: set[int] = field(default_factory=set)

    def server_addresses(self) -> list[tuple[str, int]]:
        m = re.search(r"graph servers ready.*?servers=(\S+)", self.stderr)
        if not m:
            return []
        return [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in m.group(1).split(","))]


def write_manifest(path: Path, obj: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    return path


def run_cmd(manifest: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "distgnn.cli",
        "--log-format",
        "text",
        "run",
        str(manifest),
        "--grace",
        "5",
        *extra,
    ]


class Running:
    """A ``distgnn run`` subprocess whose descendants are recorded while it runs."""

    def __init__(self, argv: list[str], out_dir: Path, env: dict[str, str] | None = None) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_path = out_dir / "stdout.txt"
        self.err_path = out_dir / "stderr.txt"
        self._out = open(self.out_path, "wb")  # noqa: SIM115
        self._err = open(self.err_path, "wb")  # noqa: SIM115
        self.popen = subprocess.Popen(
            argv,
            stdout=self._out,
            stderr=self._err,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
        self.pids: set[int] = set()

    def snapshot(self) -> None:
        try:
            for c in psutil.Process(self.popen.pid).children(recursive=True):
                self.pids.add(c.pid)
        except psutil.Error:
            pass

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout: float = RUN_TIMEOUT) -> Result:
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            self.snapshot()
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"distgnn run did not finish in {timeout}s:\n{self.stderr()}")
            time.sleep(0.1)
        self._out.close()
        self._err.close()
        return Result(
            rc=self.popen.returncode,
            stdout=self.out_path.read_text(encoding="utf-8"),
            stderr=self.stderr(),
            pids=self.pids,
        )

    def signal(self, sig: signal.Signals) -> None:
        self.popen.send_signal(sig)

    def kill(self) -> None:
        for pid in self.pids | {self.popen.pid}:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        self._out.close()
        self._err.close()


def run(
    manifest: Path,
    *extra: str,
    out_dir: Path,
    timeout: float = RUN_TIMEOUT,
    env: dict[str, str] | None = None,
) -> Result:
    return Running(run_cmd(manifest, *extra), out_dir, env).wait(timeout)


def alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.Error:
            continue
    return out


def wait_for(pred: Any, timeout: float, what: str, proc: Running | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if proc is not None:
            proc.snapshot()
            if proc.popen.poll() is not None:
                raise AssertionError(f"{what}: process exited early:\n{proc.stderr()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# -- fixtures -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cora-graphsage.yaml"


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Path:
    """Cora in 2 partitions (partitioned in-process); the manifest's path."""
    from distgnn.partition.partitioner import partition_graph

    out = tmp_path_factory.mktemp("parts")
    partition_graph(str(cora_path), 2, str(out), "cora", progress=False)
    return out / "cora.json"


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """The README's main job, run once: (result, workdir holding its partitions)."""
    work = tmp_path_factory.mktemp("example")
    res = run(
        EXAMPLE,
        "--workdir",
        str(work / "wd"),
        "--metrics-out",
        str(work / "metrics.json"),
        out_dir=work / "logs",
    )
    return res, work


def user_job(name: str, manifest_url: Path, code: str, **trainers: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": name},
        "spec": {
            "graph": {"partitions": {"manifestURL": str(manifest_url)}},
            "trainers": {
                "replicas": 2,
                "command": [sys.executable, "-c", textwrap.dedent(code)],
                **trainers,
            },
            "runPolicy": {"backoffLimit": 0},
        },
    }


def assert_clean(res: Result) -> None:
    assert res.pids, "no child processes were observed"
    assert alive(res.pids) == [], f"stray processes left: {alive(res.pids)}"
    for host, port in res.server_addresses():
        assert not is_listening(port, host), f"port {port} still bound"


# -- the main example ---------------------------------------------------------------


def test_example_job_reaches_the_quality_bar(example_run: tuple[Result, Path]) -> None:
    res, work = example_run
    assert res.rc == 0, res.stderr[-5000:]
    last = res.stdout.strip().splitlines()[-1]
    metrics = json.loads(last)
    assert metrics["test_accuracy"] >= 0.79, metrics
    assert 0.0 <= metrics["val_accuracy"] <= 1.0
    # val/test accuracy describe the model selected on validation: no later epoch beat it
    assert metrics["val_accuracy"] >= metrics["final_val_accuracy"]
    assert json.loads((work / "metrics.json").read_text(encoding="utf-8")) == metrics
    # the whole stdout is the metrics line: logs went to stderr, prefixed per process
    assert res.stdout.strip() == last
    for name in ("server-0", "server-1", "trainer-0", "trainer-1"):
        assert f"\n{name} | " in res.stderr
    assert len(res.server_addresses()) == 2
    # relative source path resolved against examples/, partitions in the workdir
    assert (work / "wd" / "partitions" / "cora.json").exists()
    assert_clean(res)


def test_existing_partitions_are_reused(tmp_path: Path, cora_path: Path) -> None:
    parts = tmp_path / "parts" / "cora.json"
    obj = user_job(
        "reuse",
        parts,
        "import os; print('manifest', os.environ['DISTGNN_MANIFEST'])",
        replicas=1,
    )
    obj["spec"]["graph"] = {"source": {"url": str(cora_path)}}
    obj["spec"]["partitioning"] = {"numParts": 2, "graphName": "cora", "outputURL": "parts"}
    manifest = write_manifest(tmp_path / "reuse.yaml", obj)
    res = run(manifest, out_dir=tmp_path / "first")
    assert res.rc == 0, res.stderr[-5000:]
    assert "reusing existing partitions" not in res.stderr
    # outputURL "parts" is relative to the manifest's folder
    assert f"trainer-0 | manifest {parts}" in res.stderr
    before = parts.stat().st_mtime_ns
    res = run(manifest, out_dir=tmp_path / "second")
    assert res.rc == 0, res.stderr[-5000:]
    assert "reusing existing partitions" in res.stderr
    assert parts.stat().st_mtime_ns == before
    # other options: partitioned again into the same place
    obj["spec"]["partitioning"]["method"] = "random"
    write_manifest(manifest, obj)
    res = run(manifest, out_dir=tmp_path / "third")
    assert res.rc == 0, res.stderr[-5000:]
    assert "reusing existing partitions" not in res.stderr
    assert json.loads(parts.read_text(encoding="utf-8"))["options"]["method"] == "random"
    # the default workdir sits beside the manifest
    assert (tmp_path / ".distgnn" / "runs").is_dir()


# -- failures -----------------------------------------------------------------------


def test_crashing_trainer_fails_the_run_cleanly(cora_parts: Path, tmp_path: Path) -> None:
    crash = """
        import os, sys, time
        print('pid', os.getpid(), flush=True)
        if os.environ['RANK'] == '1':
            time.sleep(0.5)
            with open(os.environ['DISTGNN_TERMINATION_LOG'], 'w') as f:
                f.write('ValueError: the stand-in model diverged')
            print('rank 1 giving up', flush=True)
            sys.exit(5)
        time.sleep(600)
    """
    manifest = write_manifest(tmp_path / "crash.yaml", user_job("crash", cora_parts, crash))
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs", timeout=240)
    assert res.rc == 1
    assert res.stdout == ""
    assert "trainer-1 failed (exit code 5)" in res.stderr
    assert "the stand-in model diverged" in res.stderr
    assert "trainer-1 | rank 1 giving up" in res.stderr
    assert_clean(res)


def test_a_trainers_configuration_error_is_not_retried(cora_parts: Path, tmp_path: Path) -> None:
    """A trainer's exit 2 (a wrong ``trainers.app.feat``) fails the job after one attempt,
    whatever ``backoffLimit`` allows, and ``distgnn run`` exits 2 naming the cause."""
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "wrongfeat"},
        "spec": {
            "graph": {"partitions": {"manifestURL": str(cora_parts)}},
            "trainers": {
                "replicas": 1,
                "app": {"name": "node-classification", "epochs": 1, "feat": "features"},
            },
            "runPolicy": {"backoffLimit": 2},
        },
    }
    manifest = write_manifest(tmp_path / "wrongfeat.yaml", obj)
    res = run(manifest, out_dir=tmp_path / "logs", timeout=240)
    assert res.rc == 2, res.stderr[-3000:]
    assert "not retried: a trainer exited with 2 (a configuration error)" in res.stderr
    assert "ConfigError: --feat (trainers.app.feat)" in res.stderr
    assert "restarting" not in res.stderr
    assert res.stderr.count("starting trainers") == 1
    assert_clean(res)


def test_killed_trainer_fails_the_run_cleanly(cora_parts: Path, tmp_path: Path) -> None:
    sleeper = """
        import os, time
        print('pid', os.getpid(), flush=True)
        time.sleep(600)
    """
    manifest = write_manifest(tmp_path / "kill.yaml", user_job("kill", cora_parts, sleeper))
    proc = Running(run_cmd(manifest, "--workdir", str(tmp_path / "wd")), tmp_path / "logs")
    try:
        pat = re.compile(r"trainer-1 \| pid (\d+)")
        wait_for(lambda: pat.search(proc.stderr()), 240, "trainer-1 to start", proc)
        m = pat.search(proc.stderr())
        assert m is not None
        os.kill(int(m.group(1)), signal.SIGKILL)
        res = proc.wait(240)
    finally:
        if proc.popen.poll() is None:
            proc.kill()
    assert res.rc == 1
    assert "trainer-1 failed (killed by SIGKILL)" in res.stderr
    assert_clean(res)


def test_sigterm_stops_everything(cora_parts: Path, tmp_path: Path) -> None:
    manifest = write_manifest(
        tmp_path / "term.yaml",
        user_job(
            "term",
            cora_parts,
            "import os, time; print('pid', os.getpid(), flush=True); time.sleep(600)",
        ),
    )
    proc = Running(run_cmd(manifest, "--workdir", str(tmp_path / "wd")), tmp_path / "logs")
    try:
        wait_for(lambda: proc.stderr().count("| pid ") >= 2, 240, "trainers to start", proc)
        proc.snapshot()
        proc.signal(signal.SIGTERM)
        res = proc.wait(120)
    finally:
        if proc.popen.poll() is None:
            proc.kill()
    assert res.rc == 130
    assert_clean(res)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kind: DistGNNJob\nspec: {graph: [\n", r"line \d+, column \d+: malformed YAML"),
        ("- just\n- a list\n", "expected a DistGNNJob or GraphServer mapping"),
        (
            "apiVersion: distgnn.dev/v1alpha1\nkind: DistGNNJob\nmetadata: {name: x}\n"
            "spec:\n  graph: {source: {url: g.npz}}\n  trainers: {replicas: -1, "
            "app: {name: node-classification}}\n",
            "replicas",
        ),
        (
            "apiVersion: distgnn.dev/v1alpha1\nkind: DistGNNJob\nmetadata: {name: x}\n"
            "spec:\n  graph: {source: {url: nowhere/g.npz}}\n  trainers: "
            "{app: {name: node-classification}}\n",
            "spec.graph.source.url",
        ),
    ],
)
def test_malformed_manifests_exit_2_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(text, encoding="utf-8")
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs", timeout=120)
    assert res.rc == 2
    assert res.stdout == ""
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("distgnn run: error:")]
    assert len(errors) == 1 and re.search(expected, errors[0]), res.stderr
    assert "Traceback" not in res.stderr


# -- local GraphServer ----------------------------------------------------------------


def test_graphserver_serves_two_jobs_attaching_at_once(tmp_path: Path, cora_path: Path) -> None:
    state = tmp_path / "state"
    env = {"DISTGNN_STATE_DIR": str(state)}
    gs = write_manifest(
        tmp_path / "gs.yaml",
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "GraphServer",
            "metadata": {"name": "tiny-cora"},
            "spec": {"graph": {"source": {"url": str(cora_path)}}, "partitioning": {"numParts": 2}},
        },
    )
    job = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "attach"},
        "spec": {
            "graph": {"graphServer": {"name": "tiny-cora"}},
            "trainers": {
                "replicas": 1,
                "app": {
                    "name": "node-classification",
                    "epochs": 1,
                    "hidden": 16,
                    "fanouts": [5, 5],
                    "batchSize": 64,
                },
            },
            "runPolicy": {"backoffLimit": 0},
        },
    }
    manifests = []
    for i in range(2):
        job["metadata"]["name"] = f"attach-{i}"
        manifests.append(write_manifest(tmp_path / f"job{i}.yaml", job))
    entry = state / "graphservers" / "tiny-cora.json"
    server = Running(run_cmd(gs, "--workdir", str(tmp_path / "wd")), tmp_path / "gs", env)
    jobs: list[Running] = []
    try:
        wait_for(entry.exists, 240, "the GraphServer to register", server)
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
        registered = json.loads(entry.read_text(encoding="utf-8"))
        jobs = [
            Running(run_cmd(m, "--workdir", str(tmp_path / f"wd{i}")), tmp_path / f"j{i}", env)
            for i, m in enumerate(manifests)
        ]
        results = [j.wait() for j in jobs]
        server.snapshot()
        assert server.popen.poll() is None, "the GraphServer stopped while jobs were attached"
        server.signal(signal.SIGTERM)
        gs_res = server.wait(120)
    finally:
        for r in [server, *jobs]:
            if r.popen.poll() is None:
                r.kill()
    for res in results:
        assert res.rc == 0, res.stderr[-5000:]
        metrics = json.loads(res.stdout.strip().splitlines()[-1])
        assert 0.0 <= metrics["test_accuracy"] <= 1.0
        assert "attaching to local GraphServer" in res.stderr
        assert "server-0 |" not in res.stderr  # no servers of its own
        assert alive(res.pids) == []
    assert gs_res.rc == 0, gs_res.stderr[-5000:]
    addrs = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in registered["servers"])]
    assert gs_res.server_addresses() == addrs
    assert not entry.exists() and not (state / "graphservers" / "tiny-cora.token").exists()
    assert_clean(gs_res)
    # once it is gone, attaching is a clear error
    res = run(
        manifests[0],
        "--workdir",
        str(tmp_path / "wd0"),
        out_dir=tmp_path / "late",
        timeout=120,
        env=env,
    )
    assert res.rc == 2
    assert "no local GraphServer named 'tiny-cora'" in res.stderr


def test_backoff_restarts_trainers_and_resumes_from_the_checkpoint(
    cora_parts: Path, tmp_path: Path
) -> None:
    # Attempt 1 trains 2 epochs (checkpointing) and then crashes; attempt 2 asks for 3
    # epochs and must resume after the checkpointed ones, with the same servers.
    marker = tmp_path / "attempt-1-done"
    wrapper = f"""
        import os, subprocess, sys
        train = [sys.executable, '-m', 'distgnn.cli', 'train', 'node-classification',
                 '--hidden', '16', '--fanouts', '5,5', '--batch-size', '64']
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, 'w').close()
            subprocess.run([*train, '--epochs', '2'], check=True)
            print('crashing after the checkpoint', flush=True)
            sys.exit(7)
        os.execv(sys.executable, [*train, '--epochs', '3'])
    """
    obj = user_job("resume", cora_parts, wrapper, replicas=1)
    obj["spec"]["trainers"]["checkpoint"] = {"url": "ckpt"}
    obj["spec"]["runPolicy"]["backoffLimit"] = 1
    manifest = write_manifest(tmp_path / "resume.yaml", obj)
    res = run(manifest, out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-5000:]
    assert "trainer-0 | crashing after the checkpoint" in res.stderr
    assert "restarting (runPolicy.backoffLimit)" in res.stderr
    metrics = json.loads(res.stdout.strip().splitlines()[-1])
    assert metrics["start_epoch"] == 2, metrics
    assert any((tmp_path / "ckpt").iterdir())  # relative checkpoint URL -> beside the manifest
    assert res.stderr.count("graph servers ready") == 1  # servers stayed up
    assert_clean(res)
