"""Real servers against hostile or careless clients: bounded resources, one-line errors."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from servers import Servers, partition_cora, running_servers

from distgnn.errors import ServerError, WriteFailed
from distgnn.rpc.client import Connection, Timeouts
from distgnn.rpc.protocol import HEADER, MAGIC, VERSION, MsgType, encode_bytes, recv_frame

LIMITS_ENV = {
    "DISTGNN_SERVER_IDLE_TIMEOUT": "1.5",
    "DISTGNN_SERVER_SEND_TIMEOUT": "1.5",
    "DISTGNN_SERVER_MAX_CONNECTIONS": "6",
    "DISTGNN_HEALTH_MAX_CONNECTIONS": "4",
    "DISTGNN_HEALTH_TIMEOUT": "1",
}


@pytest.fixture(scope="module")
def cora1(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(cora_path, tmp_path_factory.mktemp("cora1"), num_parts=1)


@pytest.fixture(scope="module")
def srv(cora1: str) -> Iterator[Servers]:
    with running_servers(cora1, num_parts=1, workers=1, env=LIMITS_ENV) as s:
        yield s
        assert "Traceback" not in s.log_text(0), s.log_text(0)[-3000:]
    assert s.returncodes == [0]


def _raw(srv: Servers, token: str | None = None) -> socket.socket:
    s = socket.create_connection(srv.addrs[0], timeout=10)
    if token is not None:
        s.sendall(encode_bytes(MsgType.HELLO, 1, {"token": token}))
        assert recv_frame(s, "srv", deadline=time.monotonic() + 10).type == MsgType.HELLO
    return s


def _answer(s: socket.socket) -> dict:
    f = recv_frame(s, "srv", deadline=time.monotonic() + 10)
    return {"type": f.type, **f.meta}


def _frame(meta: bytes, lens: list[int], mtype: int = MsgType.PING) -> bytes:
    head = HEADER.pack(MAGIC, VERSION, mtype, 0, 9, len(meta), len(lens), 0)
    return head + struct.pack(f"<{len(lens)}Q", *lens) + meta


def _conn(srv: Servers, session: str | None = None) -> Connection:
    c = Connection(*srv.addrs[0], srv.token, Timeouts(20, 20), session=session)
    c.connect()
    return c


def test_hostile_frames_get_error_frames_not_tracebacks(srv: Servers) -> None:
    cases = [
        (_frame(b'{"a":' + b"[" * 50_000 + b"]" * 50_000 + b"}", []), "nested too deeply"),
        (_frame(json.dumps({"bufs": [["int64", [10**30, 0]]]}).encode(), [0]), "descriptor"),
        (_frame(json.dumps({"bufs": [["int64", [True]]]}).encode(), [8]), "descriptor"),
    ]
    for data, match in cases:
        with _raw(srv, srv.token) as s:
            s.sendall(data)
            a = _answer(s)
            assert a["type"] == MsgType.ERROR and a["code"] == "protocol"
            assert match in a["message"]
    # a token with a lone surrogate is just a wrong token
    with _raw(srv) as s:
        s.sendall(encode_bytes(MsgType.HELLO, 1, {"token": "\ud800" + srv.token}))
        a = _answer(s)
        assert a["code"] == "auth"
    # names too long for the file system, unknown fields: bad_request, connection kept
    c = _conn(srv)
    for meta in (
        {"name": "node/_N/" + "n" * 130, "dtype": "float32", "shape": [2708]},
        {"name": "node/_N/x", "dtype": "float32", "shape": [2708], "init": {"kind": "pickle"}},
    ):
        with pytest.raises(ServerError, match=r"\(bad_request\)"):
            c.request(MsgType.INIT_TENSOR, meta)
    with pytest.raises(ServerError, match=r"\(bad_request\).*unknown tensor"):
        c.request(MsgType.PULL, {"name": "node/_N/\ud800"}, [np.arange(3)])
    assert c.request(MsgType.PING, {}).meta["part_id"] == 0
    c.close()
    assert "Traceback" not in srv.log_text(0)


def test_deletion_follows_ownership_across_clients(srv: Servers) -> None:
    a, b, c = _conn(srv, "session-a"), _conn(srv, "session-b"), _conn(srv, "session-c")
    spec = {
        "name": "node/_N/owned",
        "dtype": "float32",
        "shape": [2708, 2],
        "init": {"kind": "ones"},
    }
    assert a.request(MsgType.INIT_TENSOR, spec).meta["created"] is True
    assert b.request(MsgType.ATTACH_TENSOR, {"name": "node/_N/owned"}).meta["shape"] == [2708, 2]
    with pytest.raises(ServerError, match="only its creator"):
        c.request(MsgType.DELETE_TENSOR, {"name": "node/_N/owned"})
    with pytest.raises(ServerError, match="only its creator"):
        c.request(MsgType.DELETE_TENSOR, {"name": "node/_N/owned", "force": True})
    # the creator's pull still works after a third client's attempt
    assert a.request(MsgType.PULL, {"name": "node/_N/owned"}, [np.array([1])]).bufs[0].tolist() == [
        [1.0, 1.0]
    ]
    assert b.request(MsgType.DELETE_TENSOR, {"name": "node/_N/owned"}).meta["removed"] is False
    assert a.request(MsgType.PULL, {"name": "node/_N/owned"}, [np.array([1])]).bufs[0].shape == (
        1,
        2,
    )
    assert a.request(MsgType.DETACH_TENSOR, {"name": "node/_N/owned"}).meta["removed"] is True
    with pytest.raises(ServerError, match="unknown tensor"):
        b.request(MsgType.PULL, {"name": "node/_N/owned"}, [np.array([1])])
    for x in (a, b, c):
        x.close()


def test_idle_connections_are_closed_and_clients_reconnect(srv: Servers) -> None:
    started = time.monotonic()
    c = _conn(srv)
    assert set(c.server_info["limits"]) >= {"max_ids", "max_reply_bytes", "max_request_bytes"}
    first = c.sock
    assert first is not None
    # idle timeout 1.5 s: the server's FIN makes the socket readable (generous deadline: load)
    assert select.select([first], [], [], 60)[0], "the server never closed the idle connection"
    assert time.monotonic() - started >= 1.4  # not before the idle timeout
    assert first.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # closed by the server
    assert c.request(MsgType.PING, {}).meta["part_id"] == 0  # noticed before sending
    c.close()


def test_connections_use_tcp_keepalive(srv: Servers) -> None:
    c = _conn(srv)
    assert c.sock is not None
    local = c.sock.getsockname()[1]
    out = subprocess.run(
        ["ss", "-tnoH", "state", "established", f"( dport = :{local} )"],
        check=True, capture_output=True, text=True, timeout=10,
    ).stdout  # fmt: skip
    c.close()
    assert "keepalive" in out, out


def test_connection_cap_answers_busy(srv: Servers) -> None:
    held = [_raw(srv, srv.token) for _ in range(6)]
    try:
        with _raw(srv) as s:
            a = _answer(s)
            assert a["code"] == "busy" and "DISTGNN_SERVER_MAX_CONNECTIONS" in a["message"]
        c = Connection(*srv.addrs[0], srv.token, Timeouts(5, 1.5))
        with pytest.raises(ServerError, match="busy"):
            c.connect()
        held.pop().close()
        c = Connection(*srv.addrs[0], srv.token, Timeouts(5, 10))
        c.connect()  # retried while busy, then admitted
        c.close()
    finally:
        for s in held:
            s.close()


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _tids(pid: int) -> set[str]:
    return set(os.listdir(f"/proc/{pid}/task"))


def test_clients_that_never_read_are_dropped_after_the_send_timeout(srv: Servers) -> None:
    worker = srv.ready[0]["workers"][0]
    base = _tids(worker)
    # every thread seen while the clients connect and ask (sampled, not counted once after
    # a fixed sleep: on a loaded machine the first may give up before the last is started)
    seen: set[str] = set()
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.update(_tids(worker))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    socks = []
    try:
        for _ in range(4):
            s = _raw(srv, srv.token)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            # 600 rows of 5.7 KB = 3.4 MB that are never read
            s.sendall(encode_bytes(MsgType.PULL, 2, {"name": "node/_N/feat"}, [np.arange(600)]))
            socks.append(s)
        # generous deadline (load): without the send timeout they would block for ever
        deadline = time.monotonic() + 60
        while _tids(worker) - base and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        done.set()
        sampler.join(10)
    assert len(seen - base) >= 4, "one serving thread per client"
    assert not _tids(worker) - base, "blocked senders must give up after the send timeout"
    for s in socks:
        s.close()


def test_health_port_is_bounded_and_never_blocks_the_data_path(srv: Servers) -> None:
    pid = srv.procs[0].pid
    hport = srv.ready[0]["health_port"]
    base = _threads(pid)
    half = []
    for _ in range(60):  # half-sent requests (slowloris)
        s = socket.create_connection(("127.0.0.1", hport), timeout=5)
        s.sendall(b"GET /readyz HTTP/1.1\r\n")
        half.append(s)
    try:
        assert _threads(pid) <= base + 4 + 1
        c = _conn(srv)
        assert c.request(MsgType.PING, {}).meta["part_id"] == 0
        c.close()
        deadline = time.monotonic() + 60  # slots free up after the 1 s request timeout
        ok = False
        while not ok and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{hport}/readyz", timeout=2) as r:
                    ok = r.status == 200 and json.loads(r.read())["status"] == "ready"
            except OSError:
                time.sleep(0.2)
        assert ok
    finally:
        for s in half:
            s.close()


def test_read_requests_survive_a_worker_crash_and_writes_report_it(cora1: str) -> None:
    with running_servers(cora1, num_parts=1, workers=1) as srv:
        c = _conn(srv)
        ids = np.arange(2708)
        expected = c.request(MsgType.PULL, {"name": "node/_N/feat"}, [ids]).bufs[0]
        worker = c.server_info["pid"]
        os.kill(worker, signal.SIGSTOP)
        got: list = []
        t = threading.Thread(
            target=lambda: got.append(c.request(MsgType.PULL, {"name": "node/_N/feat"}, [ids]))
        )
        t.start()
        time.sleep(0.5)
        os.kill(worker, signal.SIGKILL)  # dies with the request in flight
        t.join(30)
        np.testing.assert_array_equal(got[0].bufs[0], expected)
        assert c.server_info["pid"] != worker  # answered by the restarted worker
        spec = {"name": "node/_N/w", "dtype": "int64", "shape": [2708], "persistent": True}
        c.request(MsgType.INIT_TENSOR, spec)
        worker = c.server_info["pid"]
        os.kill(worker, signal.SIGSTOP)
        rid = c.send(MsgType.PUSH, {"name": "node/_N/w"}, [np.array([1]), np.array([5])])
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(WriteFailed, match="may or may not have been applied") as ei:
            c.recv(rid, MsgType.PUSH)
        assert ei.value.applied is None
        c.close()
    assert srv.returncodes == [0]


def test_a_server_that_cannot_restart_its_worker_exits_cleanly(cora1: str) -> None:
    with running_servers(cora1, num_parts=1, workers=1) as srv:
        shm = srv.ready[0]["shm_dir"]
        os.unlink(os.path.join(shm, "info.json"))  # a new worker cannot attach
        os.kill(srv.ready[0]["workers"][0], signal.SIGKILL)
        assert srv.procs[0].wait(60) == 1
        assert not os.path.exists(shm), "shared memory must be removed"
        log = srv.log_text(0)
        assert "cannot be restarted" in log
