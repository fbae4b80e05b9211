"""The local runner's trainer handling with stand-in trainers (real ``python -c`` processes).

The job attaches to a GraphServer registry entry owned by this test process, so no
graph servers are needed: this exercises restarts, failures, deadlines and metrics.
"""

from __future__ import annotations

import io
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from distgnn.errors import ConfigError, JobFailed
from distgnn.local.plan import LocalPlan, load_yaml, plan_from_manifest, resolve
from distgnn.local.registry import GraphServerEntry, Registry, process_create_time
from distgnn.local.runner import (
    Deadline,
    RunContext,
    log_root_cause,
    run_job,
    server_name,
    wait_ready,
)
from distgnn.local.supervisor import ProcessSpec, Supervisor

SERVERS = ["127.0.0.1:4100", "127.0.0.1:4101"]


def job(command: str, **run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "standin"},
        "spec": {
            "graph": {"graphServer": {"name": "gs"}},
            "trainers": {
                "replicas": 2,
                "numSamplers": 1,
                "command": [sys.executable, "-c", textwrap.dedent(command)],
            },
            "runPolicy": {"backoffLimit": 0, **run_policy},
        },
    }


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    reg = Registry(tmp_path / "state")
    token = tmp_path / "token"
    token.write_text("secret", encoding="utf-8")
    reg.register(
        GraphServerEntry(
            name="gs",
            servers=SERVERS,
            token_file=str(token),
            manifest_url=str(tmp_path / "cora.json"),
            pid=os.getpid(),
            create_time=process_create_time(os.getpid()),
        )
    )
    return RunContext(
        workdir=tmp_path / "work", registry=reg, stream=io.StringIO(), grace=5, log_format="text"
    )


def plan_of(obj: dict[str, Any], tmp_path: Path) -> LocalPlan:
    return plan_from_manifest(obj, tmp_path / "job.yaml", tmp_path / "work")[0]


OK_TRAINER = """
    import json, os
    env = {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'DISTGNN_SERVERS',
           'DISTGNN_NUM_SAMPLERS', 'DISTGNN_TOKEN_FILE', 'MASTER_ADDR', 'DISTGNN_JOB_NAME')}
    print('hello from', env['RANK'])
    if env['RANK'] == '0':
        with open(os.environ['DISTGNN_METRICS_FILE'], 'w') as f:
            json.dump({'test_accuracy': 0.5, 'env': env}, f)
"""


def test_trainers_get_the_contract_and_metrics_come_back(ctx: RunContext, tmp_path: Path) -> None:
    metrics = run_job(plan_of(job(OK_TRAINER), tmp_path), ctx)
    assert metrics["test_accuracy"] == 0.5
    env = metrics["env"]
    assert env["DISTGNN_SERVERS"] == ",".join(SERVERS)
    assert env["WORLD_SIZE"] == "2" and env["RANK"] == "0"
    assert env["DISTGNN_NUM_SAMPLERS"] == "1"
    assert env["DISTGNN_TOKEN_FILE"] == str(tmp_path / "token")
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["DISTGNN_JOB_NAME"] == "standin"
    out = ctx.stream.getvalue()  # type: ignore[attr-defined]
    assert "trainer-0 | hello from 0" in out and "trainer-1 | hello from 1" in out
    # the private run folder (token, metrics) is removed afterwards
    assert list((tmp_path / "work" / "runs").iterdir()) == []


