"""Receiving large buffers over real TCP with ``SO_RCVLOWAT`` raised (protocol.recv_exact):
every byte arrives, the socket is left as it was for the next (small) frame, a slow
sender is still received, and the deadline still fires."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from distgnn.errors import RequestTimeout
from distgnn.rpc import protocol
from distgnn.rpc.protocol import MsgType, encode_bytes, recv_frame

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "SO_RCVLOWAT"), reason="needs SO_RCVLOWAT (Linux)"
)


@contextmanager
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(receiver, sender): a connected pair of TCP sockets on 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as ls:
        snd = socket.create_connection(ls.getsockname(), timeout=10)
        rcv, _ = ls.accept()
    with rcv, snd:
        yield rcv, snd


def lowat(sock: socket.socket) -> int:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def send_slowly(sock: socket.socket, data: bytes, piece: int, gap: float) -> threading.Thread:
    def run() -> None:
        for i in range(0, len(data), piece):
            sock.sendall(data[i : i + piece])
            time.sleep(gap)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_large_answer_arrives_whole_and_the_socket_is_left_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a size that is no multiple of the most the kernel is asked to gather: the last
    # wait must ask for the rest only (else it waits for bytes that never come: with
    # no falling back before the deadline, a RequestTimeout)
    monkeypatch.setattr(protocol, "RCVLOWAT_WAIT", 60.0)
    rows = np.random.default_rng(0).random((3 * protocol.RCVLOWAT_MAX // 400 + 7, 100))
    rows = rows.astype(np.float32)
    small = np.arange(10, dtype=np.int64)
    data = encode_bytes(MsgType.PULL, 3, {}, [rows]) + encode_bytes(MsgType.PULL, 4, {}, [small])
    with tcp_pair() as (rcv, snd):
        t = threading.Thread(target=snd.sendall, args=(data,), daemon=True)
        t.start()
        f = recv_frame(rcv, "peer", deadline=time.monotonic() + 5)
        np.testing.assert_array_equal(f.bufs[0], rows)
        assert lowat(rcv) == 1  # a small frame next is not held back
        g = recv_frame(rcv, "peer", deadline=time.monotonic() + 5)
        np.testing.assert_array_equal(g.bufs[0], small)
        t.join(10)


def test_a_sender_slower_than_the_wait_is_still_received(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "RCVLOWAT_WAIT", 0.05)
    sets: list[int] = []
    real = protocol._set_lowat
    monkeypatch.setattr(protocol, "_set_lowat", lambda s, n: (sets.append(n), real(s, n)))
    rows = np.arange(300_000, dtype=np.int64)  # 2.4 MB in 64 KiB pieces 20 ms apart
    with tcp_pair() as (rcv, snd):
        t = send_slowly(snd, encode_bytes(MsgType.PULL, 1, {}, [rows]), 64 << 10, 0.02)
        f = recv_frame(rcv, "peer", deadline=time.monotonic() + 30)
        t.join(30)
        np.testing.assert_array_equal(f.bufs[0], rows)
        assert sets[0] == protocol.RCVLOWAT_MAX and 1 in sets  # raised, then given up
        assert lowat(rcv) == 1


def test_the_deadline_fires_when_the_sender_stops_half_way() -> None:
    rows = np.ones((2 * protocol.RCVLOWAT_MAX // 8,), np.int64)
    data = encode_bytes(MsgType.PULL, 1, {}, [rows])
    with tcp_pair() as (rcv, snd):
        snd.sendall(data[: len(data) // 2])  # and then nothing, connection kept open
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout):
            recv_frame(rcv, "peer", deadline=time.monotonic() + 1.0)
        took = time.monotonic() - t0
        assert 1.0 <= took < 10.0  # not before the deadline, and no hang
        assert lowat(rcv) == 1
