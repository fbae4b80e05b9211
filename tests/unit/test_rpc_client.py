"""Client connections against a scripted peer: write outcomes, busy retries, pipelining."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from distgnn.errors import ServerError, WriteFailed
from distgnn.rpc.client import Connection, Timeouts
from distgnn.rpc.protocol import FLAG_RESPONSE, MsgType, encode_bytes, error_meta, recv_frame

Script = Callable[[socket.socket, int], None]


def _hello(conn: socket.socket) -> None:
    f = recv_frame(conn, "client", deadline=time.monotonic() + 10)
    assert f.type == MsgType.HELLO and f.meta["session"] == "sess-1"
    conn.sendall(_answer(MsgType.HELLO, f.req_id, {"part_id": 0}))


def _answer(mtype: MsgType, req_id: int, meta: dict) -> bytes:
    data = bytearray(encode_bytes(mtype, req_id, meta))
    struct.pack_into("<H", data, 6, FLAG_RESPONSE)  # the header's flags field
    return bytes(data)


@pytest.fixture
def peer() -> Iterator[Callable[[Script], tuple[str, int]]]:
    """Loopback listeners, each running ``script(conn, n)`` for its n-th connection."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    listeners: list[socket.socket] = []

    def start(script: Script) -> tuple[str, int]:
        lst = socket.create_server(("127.0.0.1", 0))
        lst.settimeout(0.1)
        listeners.append(lst)

        def loop() -> None:
            n = 0
            while not stop.is_set():
                try:
                    conn, _ = lst.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.settimeout(None)
                with conn, contextlib.suppress(OSError):
                    script(conn, n)
                n += 1

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        threads.append(t)
        return lst.getsockname()[:2]

    yield start
    stop.set()
    for t in threads:
        t.join(5)
    for lst in listeners:
        lst.close()


def test_a_write_cut_while_sending_reports_not_applied(peer) -> None:
    def script(conn: socket.socket, n: int) -> None:
        _hello(conn)
        conn.recv(1024)  # part of the PUSH, then a reset
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    c = Connection(*peer(script), "tok", Timeouts(10, 5), session="sess-1")
    big = np.zeros((4096, 4096), np.float32)  # 64 MB: the reset lands mid-send
    with pytest.raises(WriteFailed, match="was not applied") as ei:
        c.request(MsgType.PUSH, {"name": "node/_N/x"}, [np.arange(4096), big])
    assert ei.value.applied is False
    c.close()


def test_busy_servers_are_retried_until_the_connect_timeout(peer) -> None:
    def script(conn: socket.socket, n: int) -> None:
        if n < 2:
            conn.sendall(_answer(MsgType.ERROR, 0, error_meta("busy", "too many")))
            return
        _hello(conn)
        f = recv_frame(conn, "client", deadline=time.monotonic() + 10)
        conn.sendall(_answer(MsgType.PING, f.req_id, {"part_id": 0}))
        time.sleep(0.5)

    c = Connection(*peer(script), "tok", Timeouts(10, 10), session="sess-1")
    assert c.request(MsgType.PING, {}).meta["part_id"] == 0
    c.close()

    def always_busy(conn: socket.socket, n: int) -> None:
        conn.sendall(_answer(MsgType.ERROR, 0, error_meta("busy", "too many")))

    c = Connection(*peer(always_busy), "tok", Timeouts(5, 1.0), session="sess-1")
    with pytest.raises(ServerError, match="busy") as ei:
        c.connect()
    assert ei.value.code == "busy"


def test_pipelined_requests_keep_their_answers(peer) -> None:
    def script(conn: socket.socket, n: int) -> None:
        _hello(conn)
        for _ in range(2):
            f = recv_frame(conn, "client", deadline=time.monotonic() + 10)
            conn.sendall(_answer(MsgType.PING, f.req_id, {"n": f.req_id}))
        time.sleep(0.5)

    c = Connection(*peer(script), "tok", Timeouts(10, 5), session="sess-1")
    a = c.send(MsgType.PING, {})
    time.sleep(0.2)  # the first answer is readable when the second request is sent
    b = c.send(MsgType.PING, {})
    assert c.recv(a, MsgType.PING).meta["n"] == a
    assert c.recv(b, MsgType.PING).meta["n"] == b
    c.close()