def test_a_failing_trainer_stops_the_others_and_shows_the_cause(
    ctx: RunContext, tmp_path: Path
) -> None:
    started = tmp_path / "rank0-started"
    crash = f"""
        import os, sys, time
        if os.environ['RANK'] == '1':
            t = time.monotonic()  # fail only once rank 0 has shown its pid (a loaded host)
            while not os.path.exists({str(started)!r}) and time.monotonic() - t < 60:
                time.sleep(0.05)
            print('about to fail', flush=True)
            with open(os.environ['DISTGNN_TERMINATION_LOG'], 'w') as f:
                f.write('RuntimeError: stand-in trainer crashed')
            sys.exit(3)
        print('pid', os.getpid(), flush=True)
        open({str(started)!r}, 'w').close()
        time.sleep(300)
    """
    t0 = time.monotonic()
    with pytest.raises(JobFailed) as ei:
        run_job(plan_of(job(crash), tmp_path), ctx)
    msg = str(ei.value)
    assert "trainer-1 failed (exit code 3)" in msg
    assert "stand-in trainer crashed" in msg
    assert "about to fail" in msg
    assert time.monotonic() - t0 < 120  # not the 300 s the other trainer would sleep
    out = ctx.stream.getvalue()  # type: ignore[attr-defined]
    pid = int(next(ln for ln in out.splitlines() if "trainer-0 | pid" in ln).split()[-1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_backoff_limit_restarts_the_trainer_group(ctx: RunContext, tmp_path: Path) -> None:
    marker = tmp_path / "attempts"
    flaky = f"""
        import json, os, sys
        path = {str(marker)!r} + os.environ['RANK']
        n = int(open(path).read()) if os.path.exists(path) else 0
        open(path, 'w').write(str(n + 1))
        if n == 0 and os.environ['RANK'] == '1':
            sys.exit(1)
        if os.environ['RANK'] == '0':
            json.dump({{'attempt': n}}, open(os.environ['DISTGNN_METRICS_FILE'], 'w'))
    """
    metrics = run_job(plan_of(job(flaky, backoffLimit=1), tmp_path), ctx)
    assert metrics == {"attempt": 1}
    assert (tmp_path / "attempts1").read_text() == "2"


def test_backoff_exhausted_fails(ctx: RunContext, tmp_path: Path) -> None:
    with pytest.raises(JobFailed, match="after 2 attempts"):
        run_job(plan_of(job("import sys; sys.exit(4)", backoffLimit=1), tmp_path), ctx)


def test_a_missing_module_is_the_cause_with_what_installs_it(
    ctx: RunContext, tmp_path: Path
) -> None:
    """DGL's example scripts run without ``pip install -e '.[examples]'``: the failure's
    cause line names the module and the extra, not only a traceback below."""
    with pytest.raises(JobFailed) as ei:
        run_job(plan_of(job("import distgnn_not_installed_xyz"), tmp_path), ctx)
    msg = str(ei.value)
    assert "failed (exit code 1)" in msg
    assert (
        "\ncause: ModuleNotFoundError: No module named 'distgnn_not_installed_xyz' "
        f"(not installed for {sys.executable}; DistGNN's examples: pip install -e "
        "'.[examples]')\n"
    ) in msg
    # the traceback's last line is still among the last log lines below
    assert msg.rstrip().endswith("No module named 'distgnn_not_installed_xyz'")


def test_a_scripts_missing_module_is_not_retried(ctx: RunContext, tmp_path: Path) -> None:
    """``command: [python, SCRIPT]`` runs through the script runner, as on Kubernetes: a
    module missing from the environment exits 2, so the job fails at its first attempt
    whatever ``backoffLimit`` allows, the cause naming the module and what installs it."""
    (tmp_path / "train.py").write_text("import distgnn_not_installed_xyz\n", encoding="utf-8")
    obj = job("", backoffLimit=3)
    obj["spec"]["trainers"]["command"] = ["python", "train.py"]
    plan = plan_of(obj, tmp_path)
    assert plan.trainer_argv == [sys.executable, "-m", "distgnn.train.script", "train.py"]
    with pytest.raises(JobFailed) as ei:
        run_job(plan, ctx)
    msg = str(ei.value)
    assert ei.value.exit_status == 2
    # first attempt: no "after N attempts"
    assert "failed, not retried: a trainer exited with 2 (a configuration error)" in msg
    assert (
        "\ncause: ModuleNotFoundError: No module named 'distgnn_not_installed_xyz' "
        f"(not installed for {sys.executable}; DistGNN's examples: pip install -e "
        "'.[examples]')\n"
    ) in msg


def test_active_deadline_is_enforced_with_progress(
    ctx: RunContext, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx.status_interval = 0.2
    obj = job("import time; time.sleep(300)", activeDeadlineSeconds=1)
    with (
        caplog.at_level("INFO", logger="distgnn.local"),
        pytest.raises(JobFailed, match="activeDeadlineSeconds=1 exceeded"),
    ):
        run_job(plan_of(obj, tmp_path), ctx)
    assert "training: 0/2 trainers finished" in caplog.text


def test_user_command_without_metrics_reports_status(ctx: RunContext, tmp_path: Path) -> None:
    metrics = run_job(plan_of(job("print('no metrics here')"), tmp_path), ctx)
    assert metrics == {"job": "standin", "status": "Succeeded"}


def test_missing_and_stale_graphserver(ctx: RunContext, tmp_path: Path) -> None:
    obj = job("pass")
    obj["spec"]["graph"]["graphServer"]["name"] = "absent"
    with pytest.raises(ConfigError, match="no local GraphServer named 'absent'"):
        run_job(plan_of(obj, tmp_path), ctx)
    entry = ctx.registry.read("gs")
    gone = psutil.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=60)
    ctx.registry.register(
        GraphServerEntry(
            name="stale",
            servers=entry.servers,
            token_file=entry.token_file,
            manifest_url=entry.manifest_url,
            pid=gone.pid,
            create_time=entry.create_time,
        )
    )
    obj["spec"]["graph"]["graphServer"]["name"] = "stale"
    with pytest.raises(ConfigError, match="stale"):
        run_job(plan_of(obj, tmp_path), ctx)


def test_relative_paths_resolve_against_the_manifest_folder(tmp_path: Path) -> None:
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "rel"},
        "spec": {
            "graph": {"source": {"url": "../data/g.npz"}},
            "partitioning": {"numParts": 3, "outputURL": "parts", "graphName": "g"},
            "trainers": {"app": {"name": "node-classification"}, "checkpoint": {"url": "ckpt"}},
        },
    }
    sub = tmp_path / "jobs"
    plan, workdir = plan_from_manifest(obj, sub / "job.yaml", None)
    assert plan.partitioning is not None
    assert plan.partitioning.graph_url == str(tmp_path / "data" / "g.npz")
    assert plan.partitioning.manifest_url == str(sub / "parts" / "g.json")
    assert plan.checkpoint_url == str(sub / "ckpt")
    assert workdir == sub / ".distgnn"
    assert plan.cwd == str(sub)
    assert resolve("s3://bucket/x", sub) == "s3://bucket/x"
    assert resolve("/abs/x", sub) == "/abs/x"
    # default output: the work folder
    del obj["spec"]["partitioning"]["outputURL"]
    plan, _ = plan_from_manifest(obj, sub / "job.yaml", tmp_path / "w")
    assert plan.partitioning is not None
    assert plan.partitioning.out_url == str(tmp_path / "w" / "partitions")
    assert plan.partitioning.train_mask == "train_mask"
    # balanceTrain balances the app's own train mask
    obj["spec"]["trainers"]["app"]["trainMask"] = "labelled"
    plan, _ = plan_from_manifest(obj, sub / "job.yaml", tmp_path / "w")
    assert plan.partitioning is not None and plan.partitioning.train_mask == "labelled"


