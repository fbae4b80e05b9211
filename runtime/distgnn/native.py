"""The optional native kernels (``distgnn._native``, C) or their NumPy reference.

A training step's non-compute CPU (issue 17): the servers' and the co-located trainer's
uniform neighbour sampling, ``to_block``'s relabelling and the mean aggregation's block
CSRs have C kernels, built by ``setup.py`` when a compiler is there (``optional``: an
install without one still works). :func:`kernels` returns the extension module, or None
when it is not built or ``DISTGNN_NATIVE=0`` (checked once per process); the callers
then run their NumPy code, which stays the reference the kernels are tested against.
Which path is used is logged once.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

import numpy as np

from distgnn import contract
from distgnn.errors import ConfigError
from distgnn.log import kv

log = logging.getLogger("distgnn.native")

ON, OFF = ("", "1", "on", "true", "yes", "auto"), ("0", "off", "false", "no")


def wanted(raw: str | None) -> bool:
    """``DISTGNN_NATIVE`` (default on): ConfigError for a value not on or off."""
    v = (raw or "").strip().lower()
    if v in ON:
        return True
    if v in OFF:
        return False
    raise ConfigError(f"{contract.ENV_NATIVE}={v[:40]!r}: expected 1/on/true or 0/off/false")


@functools.cache
def kernels() -> ModuleType | None:
    """The C kernels, or None: the NumPy path (not built, or turned off)."""
    if not wanted(os.environ.get(contract.ENV_NATIVE)):
        log.info("native kernels off: NumPy path", extra=kv(why=f"{contract.ENV_NATIVE}=0"))
        return None
    try:
        from distgnn import _native
    except ImportError as e:
        log.info("native kernels not built: NumPy path", extra=kv(why=str(e)[:200]))
        return None
    log.info("native kernels on", extra=kv(module=_native.__file__))
    mod: ModuleType = _native
    return mod


def available() -> bool:
    """Whether the C kernels are used in this process."""
    return kernels() is not None


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _arr(b: bytearray, dtype: type) -> np.ndarray:
    return np.frombuffer(b, dtype=dtype)


def sample_uniform_runs(
    k: ModuleType,
    indptr: np.ndarray,
    seeds: np.ndarray,
    fanout: int,
    replace: bool,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`distgnn.server.sampling.sample_uniform_runs` by kernel ``k``: the same
    semantics (runs in seed order, each run's positions ascending without replacement);
    the C generator is seeded by one draw of ``rng``, so a seeded request is reproducible."""
    if fanout == 0 or len(seeds) == 0:
        e = np.empty(0, np.int64)
        return e, e, e
    seed = int(rng.integers(0, 2**63)) if fanout > 0 else 0
    pos, run_seed, run_len = k.sample_uniform(_i64(indptr), _i64(seeds), fanout, replace, seed)
    return _arr(pos, np.int64), _arr(run_seed, np.int64), _arr(run_len, np.int64)


def sample_uniform_src(
    k: ModuleType,
    indptr: np.ndarray,
    src: np.ndarray,
    seeds: np.ndarray,
    fanout: int,
    replace: bool,
    rng: np.random.Generator,
    max_edges: int,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | int:
    """:func:`sample_uniform_runs` (the same draw for the same ``rng``) and ``src[pos]``,
    gathered by the kernel in the same pass: ``(pos, run_seed, run_len, src[pos])``; or,
    when the sample would have more than ``max_edges`` edges, that number (nothing
    drawn). ``pos`` is the caller's to modify. ``out``: two writable int64 arrays the
    kernel writes ``pos`` and ``src[pos]`` into (the returned arrays are then their first
    edges) when they are long enough and the kernel can (a build before it cannot:
    fresh arrays then, the same values)."""
    if fanout == 0 or len(seeds) == 0:
        e = np.empty(0, np.int64)
        return e, e, e, e
    seed = int(rng.integers(0, 2**63)) if fanout > 0 else 0
    args = (_i64(indptr), _i64(seeds), fanout, replace, seed, _i64(src), max_edges)
    if out is not None and getattr(k, "SAMPLE_INTO", False) and _writable_i64(*out):
        got = k.sample_uniform(*args, *out)
        if isinstance(got, tuple) and len(got) == 5:
            opos, run_seed, run_len, opicked, n = got
            return (
                opos[:n], _arr(run_seed, np.int64), _arr(run_len, np.int64), opicked[:n]
            )  # fmt: skip
    else:
        got = k.sample_uniform(*args)
    if isinstance(got, int):
        return got
    pos, run_seed, run_len, picked = got
    return (
        _arr(pos, np.int64), _arr(run_seed, np.int64), _arr(run_len, np.int64),
        _arr(picked, np.int64),
    )  # fmt: skip


def _writable_i64(*arrays: np.ndarray) -> bool:
    return all(
        isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1
        and a.flags.c_contiguous and a.flags.writeable
        for a in arrays
    )  # fmt: skip


def mean_csr(
    k: ModuleType,
    keys: np.ndarray,
    other: np.ndarray,
    nkeys: int,
    nother: int,
    inv: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """A CSR with a row per key (``keys[e]`` -> column ``other[e]``, entries in edge
    order) by kernel ``k``: ``(crow, col, val, inv_deg)``. Values: ``inv[other[e]]``, or
    with ``inv`` None the row's ``1 / max(degree, 1)`` (float32; also returned). Indices
    int32 when the matrix allows (as :func:`distgnn.nn.ops.csr_tensor`)."""
    wide = max(nother, len(keys)) >= 2**31 - 1
    itype = np.int64 if wide else np.int32
    f32 = None if inv is None else np.ascontiguousarray(inv, dtype=np.float32)
    crow, col, val, inv_deg = k.mean_csr(_i64(keys), _i64(other), nkeys, nother, f32, wide)
    return (
        _arr(crow, itype),
        _arr(col, itype),
        _arr(val, np.float32),
        None if inv_deg is None else _arr(inv_deg, np.float32),
    )


def relabel(
    k: ModuleType, dst_nid: np.ndarray, src: np.ndarray, dst: np.ndarray | None, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``to_block``'s dense relabelling by kernel ``k`` (IDs in ``[0, n)``): ``(src_nid,
    edge_src, edge_dst)``, ``edge_dst`` None when ``dst`` is. ValueError for duplicate
    destinations or a destination that is not among them."""
    src_nid, edge_src, edge_dst = k.relabel(
        _i64(dst_nid), _i64(src), None if dst is None else _i64(dst), n
    )
    return (
        _arr(src_nid, np.int64),
        _arr(edge_src, np.int64),
        None if edge_dst is None else _arr(edge_dst, np.int64),
    )
