"""The wire protocol: versioned binary frames, no pickle.

A frame is::

    header   struct HEADER (24 bytes): magic b"DGNN", version u8, type u8, flags u16,
             request id u64, metadata length u32, number of buffers u16, reserved u16
    lengths  one u64 per buffer
    metadata UTF-8 JSON object; its "bufs" list gives each buffer's dtype and shape
    buffers  raw C-order array bytes, back to back

Buffers are sent straight from the arrays' memory with ``sendmsg`` (no
concatenation) and received with ``recv_into`` into preallocated NumPy arrays,
optionally into caller-provided destinations (see :func:`recv_frame`). Every size
is checked against :class:`Limits` before anything is allocated, and dtypes come
from :data:`DTYPES`; anything else raises :class:`~distgnn.errors.ProtocolError`.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from distgnn.errors import ProtocolError, RequestTimeout, ServerUnavailable
from distgnn.rpc import rowsend
from distgnn.rpc.gather import default_gatherer

MAGIC = b"DGNN"
VERSION = 1
HEADER = struct.Struct("<4sBBHQIHH")
FLAG_RESPONSE = 0x1

DTYPES: frozenset[str] = frozenset(
    {
        "bool",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    }
)
"""dtypes allowed in buffers (little-endian native on every supported platform)."""
_NAME = {np.dtype(n): n for n in DTYPES}
"""Each allowed dtype's wire name (``dtype.name`` is a Python-level property: ~6 us)."""
_DTYPE = {n: np.dtype(n) for n in DTYPES}


class MsgType(IntEnum):
    """Every message type; a response carries the request's type and FLAG_RESPONSE."""

    HELLO = 1
    GET_META = 2
    PULL = 3
    PUSH = 4
    INIT_TENSOR = 5
    DELETE_TENSOR = 6
    SPARSE_UPDATE = 7
    SAMPLE_NEIGHBORS = 8
    FIND_EDGES = 9
    DEGREES = 10
    PING = 11
    LIST_TENSORS = 12
    ATTACH_TENSOR = 13
    DETACH_TENSOR = 14
    ERROR = 255


MAX_NDIM = 8
"""Dimensions of a buffer on the wire."""
MAX_DIM = 1 << 40
"""Largest size of one dimension (also bounds a zero-size buffer's other dimensions)."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds checked before allocating anything for an incoming frame."""

    max_meta: int = 1 << 20
    max_bufs: int = 64
    max_buf_bytes: int = 8 << 30
    max_total_bytes: int = 16 << 30


@dataclass
class Frame:
    """One decoded message."""

    type: MsgType
    req_id: int
    meta: dict[str, Any]
    bufs: list[np.ndarray] = field(default_factory=list)
    flags: int = 0

    @property
    def is_response(self) -> bool:
        return bool(self.flags & FLAG_RESPONSE)


ZERO_COPY_ROW = 4096
"""Rows of at least this many bytes are sent straight from the table (no user-space copy);
narrower rows are gathered first (measured faster than kernel-gathered iovecs for 2 KiB
rows, slower for 4 KiB rows)."""
BLOCK_BYTES = 8 << 20
"""Narrow rows are gathered and sent this many bytes at a time (bounds a connection's
scratch memory; one block covers a typical pull)."""