def test_malformed_manifests_are_rejected_with_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: DistGNNJob\nspec: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml:.*line \d+.*malformed YAML"):
        load_yaml(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_yaml(tmp_path / "missing.yaml")
    obj = job("pass")
    obj["spec"]["trainers"]["replicas"] = 0
    with pytest.raises(ConfigError, match="replicas"):
        plan_of(obj, tmp_path)
    obj = job("pass")
    obj["kind"] = "Deployment"
    with pytest.raises(ConfigError, match="kind"):
        plan_of(obj, tmp_path)
    assert json.dumps(job("pass"))  # the helper itself stays valid


def test_servers_gather_on_the_cpus_the_trainers_leave_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Servers share the host with the trainers, whose torch threads take
    cpus // replicas each: one gather thread then, more only beside idle CPUs."""
    from distgnn.local import runner

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cpus, replicas, env, want in [
        (2, 2, {}, 1),
        (16, 2, {}, 1),
        (16, 2, {"OMP_NUM_THREADS": "3"}, 8),  # at most MAX_THREADS
        (8, 2, {"OMP_NUM_THREADS": "3"}, 2),
        (8, 2, {"OMP_NUM_THREADS": "x"}, 1),  # not a number: the trainers' default share
        (4, 8, {}, 1),
    ]:
        monkeypatch.setattr(runner, "available_cpus", lambda cpus=cpus: cpus)
        plan = LocalPlan(kind="DistGNNJob", name="j", replicas=replicas, env=env)
        assert runner.server_gather_threads(plan) == want, (cpus, replicas, env)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(runner, "available_cpus", lambda: 8)
    assert runner.server_gather_threads(LocalPlan(kind="DistGNNJob", name="j", replicas=2)) == 6


STAND_IN_SERVER = """
    import sys
    print('graph server starting partition=1', flush=True)
    print({line!r}, file=sys.stderr, flush=True)
    sys.exit({code})
"""


@pytest.mark.parametrize("code", [2, 1])
def test_a_servers_exit_2_is_one_line_and_exit_2_any_other_is_exit_1(
    ctx: RunContext, tmp_path: Path, code: int
) -> None:
    """As on Kubernetes (ServerConfigError): a graph server's exit 2 (a partition missing
    or malformed, no credentials, a port in use) fails the run in one line naming the
    server, its partition and its error line, and distgnn run exits 2; another exit fails
    it as before (no server restart in local mode), with the log tail, exit 1."""
    line = (
        "distgnn serve: error: /p/cora/part-00001/node/_N/feat.npy: partition file is missing"
        if code == 2
        else "distgnn serve: error: s3://p/cora.json: cannot reach the S3 endpoint"
    )
    argv = [sys.executable, "-c", textwrap.dedent(STAND_IN_SERVER.format(line=line, code=code))]
    with Supervisor(ctx.stream, grace=5) as sup:
        sup.start(ProcessSpec(server_name(1), argv))
        with pytest.raises(JobFailed) as ei:
            wait_ready(sup, ctx, {"server-1": (1, tmp_path / "never.ready")}, Deadline(None))
    msg = str(ei.value)
    if code == 2:
        assert ei.value.exit_status == 2
        assert msg == (
            "graph server server-1 (partition 1) exited with a configuration error (exit "
            f"code 2), not retried: {line}"
        )
    else:
        assert ei.value.exit_status == 1
        assert msg.splitlines()[0] == "server-1 exited before it was ready (exit code 1)"
        assert f"server-1 | {line}" in msg and "server-1 | graph server starting" in msg


def test_the_root_cause_of_a_log_is_its_cli_error_line() -> None:
    lines = [
        '{"level": "info", "msg": "graph server stopped", "partition": 0}',
        "distgnn serve: error: 127.0.0.1:30050: port in use",
        "some output after it",
    ]
    assert log_root_cause(lines) == "distgnn serve: error: 127.0.0.1:30050: port in use"
    assert log_root_cause(["Traceback ...", "ModuleNotFoundError: No module named 'x'"]) == (
        f"ModuleNotFoundError: No module named 'x' (not installed for {sys.executable}; "
        "DistGNN's examples: pip install -e '.[examples]')"
    )
    assert log_root_cause(["nothing to see"]) is None
