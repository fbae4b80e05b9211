"""Placing a cached read's rows in the caller's order (:mod:`distgnn.distributed.featcache`).

A cached read of a step's ~270k feature rows finds ~60 % of them in the cache (rows of
a table, in random order) and pulls the others from the servers. ``codes[i]`` says where
row ``i`` of the output comes from: its cache slot (``>= 0``), or (``< 0``) the next of
the pulled rows, which arrive packed in the caller's order.

With the native kernels (:mod:`distgnn.native`, ``place_rows``) one pass writes the
output in order, each position from its cache slot or the next pulled row, and the
pulled rows may have been received into the output's own first rows (the pass goes
from the end, so a pulled row always moves to a position at or after its own): no
scratch buffer, and the bytes written once, by non-temporal stores for a large output.
Without them (``DISTGNN_NATIVE=0``, an extension built before the kernel) torch's
``index_copy_`` moves the pulled rows from a scratch buffer and the cached rows
gathered into another; the rows are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from distgnn import native
from distgnn.rpc.gather import STREAM_MIN_BYTES

Scratch = Callable[[str, int], np.ndarray]
"""``scratch(which, n)``: ``n`` rows of a buffer kept between reads."""


def kernel_for(out: np.ndarray, rows: np.ndarray) -> Callable[..., None] | None:
    """The native ``place_rows`` when it applies to ``out`` and ``rows`` (one dtype and
    row shape, C-contiguous), else None (also for an extension built before it)."""
    k = native.kernels()
    fn: Callable[..., None] | None = getattr(k, "place_rows", None)
    if (
        fn is None
        or out.dtype != rows.dtype
        or out.dtype.hasobject
        or out.shape[1:] != rows.shape[1:]
        or not out.flags.c_contiguous
        or not rows.flags.c_contiguous
    ):
        return None
    return fn


def place_rows(
    out: np.ndarray,
    codes: np.ndarray,
    rows: np.ndarray,
    pulled: np.ndarray | None,
    scratch: Scratch | None = None,
) -> None:
    """``out[i] = rows[codes[i]]`` where ``codes[i] >= 0`` (int32 codes); the positions
    with ``codes[i] < 0`` take the rows of ``pulled`` in order, or, with ``pulled``
    None, keep what they hold. ``pulled`` may be ``out``'s own first rows (``out[:m]``)
    when :func:`kernel_for` gives a kernel; otherwise it must not overlap ``out``.
    ``scratch`` keeps the fallback's buffers between reads."""
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    fn = kernel_for(out, rows)
    if fn is not None and (pulled is None or pulled.flags.c_contiguous):
        fn(out, codes, rows, pulled, out.nbytes >= STREAM_MIN_BYTES)
        return
    place_rows_torch(out, codes, rows, pulled, scratch)


def place_rows_torch(
    out: np.ndarray,
    codes: np.ndarray,
    rows: np.ndarray,
    pulled: np.ndarray | None,
    scratch: Scratch | None = None,
) -> None:
    """:func:`place_rows` by torch's row copies (the reference the kernel is tested
    against): the pulled rows moved to their positions, the cached ones gathered into a
    buffer and moved to theirs."""
    n, w = len(out), int(np.prod(out.shape[1:], dtype=np.int64))
    dest = torch.from_numpy(out.reshape(n, w))
    hit = codes >= 0
    if pulled is not None:
        miss = np.flatnonzero(~hit)
        if len(miss) != len(pulled):
            raise ValueError(f"pulled: {len(pulled)} rows for {len(miss)} positions")
        if np.shares_memory(pulled, out):  # received into out's first rows
            pulled = pulled.copy()
        dest.index_copy_(0, torch.from_numpy(miss), torch.from_numpy(pulled.reshape(len(miss), w)))
    pos = np.flatnonzero(hit)
    if not len(pos):
        return
    slots = torch.from_numpy(codes[pos].astype(np.int64))
    buf = (
        scratch("hit", len(pos))
        if scratch is not None
        else np.empty((len(pos), *rows.shape[1:]), rows.dtype)
    )
    got = torch.from_numpy(buf.reshape(len(pos), w))
    torch.index_select(torch.from_numpy(rows.reshape(len(rows), w)), 0, slots, out=got)
    dest.index_copy_(0, torch.from_numpy(pos), got)
