"""Send ``table[rows]`` with ``sendmsg`` iovecs built in NumPy: one kernel copy, no gather.

A feature pull answers with rows scattered over a table in shared memory. Python-level
``sendmsg`` needs one ``memoryview`` per row (about 1 microsecond each), and a NumPy
gather into a send buffer costs a full extra copy. For wide rows (KiBs) the kernel's
per-iovec cost is small, so the ``struct iovec`` array
(address, length) is computed for all rows at once with NumPy and handed to libc's
``sendmsg`` through ``ctypes``, up to ``IOV_MAX`` rows per call, so the kernel copies
each row straight from the table into the socket, as it does for a plain buffer. The
call releases the GIL. Partial sends resume mid-row; a full socket buffer waits with
``poll`` for the socket's own timeout. Linux/glibc only: :func:`available` is False
elsewhere and callers use the gather path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import select
import socket
import sys
import time
from typing import Any

import numpy as np

IOV_MAX = 1024
_MSG_NOSIGNAL = 0x4000


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.c_void_p),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


def _load() -> Any:
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    if os.environ.get("DISTGNN_NO_NATIVE_SEND"):
        return None
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name, use_errno=True).sendmsg
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(_MsgHdr), ctypes.c_int]
    fn.restype = ctypes.c_ssize_t
    return fn


_SENDMSG = _load()


def available(table: np.ndarray) -> bool:
    """Whether :func:`send_rows` can send rows of ``table`` (C-contiguous, Linux)."""
    return _SENDMSG is not None and table.flags.c_contiguous and table.ndim >= 1


IOV_BLOCK = 1 << 16
"""Rows whose iovecs are built at once: 1 MiB of iovecs whatever the request's size."""


def send_rows(
    sock: socket.socket, table: np.ndarray, rows: np.ndarray, deadline: float | None = None
) -> None:
    """Send ``table[rows]`` (C order) on ``sock``; raises like ``socket.sendall``.

    The iovec array is built ``IOV_BLOCK`` rows at a time, so sending holds no memory
    per requested row beyond the request itself. Each wait for buffer space lasts at most
    the socket's timeout, and never past ``deadline`` (monotonic) when given."""
    assert _SENDMSG is not None
    rb = table.itemsize * math.prod(table.shape[1:])
    n = int(rows.shape[0])
    if rb == 0 or n == 0:
        return
    iov = np.empty((min(n, IOV_BLOCK), 2), dtype=np.uint64)
    fd = sock.fileno()
    timeout = sock.gettimeout()
    msg = _MsgHdr()
    for b0 in range(0, n, IOV_BLOCK):
        blk = rows[b0 : b0 + IOV_BLOCK]
        m = len(blk)
        np.multiply(blk, rb, out=iov[:m, 0], casting="unsafe")
        iov[:m, 0] += np.uint64(table.ctypes.data)
        iov[:m, 1] = rb
        _send_iov(fd, msg, iov, m, rb, sock, timeout, deadline)


def _send_iov(
    fd: int, msg: _MsgHdr, iov: np.ndarray, n: int, rb: int, sock: socket.socket,
    timeout: float | None, deadline: float | None,
) -> None:  # fmt: skip
    i = 0
    while i < n:
        cnt = min(IOV_MAX, n - i)
        msg.msg_iov = iov[i:].ctypes.data
        msg.msg_iovlen = cnt
        sent = _SENDMSG(fd, ctypes.byref(msg), _MSG_NOSIGNAL)
        if sent < 0:
            err = ctypes.get_errno()
            if err == errno.EINTR:
                continue
            if err in (errno.EAGAIN, errno.EWOULDBLOCK):
                wait = timeout
                if deadline is not None:
                    left = deadline - time.monotonic()
                    wait = left if wait is None else min(wait, left)
                    if left <= 0:
                        raise TimeoutError("the answer was not taken within its time")
                _wait_writable(sock, wait)
                continue
            raise OSError(err, os.strerror(err))
        first = int(iov[i, 1])
        if sent < first:  # still inside the first (possibly partly sent) row
            iov[i, 0] += np.uint64(sent)
            iov[i, 1] -= np.uint64(sent)
            continue
        sent -= first
        i += 1 + sent // rb
        rest = sent % rb
        if rest:
            iov[i, 0] += np.uint64(rest)
            iov[i, 1] -= np.uint64(rest)


def _wait_writable(sock: socket.socket, timeout: float | None) -> None:
    p = select.poll()
    p.register(sock.fileno(), select.POLLOUT)
    ms = None if timeout is None else max(0, int(timeout * 1000))
    if not p.poll(ms):
        raise TimeoutError("timed out sending a reply")
