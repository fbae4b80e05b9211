"""Native iovec sends of table rows: exact bytes, partial sends resumed, timeouts kept."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from distgnn.rpc import rowsend

pytestmark = pytest.mark.skipif(
    not rowsend.available(np.zeros((1, 1))), reason="native sendmsg needs Linux/glibc"
)


def _recv_all(sock: socket.socket, n: int, out: list[bytes]) -> None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    out.append(bytes(buf))


@pytest.mark.parametrize("row", [(1025,), (3, 7), (1,)])
def test_rows_arrive_exactly_through_partial_sends(row: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((3000, *row)).astype(np.float32)
    rows = rng.integers(0, 3000, 2500)  # repeats and any order
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # many partial sends
        a.settimeout(10.0)  # non-blocking fd underneath, as on a server connection
        got: list[bytes] = []
        t = threading.Thread(target=_recv_all, args=(b, table[rows].nbytes, got))
        t.start()
        rowsend.send_rows(a, table, rows)
        t.join(10)
    assert got[0] == table[rows].tobytes()


def test_full_socket_times_out_instead_of_hanging() -> None:
    table = np.zeros((1000, 1024), np.float32)
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        a.settimeout(0.3)
        with pytest.raises(TimeoutError):
            rowsend.send_rows(a, table, np.arange(1000))  # nobody reads


def _recv_compare(sock: socket.socket, expected: bytes, ok: list[bool]) -> None:
    view, pos, buf = memoryview(expected), 0, bytearray(1 << 16)
    while pos < len(expected):
        n = sock.recv_into(buf)
        if not n or buf[:n] != view[pos : pos + n]:
            break
        pos += n
    ok.append(pos == len(expected))


def test_send_holds_no_memory_per_requested_row() -> None:
    import tracemalloc

    table = np.arange(400, dtype=np.float32).reshape(100, 4)
    rows = np.random.default_rng(1).integers(0, 100, 1_000_000)  # 16 MB of iovecs if built whole
    expected = table[rows].tobytes()
    a, b = socket.socketpair()
    with a, b:
        a.settimeout(10.0)
        ok: list[bool] = []
        t = threading.Thread(target=_recv_compare, args=(b, expected, ok))
        t.start()
        tracemalloc.start()
        try:
            rowsend.send_rows(a, table, rows)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        t.join(30)
    assert ok == [True]
    assert peak < 2 * rowsend.IOV_BLOCK * 16, peak  # one block of iovecs, not one per row