@dataclass
class Gathered:
    """``table[rows]`` sent without materialising it whole: a streaming gather.

    ``rows`` must already be checked to lie in ``[0, len(table))``. Wide rows (>=
    ``ZERO_COPY_ROW`` bytes) go out as ``sendmsg`` iovecs pointing into the table (the
    kernel gathers them); narrower rows are gathered up to ``BLOCK_BYTES`` at a time,
    each block split over the process's cores (:mod:`distgnn.rpc.gather`), then sent.
    Gathering the next block while the previous one is sent was measured slower on
    2 cores (2.4 vs 1.8 ms for 5 MB): the sender and receiver already keep both busy.
    """

    table: np.ndarray
    rows: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        return self.table.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.rows), *self.table.shape[1:])

    @property
    def nbytes(self) -> int:
        return len(self.rows) * self.row_bytes

    @property
    def row_bytes(self) -> int:
        return math.prod(self.table.shape[1:]) * self.table.dtype.itemsize

    def blocks(self) -> Iterator[list[memoryview]]:
        rb, n = self.row_bytes, len(self.rows)
        if rb == 0 or n == 0:
            return
        if rb >= ZERO_COPY_ROW:
            flat = self.table.reshape(-1).view(np.uint8).data
            for i in range(0, n, 1000):
                yield [flat[o : o + rb] for o in (self.rows[i : i + 1000] * rb).tolist()]
            return
        step = max(1, BLOCK_BYTES // rb)
        gatherer = default_gatherer()
        buf = np.empty((min(step, n), *self.table.shape[1:]), dtype=self.table.dtype)
        for i in range(0, n, step):
            r = self.rows[i : i + step]
            out = gatherer.gather(self.table, r, buf[: len(r)])
            yield [out.reshape(-1).view(np.uint8).data]


Chunk = memoryview | bytes | Gathered


class Segments:
    """Destinations that receive one buffer together, in order (a scatter receive).

    Each is a writable C-contiguous array of the buffer's dtype and row shape; their
    rows add up to the buffer's. After the receive, ``received`` is True and the frame
    holds an empty placeholder for that buffer.
    """

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = list(arrays)
        self.received = False

    def fits(self, dt: np.dtype, shape: tuple[int, ...]) -> bool:
        rows = 0
        for a in self.arrays:
            if a.dtype != dt or a.shape[1:] != shape[1:] or not a.flags.c_contiguous:
                return False
            if not a.flags.writeable:
                return False
            rows += a.shape[0]
        return len(shape) > 0 and rows == shape[0]


Into = Callable[[int, np.dtype, tuple[int, ...]], "np.ndarray | Segments | None"]
"""``into(index, dtype, shape)`` may return a writable C-contiguous array (or
:class:`Segments`) to receive buffer ``index`` directly (zero extra copy), or None to let
the codec allocate one."""


def _as_buffer(a: np.ndarray | Gathered) -> np.ndarray | Gathered:
    if a.dtype not in _NAME:
        native = a.dtype.newbyteorder("=")
        if isinstance(a, Gathered) or native not in _NAME:
            raise ProtocolError(f"dtype {a.dtype} is not allowed on the wire")
        return np.ascontiguousarray(a, dtype=native)  # the wire is little-endian
    return a if isinstance(a, Gathered) else np.ascontiguousarray(a)


def encode(
    mtype: MsgType,
    req_id: int,
    meta: dict[str, Any],
    bufs: Sequence[np.ndarray | Gathered] = (),
    flags: int = 0,
    limits: Limits | None = None,
) -> list[Chunk]:
    """The frame as a list of byte chunks (buffers are views of the arrays, not copies)."""
    lim = limits or Limits()
    arrays = [_as_buffer(b) for b in bufs]
    if len(arrays) > lim.max_bufs:
        raise ProtocolError(f"{len(arrays)} buffers exceed the limit of {lim.max_bufs}")
    meta = dict(meta)
    meta["bufs"] = [[_NAME[a.dtype], list(a.shape)] for a in arrays]
    mbytes = json.dumps(meta, separators=(",", ":")).encode()
    if len(mbytes) > lim.max_meta:
        raise ProtocolError(f"metadata of {len(mbytes)} bytes exceeds {lim.max_meta}")
    head = HEADER.pack(MAGIC, VERSION, int(mtype), flags, req_id, len(mbytes), len(arrays), 0)
    lens = struct.pack(f"<{len(arrays)}Q", *(a.nbytes for a in arrays))
    chunks: list[Chunk] = [head + lens + mbytes]
    for a in arrays:
        if isinstance(a, Gathered):
            chunks.append(a)
        elif a.nbytes:
            chunks.append(a.data.cast("B"))
    return chunks


def encode_bytes(
    mtype: MsgType, req_id: int, meta: dict[str, Any], bufs: Sequence[np.ndarray] = ()
) -> bytes:
    """The whole frame as one bytes object (tests and tiny messages)."""
    out = []
    for c in encode(mtype, req_id, meta, bufs):
        if isinstance(c, Gathered):
            out += [bytes(m) for blk in c.blocks() for m in blk]
        else:
            out.append(bytes(c))
    return b"".join(out)


def _send_batch(
    sock: socket.socket, chunks: list[memoryview | bytes], deadline: float | None = None
) -> None:
    """Send byte chunks with ``sendmsg`` (up to 1024 per call), resuming after partial sends;
    past ``deadline`` (monotonic) raises TimeoutError."""
    i, n = 0, len(chunks)
    pending: list[memoryview | bytes] = []
    while i < n or pending:
        batch = pending + chunks[i : i + 1024 - len(pending)]
        i += len(batch) - len(pending)
        if deadline is not None:
            _bound_timeout(sock, deadline)
        sent = sock.sendmsg(batch)
        pending = []
        for j, c in enumerate(batch):
            size = len(c) if isinstance(c, bytes) else c.nbytes
            if sent >= size:
                sent -= size
                continue
            pending = [memoryview(c)[sent:], *batch[j + 1 :]]
            break


def _bound_timeout(sock: socket.socket, deadline: float) -> None:
    """Shorten the socket's per-call timeout to what is left before ``deadline``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the answer was not taken within its time")
    cur = sock.gettimeout()
    if cur is None or cur > left:
        sock.settimeout(left)


def send_frame(sock: socket.socket, chunks: Sequence[Chunk], deadline: float | None = None) -> None:
    """Send an encoded frame; :class:`Gathered` wide rows go out as native iovecs
    (:mod:`distgnn.rpc.rowsend`), narrow rows block by block (per-iovec kernel cost
    makes iovecs slower than a gather below ``ZERO_COPY_ROW`` bytes: 1.2 vs 1.7 GB/s
    for 512-byte rows, measured); the frame's head goes out in the first block's
    ``sendmsg`` (no separate small send, one wake-up of the reader fewer). Each blocking
    call waits at most the socket's timeout;
    with ``deadline`` (monotonic) the whole frame must be sent by then (a slow reader
    cannot hold the sender forever)."""
    batch: list[memoryview | bytes] = []
    for c in chunks:
        if isinstance(c, Gathered):
            if c.row_bytes >= ZERO_COPY_ROW and rowsend.available(c.table):
                if batch:
                    _send_batch(sock, batch, deadline)
                    batch = []
                rowsend.send_rows(sock, c.table, c.rows, deadline)
                continue
            for blk in c.blocks():  # what precedes (the frame's head) goes with the first
                _send_batch(sock, [*batch, *blk], deadline)
                batch = []
        else:
            batch.append(c)
    if batch:
        _send_batch(sock, batch, deadline)


RCVLOWAT_MIN = 64 << 10
"""Buffers of at least this many bytes are received with ``SO_RCVLOWAT`` raised."""
RCVLOWAT_MAX = 1 << 20
"""The most bytes one wait for data asks the kernel to gather first."""
RCVLOWAT_WAIT = 0.5
"""Seconds one such wait may last before the buffer's rest is received without it."""
_LOWAT = getattr(socket, "SO_RCVLOWAT", None)


def _set_lowat(sock: socket.socket, n: int) -> None:
    assert _LOWAT is not None
    sock.setsockopt(socket.SOL_SOCKET, _LOWAT, n)


def recv_exact(sock: socket.socket, view: memoryview, peer: str, deadline: float | None) -> None:
    """Fill ``view`` from the socket; EOF -> ServerUnavailable, timeout -> RequestTimeout.

    A large buffer (``RCVLOWAT_MIN``, with a ``deadline``) is received with the socket's
    ``SO_RCVLOWAT`` at up to ``RCVLOWAT_MAX`` bytes, never more than the buffer's rest:
    the kernel wakes the receiver once that much has arrived instead of for every few
    segments, so a step's 54 MB answer takes ~70 receive calls instead of ~350 (the
    trainer's receive CPU over loopback 28 -> 23 ms a step, measured). A wait that
    lasts ``RCVLOWAT_WAIT`` (a sender slower than that) turns it off for the rest of
    the buffer; the deadline holds either way, and the socket is left at 1 byte."""
    pos, n = 0, len(view)
    lowat = 1
    batched = _LOWAT is not None and deadline is not None and n >= RCVLOWAT_MIN
    try:
        while pos < n:
            wait = None
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    raise RequestTimeout(f"{peer}: no complete answer within the timeout")
                if batched:
                    want = min(n - pos, RCVLOWAT_MAX)
                    if want != lowat:
                        _set_lowat(sock, want)
                        lowat = want
                    wait = min(wait, RCVLOWAT_WAIT)
                sock.settimeout(wait)
            try:
                got = sock.recv_into(view[pos:], min(n - pos, 1 << 26))
            except TimeoutError as e:
                if batched and deadline is not None and deadline - time.monotonic() > 0:
                    batched = False  # the sender is slow: take what comes
                    with contextlib.suppress(OSError):
                        _set_lowat(sock, 1)
                    lowat = 1
                    continue
                raise RequestTimeout(f"{peer}: no complete answer within the timeout") from e
            except OSError as e:
                raise ServerUnavailable(f"{peer}: connection failed ({e})") from e
            if got == 0:
                if pos == 0 and view.nbytes == HEADER.size:
                    raise ServerUnavailable(f"{peer}: connection closed")
                raise ServerUnavailable(f"{peer}: connection closed in the middle of a frame")
            pos += got
    finally:
        if lowat != 1:
            with contextlib.suppress(OSError):
                _set_lowat(sock, 1)


def parse_header(
    data: bytes | bytearray | memoryview, limits: Limits
) -> tuple[int, int, int, int, int]:
    """Validate a header; returns (type, flags, req_id, meta_len, nbufs)."""
    magic, ver, mtype, flags, req_id, mlen, nbufs, _ = HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r} (not a DistGNN frame)")
    if ver != VERSION:
        raise ProtocolError(f"protocol version {ver} is not supported (this side speaks {VERSION})")
    if mtype not in MsgType._value2member_map_:
        raise ProtocolError(f"unknown message type {mtype}")
    if mlen > limits.max_meta:
        raise ProtocolError(f"metadata length {mlen} exceeds the limit of {limits.max_meta}")
    if nbufs > limits.max_bufs:
        raise ProtocolError(f"{nbufs} buffers exceed the limit of {limits.max_bufs}")
    return mtype, flags, req_id, mlen, nbufs


