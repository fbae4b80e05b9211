"""Pickle-free encoding of ``name -> numpy array`` dicts for sampler processes.

Layout: 8-byte little-endian header length, a JSON header ``{name: [dtype,
shape, offset, nbytes]}``, then the raw array buffers.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from distgnn.errors import ProtocolError

_LEN = struct.Struct("<Q")


def encode(arrays: dict[str, np.ndarray]) -> bytes:
    header: dict[str, list[object]] = {}
    bufs: list[bytes] = []
    off = 0
    for name, arr in arrays.items():
        shape = list(np.shape(arr))
        a = np.ascontiguousarray(arr)
        if a.dtype.hasobject:
            raise ProtocolError(f"{name}: object arrays cannot be sent")
        b = a.tobytes()
        header[name] = [a.dtype.str, shape, off, len(b)]
        bufs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    return _LEN.pack(len(h)) + h + b"".join(bufs)


def decode(data: bytes) -> dict[str, np.ndarray]:
    if len(data) < _LEN.size:
        raise ProtocolError("sampler message: truncated header")
    (hlen,) = _LEN.unpack_from(data)
    try:
        header = json.loads(data[_LEN.size : _LEN.size + hlen])
    except ValueError as e:
        raise ProtocolError(f"sampler message: bad header ({e})") from e
    base = _LEN.size + hlen
    out: dict[str, np.ndarray] = {}
    mv = memoryview(data)
    for name, (dt, shape, off, nbytes) in header.items():
        dtype = np.dtype(dt)
        if dtype.hasobject or base + off + nbytes > len(data):
            raise ProtocolError(f"sampler message: bad array {name!r}")
        arr = np.frombuffer(mv[base + off : base + off + nbytes], dtype=dtype)
        out[name] = arr.reshape(tuple(shape)).copy()
    return out
