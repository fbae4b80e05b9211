"""The wire codec: round trips, zero-copy receive, and rejection of bad frames."""

from __future__ import annotations

import json
import socket
import struct
import threading

import numpy as np
import pytest

from distgnn.errors import ProtocolError, RequestTimeout, ServerUnavailable
from distgnn.rpc.protocol import (
    HEADER,
    MAGIC,
    VERSION,
    Gathered,
    Limits,
    MsgType,
    decode_bytes,
    encode,
    encode_bytes,
    recv_frame,
    send_frame,
)


def frame_bytes(mtype: int, meta: bytes, lens: list[int], payload: bytes = b"", **kw: int) -> bytes:
    head = HEADER.pack(
        kw.get("magic_bytes", MAGIC),
        kw.get("version", VERSION),
        mtype,
        0,
        7,
        len(meta),
        len(lens),
        0,
    )
    return head + struct.pack(f"<{len(lens)}Q", *lens) + meta + payload


def test_round_trip_in_memory() -> None:
    bufs = [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([True, False]),
        np.empty((0, 5), dtype=np.int64),
        np.arange(10, dtype=np.int16)[::2],  # non-contiguous input
    ]
    f = decode_bytes(encode_bytes(MsgType.PULL, 42, {"name": "node/_N/feat", "x": [1, 2]}, bufs))
    assert f.type == MsgType.PULL and f.req_id == 42
    assert f.meta == {"name": "node/_N/feat", "x": [1, 2]}
    for a, b in zip(bufs, f.bufs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_round_trip_over_socket_into_preallocated() -> None:
    a, b = socket.socketpair()
    with a, b:
        big = np.random.default_rng(0).random((2000, 300)).astype(np.float32)  # 2.4 MB
        chunks = encode(MsgType.PUSH, 3, {"op": "set"}, [np.arange(2000), big])
        t = threading.Thread(target=send_frame, args=(a, chunks))
        t.start()
        dest = np.empty_like(big)
        f = recv_frame(b, "peer", deadline=None, into=lambda i, d, s: dest if i == 1 else None)
        t.join(10)
        assert f.bufs[1] is dest
        np.testing.assert_array_equal(dest, big)
        np.testing.assert_array_equal(f.bufs[0], np.arange(2000))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (frame_bytes(1, b"{}", [], magic_bytes=b"XXXX"), "magic"),
        (frame_bytes(1, b"{}", [], version=99), "version"),
        (frame_bytes(77, b"{}", []), "unknown message type"),
        (frame_bytes(1, b"not json", []), "JSON"),
        (frame_bytes(1, b"[1]", []), "JSON object"),
        (frame_bytes(1, b"{}", [4], b"abcd"), "describe"),
        (frame_bytes(1, json.dumps({"bufs": [["object", [1]]]}).encode(), [8], b"x" * 8), "dtype"),
        (
            frame_bytes(1, json.dumps({"bufs": [["complex64", [1]]]}).encode(), [8], b"x" * 8),
            "dtype",
        ),
        (frame_bytes(1, json.dumps({"bufs": [["int64", [2]]]}).encode(), [8], b"x" * 8), "match"),
        (frame_bytes(1, json.dumps({"bufs": [["int64", [-1]]]}).encode(), [8], b"x" * 8), "descr"),
        (frame_bytes(1, json.dumps({"bufs": [["int64", [2]]]}).encode(), [16], b"x" * 8), "trunc"),
        (frame_bytes(1, b"{}", []) + b"extra", "trailing"),
        (frame_bytes(1, b"{}", [])[:10], "truncated"),
        (frame_bytes(1, b"{" * 20, [])[:30], "truncated"),
    ],
)
def test_malformed_frames_are_rejected(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_bytes(data)


def test_limits_are_checked_before_allocating() -> None:
    lim = Limits(max_meta=64, max_bufs=2, max_buf_bytes=100, max_total_bytes=150)
    with pytest.raises(ProtocolError, match="metadata length"):
        decode_bytes(frame_bytes(1, b"{" + b" " * 100 + b"}", []), lim)
    with pytest.raises(ProtocolError, match="buffers exceed"):
        decode_bytes(frame_bytes(1, b"{}", [1, 1, 1]), lim)
    with pytest.raises(ProtocolError, match="size limits"):
        decode_bytes(frame_bytes(1, b"{}", [1 << 40]), lim)
    with pytest.raises(ProtocolError, match="size limits"):
        decode_bytes(frame_bytes(1, b"{}", [90, 90]), lim)
    with pytest.raises(ProtocolError, match="exceeds"):
        encode(MsgType.PING, 1, {"x": "y" * 100}, limits=lim)
    with pytest.raises(ProtocolError, match="not allowed"):
        encode(MsgType.PING, 1, {}, [np.array([1 + 2j])])


def test_socket_errors_are_clear() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame_bytes(1, b'{"bufs": []}', [])[:10])
        with pytest.raises(RequestTimeout):
            import time

            recv_frame(b, "peer", deadline=time.monotonic() + 0.2)
        a.close()
        with pytest.raises(ServerUnavailable, match="closed"):
            recv_frame(b, "peer", deadline=None)