def _parse_meta(raw: bytes, lens: Sequence[int]) -> tuple[dict[str, Any], list[Any]]:
    try:
        meta = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"metadata is not valid JSON ({str(e)[:200]})") from None
    except RecursionError:
        raise ProtocolError("metadata JSON is nested too deeply") from None
    if not isinstance(meta, dict):
        raise ProtocolError("metadata must be a JSON object")
    descs = meta.pop("bufs", [])
    if not isinstance(descs, list) or len(descs) != len(lens):
        raise ProtocolError("metadata 'bufs' does not describe every buffer")
    out = []
    for i, (d, n) in enumerate(zip(descs, lens, strict=True)):
        if (
            not isinstance(d, list)
            or len(d) != 2
            or not isinstance(d[0], str)
            or d[0] not in DTYPES
            or not isinstance(d[1], list)
            or len(d[1]) > MAX_NDIM
            or not all(type(s) is int and 0 <= s <= MAX_DIM for s in d[1])
        ):
            raise ProtocolError(
                f"buffer {i}: bad descriptor {str(d)[:80]} (allowed: [dtype, shape] with a "
                f"dtype of {sorted(DTYPES)} and at most {MAX_NDIM} sizes <= 2**40)"
            )
        dt = _DTYPE[d[0]]
        shape = tuple(d[1])
        if math.prod(shape) * dt.itemsize != n:
            raise ProtocolError(f"buffer {i}: {n} bytes do not match {d[0]}{list(shape)}")
        out.append((dt, shape))
    return meta, out


