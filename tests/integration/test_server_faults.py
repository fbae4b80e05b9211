"""Servers that die, hang or are stopped: clients get clear errors, never a hang."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from servers import partition_cora, running_servers

from distgnn.errors import RequestTimeout, ServerUnavailable
from distgnn.rpc.client import Connection, Timeouts
from distgnn.rpc.protocol import MsgType


@pytest.fixture(scope="module")
def cora1(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(cora_path, tmp_path_factory.mktemp("cora1"), num_parts=1)


def test_hung_then_killed_server_gives_clear_errors(cora1: str) -> None:
    # short timeouts only where one must fire (a stopped worker, a dead server): every
    # answer a live worker owes gets a generous one, as a loaded machine may be slow
    generous = Timeouts(request=60, connect=60)
    with running_servers(cora1, num_parts=1, workers=1) as srv:
        c = Connection(*srv.addrs[0], srv.token, generous)
        c.connect()
        worker = srv.ready[0]["workers"][0]
        # the one worker the server reported ready is the one serving (none restarted)
        serving = [w.pid for w in psutil.Process(srv.procs[0].pid).children()]
        assert serving == [worker], srv.log_text(0)
        os.kill(worker, signal.SIGSTOP)
        c.timeouts = Timeouts(request=1.5, connect=1.0)
        try:
            with pytest.raises(RequestTimeout, match=r"did not answer PULL within"):
                c.request(MsgType.PULL, {"name": "node/_N/feat"}, [np.arange(100)])
        except BaseException:
            c.close()
            raise AssertionError(f"a stopped worker answered:\n{srv.log_text(0)}") from None
        finally:
            os.kill(worker, signal.SIGCONT)
        # the connection is re-opened after the timeout and works again
        c.timeouts = generous
        assert c.request(MsgType.PING, {}).meta["part_id"] == 0
        rid = c.send(MsgType.PULL, {"name": "node/_N/feat"}, [np.arange(2000)])
        # a dead server: its sockets close (no answer is awaited), a reconnect is refused
        # until the connect timeout
        c.timeouts = Timeouts(request=60, connect=1.0)
        srv.kill(0)
        with pytest.raises((ServerUnavailable, RequestTimeout), match=r"127\.0\.0\.1"):
            c.recv(rid, MsgType.PULL)
        # the worker may outlive its killed parent for a moment: then the reconnect is
        # accepted and reset ("went away") instead of refused ("unreachable")
        with pytest.raises(ServerUnavailable, match=r"127\.0\.0\.1:\d+.*(unreachable|went away)"):
            c.request(MsgType.PING, {})
        c.close()
    assert srv.returncodes[0] == -signal.SIGKILL


def test_sigterm_drains_in_flight_requests_and_exits_0(cora1: str) -> None:
    with running_servers(cora1, num_parts=1, workers=2) as srv:
        conns = [Connection(*srv.addrs[0], srv.token, Timeouts(30, 5)) for _ in range(4)]
        ids = np.arange(2708)
        sent = [c.send(MsgType.PULL, {"name": "node/_N/feat"}, [ids]) for c in conns]
        srv.procs[0].send_signal(signal.SIGTERM)
        for c, rid in zip(conns, sent, strict=True):
            assert c.recv(rid, MsgType.PULL).bufs[0].shape == (2708, 1433)
            c.close()
        assert srv.procs[0].wait(60) == 0
        shm = srv.ready[0]["shm_dir"]
        assert not os.path.exists(shm), "shared memory must be removed on exit"
        # every line names the partition, the workers' (their drain included) too
        lines = [json.loads(ln) for ln in srv.log_text(0).splitlines() if ln.startswith("{")]
        assert any(o["msg"] == "worker drained" for o in lines)
        assert all(o.get("partition") == 0 for o in lines), lines
    assert srv.returncodes == [0]


def _serve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distgnn.cli", "serve", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_serve_refuses_bad_configuration(cora1: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTGNN_")}
    r = _serve(["--manifest", cora1, "--part-id", "0"], env)
    assert r.returncode == 2 and "token is required" in r.stderr
    r = _serve(["--manifest", cora1], env)
    assert r.returncode == 2 and "--part-id" in r.stderr
    r = _serve(["--part-id", "0", "--insecure-no-token"], env)
    assert r.returncode == 2 and "--manifest" in r.stderr
    r = _serve(["--manifest", cora1, "--insecure-no-token", "--workers", "0"],
               {**env, "POD_NAME": "graph-srv-0"})  # fmt: skip
    assert r.returncode == 2 and "--workers" in r.stderr
    r = _serve(["--manifest", str(tmp_path / "none.json"), "--part-id", "0",
                "--insecure-no-token", "--port", "0", "--health-port", "0"], env)  # fmt: skip
    assert r.returncode == 2 and "none.json" in r.stderr


def test_env_configuration_and_statefulset_ordinal(cora1: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    tok = tmp_path / "tok"
    tok.write_text("s3cret\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTGNN_")}
    env.update(
        DISTGNN_MANIFEST=cora1,
        POD_NAME="mygraph-server-0",
        DISTGNN_SERVER_PORT="0",
        DISTGNN_HEALTH_PORT="0",
        DISTGNN_SERVER_BIND="127.0.0.1",
        DISTGNN_TOKEN_FILE=str(tok),
        DISTGNN_READY_FILE=str(ready),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "distgnn.cli", "serve"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        import json

        info = json.loads(ready.read_text())
        c = Connection("127.0.0.1", info["port"], "s3cret", Timeouts(10, 10))
        assert c.request(MsgType.PING, {}).meta["part_id"] == 0
        c.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0


def test_crashed_worker_is_replaced_and_data_survives(cora1: str) -> None:
    import urllib.request

    with running_servers(cora1, num_parts=1, workers=2) as srv:
        c = Connection(*srv.addrs[0], srv.token, Timeouts(20, 20))
        c.request(MsgType.INIT_TENSOR, {"name": "node/_N/keep", "dtype": "int64",
                                        "shape": [2708], "persistent": True})  # fmt: skip
        c.request(MsgType.PUSH, {"name": "node/_N/keep"}, [np.array([9]), np.array([42])])
        victim = c.server_info["pid"]
        os.kill(victim, signal.SIGKILL)
        health = f"http://127.0.0.1:{srv.ready[0]['health_port']}/healthz"
        with urllib.request.urlopen(health, timeout=10) as r:
            assert r.status == 200
        # read-only requests are sent again on a fresh connection (to a surviving or
        # restarted worker): the client does not see the crash
        assert c.request(MsgType.PING, {}).meta["part_id"] == 0
        got = c.request(MsgType.PULL, {"name": "node/_N/keep"}, [np.array([9, 10])]).bufs[0]
        assert got.tolist() == [42, 0]
        deadline = time.monotonic() + 60
        alive: set[int] = set()
        while len(alive) < 2 and time.monotonic() < deadline:
            d = Connection(*srv.addrs[0], srv.token, Timeouts(20, 20))
            d.connect()
            alive.add(d.server_info["pid"])
            d.close()
        assert len(alive) == 2 and victim not in alive
        c.close()
    assert srv.returncodes == [0]


def test_client_started_before_the_server_connects_once_ready(cora1: str, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tok = tmp_path / "tok"
    tok.write_text("early")
    c = Connection("127.0.0.1", port, "early", Timeouts(request=30, connect=90))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distgnn.cli", "serve", "--manifest", cora1, "--part-id", "0",
         "--bind", "127.0.0.1", "--port", str(port), "--health-port", "0",
         "--token-file", str(tok)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        c.connect()  # refused while the server starts and loads; retried until it listens
        assert c.request(MsgType.PING, {}).meta["part_id"] == 0
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_shared_memory_of_a_sigkilled_server_is_swept_at_next_start(cora1: str) -> None:
    with running_servers(cora1, num_parts=1, workers=1) as srv:
        shm = srv.ready[0]["shm_dir"]
        for pid in [*srv.ready[0]["workers"], srv.procs[0].pid]:
            os.kill(pid, signal.SIGKILL)  # no chance to clean up
        srv.procs[0].wait(10)
        assert os.path.isdir(shm) and os.path.exists(os.path.join(shm, "owner.json"))
    with running_servers(cora1, num_parts=1, workers=1) as srv2:
        assert not os.path.exists(shm), "a new server sweeps folders of dead servers"
        assert os.path.isdir(srv2.ready[0]["shm_dir"])