# narrow rows: gathered (split over threads) in blocks of BLOCK_BYTES; >= 4 KiB rows: iovecs
@pytest.mark.parametrize("width", [3, 300, 512, 1100])
def test_streamed_gather_equals_fancy_indexing(width: int) -> None:
    table = np.random.default_rng(width).random((5000, width)).astype(np.float32)
    rows = np.random.default_rng(1).integers(0, 5000, 4000)
    g = Gathered(table, rows)
    assert g.shape == (4000, width) and g.nbytes == 4000 * width * 4
    f = decode_bytes(encode_bytes(MsgType.PULL, 1, {}, [g]))  # type: ignore[list-item]
    np.testing.assert_array_equal(f.bufs[0], table[rows])
    a, b = socket.socketpair()
    with a, b:
        t = threading.Thread(target=send_frame, args=(a, encode(MsgType.PULL, 2, {}, [g])))
        t.start()
        got = recv_frame(b, "peer", deadline=None)
        t.join(10)
    np.testing.assert_array_equal(got.bufs[0], table[rows])


def test_streamed_gather_in_many_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import distgnn.rpc.protocol as proto

    monkeypatch.setattr(proto, "BLOCK_BYTES", 1000)  # 25 rows of 40 bytes a block
    table = np.arange(3000 * 10, dtype=np.float32).reshape(3000, 10)
    rows = np.random.default_rng(2).integers(0, 3000, 1001)
    blocks = [bytes(m) for blk in Gathered(table, rows).blocks() for m in blk]
    assert len(blocks) == 41 and len(blocks[-1]) == 40
    got = np.frombuffer(b"".join(blocks), dtype=np.float32).reshape(-1, 10)
    np.testing.assert_array_equal(got, table[rows])


def test_the_frame_head_goes_out_with_the_first_gathered_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ``sendmsg`` per gathered block, the first one carrying the frame's head too (no
    separate small send, and one wake-up of the reader fewer); the bytes decode."""
    import distgnn.rpc.protocol as proto

    monkeypatch.setattr(proto, "BLOCK_BYTES", 4000)  # 100 rows of 40 bytes a block

    class Spy:
        def __init__(self) -> None:
            self.calls: list[bytes] = []

        def sendmsg(self, bufs: list[memoryview | bytes]) -> int:
            self.calls.append(b"".join(bytes(b) for b in bufs))
            return len(self.calls[-1])

    table = np.arange(3000 * 10, dtype=np.float32).reshape(3000, 10)
    rows = np.random.default_rng(3).integers(0, 3000, 250)
    spy = Spy()
    send_frame(spy, encode(MsgType.PULL, 7, {"gen": 1}, [Gathered(table, rows)]))  # type: ignore[arg-type]
    assert [len(c) for c in spy.calls][1:] == [4000, 2000]
    assert len(spy.calls[0]) > 4000 and spy.calls[0].startswith(MAGIC)
    f = decode_bytes(b"".join(spy.calls))
    assert f.meta == {"gen": 1}
    np.testing.assert_array_equal(f.bufs[0], table[rows])


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        (b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (json.dumps({"bufs": [["int64", [10**30, 0]]]}).encode(), "descriptor"),
        (json.dumps({"bufs": [["int64", [True]]]}).encode(), "descriptor"),
        (json.dumps({"bufs": [["int64", [0] * 40]]}).encode(), "descriptor"),
        (json.dumps({"bufs": [[["int64"], [0]]]}).encode(), "descriptor"),
        (b'{"bufs": [["int64", [0]]], "x": "\\ud800"}', None),
    ],
)
def test_hostile_metadata_is_a_protocol_error_not_a_crash(meta: bytes, match: str | None) -> None:
    lens = [] if b'"bufs"' not in meta else [0]
    data = frame_bytes(1, meta, lens)
    lim = Limits(max_meta=1 << 20)
    if match is None:  # a lone surrogate is valid JSON: decoded, then refused by whoever reads it
        assert decode_bytes(data, lim).meta["x"] == "\ud800"
        return
    with pytest.raises(ProtocolError, match=match):
        decode_bytes(data, lim)


@pytest.mark.parametrize("width", [64, 2048])  # gathered blocks, native iovecs
def test_a_slow_reader_cannot_hold_the_sender_past_the_deadline(width: int) -> None:
    import time

    table = np.zeros((4000, width), np.float32)
    frame = encode(MsgType.PULL, 1, {}, [Gathered(table, np.arange(4000))])
    a, b = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:  # always some progress: no single send waits for long
        while not stop.is_set():
            try:
                b.recv(512)
            except OSError:
                return
            time.sleep(0.01)

    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        a.settimeout(5.0)
        t = threading.Thread(target=trickle)
        t.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(TimeoutError):
                send_frame(a, frame, deadline=time.monotonic() + 0.5)
        finally:
            stop.set()
            a.close()
            t.join(10)
        assert time.monotonic() - t0 < 3.0


def test_other_byte_orders_travel_as_their_values_and_odd_dtypes_are_refused() -> None:
    big = np.arange(5, dtype=">f4")
    f = decode_bytes(encode_bytes(MsgType.PUSH, 1, {}, [big]))
    assert f.bufs[0].dtype == np.float32
    np.testing.assert_array_equal(f.bufs[0], np.arange(5, dtype=np.float32))
    for bad in (np.zeros(2, "V4"), np.zeros(2, [("a", "<f4")]), np.zeros(2, np.complex64)):
        with pytest.raises(ProtocolError, match="not allowed on the wire"):
            encode(MsgType.PUSH, 1, {}, [bad])