def recv_frame(
    sock: socket.socket,
    peer: str,
    limits: Limits | None = None,
    deadline: float | None = None,
    into: Into | None = None,
) -> Frame:
    """Read one frame, checking every limit before allocating; see :data:`Into`."""
    lim = limits or Limits()
    head = bytearray(HEADER.size)
    recv_exact(sock, memoryview(head), peer, deadline)
    mtype, flags, req_id, mlen, nbufs = parse_header(head, lim)
    rest = bytearray(8 * nbufs + mlen)
    recv_exact(sock, memoryview(rest), peer, deadline)
    lens = struct.unpack(f"<{nbufs}Q", rest[: 8 * nbufs])
    if any(n > lim.max_buf_bytes for n in lens) or sum(lens) > lim.max_total_bytes:
        raise ProtocolError(
            f"buffers of {sum(lens)} bytes exceed the size limits (at most "
            f"{lim.max_total_bytes} bytes per frame)"
        )
    meta, descs = _parse_meta(bytes(rest[8 * nbufs :]), lens)
    bufs = []
    for i, (dt, shape) in enumerate(descs):
        arr = into(i, dt, shape) if into is not None else None
        if isinstance(arr, Segments):
            if arr.fits(dt, shape):
                for seg in arr.arrays:
                    if seg.nbytes:
                        recv_exact(sock, seg.data.cast("B"), peer, deadline)
                arr.received = True
                bufs.append(np.empty((0, *shape[1:]), dtype=dt))
                continue
            arr = None
        if arr is None or arr.dtype != dt or arr.shape != shape or not arr.flags.c_contiguous:
            arr = np.empty(shape, dtype=dt)
        if arr.nbytes:
            recv_exact(sock, arr.data.cast("B"), peer, deadline)
        bufs.append(arr)
    return Frame(MsgType(mtype), req_id, meta, bufs, flags)


