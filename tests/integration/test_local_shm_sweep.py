"""Local mode cleans up after a graph server killed by SIGKILL: its shared-memory folder
(which the dead server could not remove) is swept when ``distgnn run`` notices."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest

from distgnn.errors import JobFailed
from distgnn.local.plan import plan_from_manifest
from distgnn.local.registry import Registry
from distgnn.local.runner import RunContext, run_job

KILL_SERVER_0 = """
import json, os, signal, sys, time, psutil
from distgnn.server.sweep import read_owner
token = os.environ["DISTGNN_TOKEN_FILE"]
server = next(
    p for p in psutil.process_iter(["cmdline"])
    if p.info["cmdline"] and "serve" in p.info["cmdline"] and token in p.info["cmdline"]
    and p.info["cmdline"][p.info["cmdline"].index("--part-id") + 1] == "0"
)
folders = [e.path for e in os.scandir("/dev/shm") if e.name.startswith("distgnn-")
           and (o := read_owner(e.path)) is not None and o.pid == server.pid]
with open(sys.argv[1], "w") as f:
    json.dump({"pid": server.pid, "folders": folders}, f)
os.kill(server.pid, signal.SIGKILL)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Path:
    from distgnn.partition.partitioner import partition_graph

    out = tmp_path_factory.mktemp("parts")
    partition_graph(str(cora_path), 2, str(out), "cora", progress=False)
    return out / "cora.json"


def test_shared_memory_of_a_killed_server_is_swept(parts: Path, tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    record = tmp_path / "killed.json"
    obj = {
        "apiVersion": "distgnn.dev/v1alpha1",
        "kind": "DistGNNJob",
        "metadata": {"name": "shm"},
        "spec": {
            "graph": {"partitions": {"manifestURL": str(parts)}},
            "trainers": {
                "replicas": 1,
                "command": [sys.executable, "-c", textwrap.dedent(KILL_SERVER_0), str(record)],
            },
            "runPolicy": {"backoffLimit": 0},
        },
    }
    plan, work = plan_from_manifest(obj, tmp_path / "job.yaml", tmp_path / "work")
    ctx = RunContext(
        workdir=work, registry=Registry(tmp_path / "state"), stream=io.StringIO(), grace=5
    )
    with pytest.raises(JobFailed, match="server-0 died"):
        run_job(plan, ctx)
    killed = json.loads(record.read_text(encoding="utf-8"))
    assert killed["folders"], "the server had no shared-memory folder"
    for folder in killed["folders"]:
        assert not Path(folder).exists(), f"{folder} of the killed server was left behind"