def decode_bytes(data: bytes, limits: Limits | None = None) -> Frame:
    """Decode a complete frame held in memory (tests); truncation raises ProtocolError."""
    lim = limits or Limits()
    if len(data) < HEADER.size:
        raise ProtocolError("truncated frame header")
    mtype, flags, req_id, mlen, nbufs = parse_header(data[: HEADER.size], lim)
    pos = HEADER.size
    if len(data) < pos + 8 * nbufs + mlen:
        raise ProtocolError("truncated frame metadata")
    lens = struct.unpack_from(f"<{nbufs}Q", data, pos)
    pos += 8 * nbufs
    if any(n > lim.max_buf_bytes for n in lens) or sum(lens) > lim.max_total_bytes:
        raise ProtocolError(f"buffers of {sum(lens)} bytes exceed the size limits")
    meta, descs = _parse_meta(data[pos : pos + mlen], lens)
    pos += mlen
    bufs = []
    for (dt, shape), n in zip(descs, lens, strict=True):
        if len(data) < pos + n:
            raise ProtocolError("truncated frame buffers")
        bufs.append(
            np.frombuffer(data, dtype=dt, count=n // dt.itemsize, offset=pos).reshape(shape)
        )
        pos += n
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} trailing bytes after the frame")
    return Frame(MsgType(mtype), req_id, meta, bufs, flags)


def error_meta(code: str, message: str) -> dict[str, Any]:
    """Metadata of an ERROR frame."""
    return {"code": code, "message": message[:2000]}
