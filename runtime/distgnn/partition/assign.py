"""Node -> partition assignment: METIS (pymetis) or seeded random."""

from __future__ import annotations

import ctypes
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from distgnn.errors import GraphFormatError
from distgnn.graph.data import drop_repeats, release_pages
from distgnn.log import step

log = logging.getLogger("distgnn.partition")


def symmetric_csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected, self-loop-free, de-duplicated adjacency (xadj, adjncy) as int64 for METIS.

    One sort of packed ``u * n + v`` keys (both directions) does the symmetrising,
    de-duplication and row grouping; the key buffer is then reused for the columns.
    int64 is pymetis' zero-copy index type (``pymetis.zero_copy_dtype()``), so METIS
    gets these buffers without a conversion copy.
    """
    e = int(src.shape[0])
    keep = np.not_equal(src, dst)
    if not keep.all():  # self-loops: drop them (one filtered copy only when present)
        src, dst = src[keep], dst[keep]
        e = int(src.shape[0])
    del keep
    keys = np.empty(2 * e, dtype=np.int64)
    np.multiply(src, n, out=keys[:e])
    np.add(keys[:e], dst, out=keys[:e])
    np.multiply(dst, n, out=keys[e:])
    np.add(keys[e:], src, out=keys[e:])
    keys = drop_repeats(_parallel_sort(keys, (n // 2) * n))
    # keys are sorted: row starts by binary search, then reuse the buffer for columns
    xadj = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64)
    np.remainder(keys, n, out=keys)
    return xadj, keys


def _parallel_sort(keys: np.ndarray, pivot: int) -> np.ndarray:
    """Sort ``keys`` by splitting at ``pivot`` and sorting both sides in two threads.

    NumPy's sort releases the GIL; the split is one pass, so two cores nearly halve
    the time of the largest step before METIS.
    """
    if keys.shape[0] < 1 << 20 or (os.cpu_count() or 1) < 2:
        keys.sort()  # value sort (SIMD quicksort), much faster than an argsort
        return keys
    low = keys < pivot
    c = int(np.count_nonzero(low))
    out = np.empty_like(keys)
    np.compress(low, keys, out=out[:c])
    np.logical_not(low, out=low)
    np.compress(low, keys, out=out[c:])
    del keys, low
    with ThreadPoolExecutor(2, thread_name_prefix="sort") as pool:
        list(pool.map(np.ndarray.sort, (out[:c], out[c:])))
    return out


def metis_assign(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    num_parts: int,
    *,
    vweights: np.ndarray | None = None,
    seed: int = 0,
) -> np.ndarray:
    """METIS k-way partition of the symmetrised graph with optional vertex weights.

    pymetis 2025.2 passes a single balance constraint to METIS (``ncon`` = 1), so
    several balance goals are folded into ``vweights`` and refined by :func:`rebalance`.
    """

    if num_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    with step("symmetrise", log, nodes=n, edges=int(src.shape[0])):
        xadj, adjncy = symmetric_csr(src, dst, n)
    # METIS is the memory peak: don't keep the input's mapped pages resident through it
    release_pages(src, dst)
    vw = None if vweights is None else np.ascontiguousarray(vweights, dtype=np.int64)
    with step("metis", log, parts=num_parts, weighted=vw is not None):
        parts = _kway(xadj, adjncy, num_parts, vw, seed)
    del xadj, adjncy
    return parts


_METIS_OK = 1
_METIS_ERROR_MEMORY = -3
_METIS_NOPTIONS = 40  # metis.h (5.1): size of the options array
_METIS_OPTION_SEED = 8  # metis.h (5.1): index of METIS_OPTION_SEED


def _kway(
    xadj: np.ndarray, adjncy: np.ndarray, k: int, vw: np.ndarray | None, seed: int
) -> np.ndarray:
    """``METIS_PartGraphKway`` from pymetis' own library, called through ctypes.

    A ctypes foreign call releases the GIL, so other threads (the input fingerprint,
    the edge sort for relabelling) run on the other cores while METIS works;
    ``pymetis.part_graph`` holds the GIL for the whole call. Same library, same
    inputs, same result; falls back to ``pymetis.part_graph`` if the symbols or the
    64-bit index width are not there.
    """
    import pymetis
    from pymetis import _internal

    try:
        if _internal._idx_type_width() != 64:
            raise OSError("METIS is not built with 64-bit indices")
        lib = ctypes.CDLL(_internal.__file__)
        set_defaults, kway = lib.METIS_SetDefaultOptions, lib.METIS_PartGraphKway
    except (OSError, AttributeError):
        res = pymetis.part_graph(
            k,
            pymetis.CSRAdjacency(xadj, adjncy),
            vweights=vw,
            options=pymetis.Options(seed=seed),
            recursive=False,
        )
        return np.asarray(res.vertex_part, dtype=np.int64)
    i64 = ctypes.c_int64
    options = (i64 * _METIS_NOPTIONS)()
    set_defaults(options)
    options[_METIS_OPTION_SEED] = seed
    n = xadj.shape[0] - 1
    nvtxs, ncon, nparts, edgecut = i64(n), i64(1), i64(k), i64(0)
    part = np.zeros(n, dtype=np.int64)

    def ptr(a: np.ndarray | None) -> ctypes.c_void_p | None:
        return None if a is None else ctypes.c_void_p(a.ctypes.data)

    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    adjncy = np.ascontiguousarray(adjncy, dtype=np.int64)
    kway.restype = ctypes.c_int
    status = kway(
        ctypes.byref(nvtxs),
        ctypes.byref(ncon),
        ptr(xadj),
        ptr(adjncy),
        ptr(vw),
        None,
        None,
        ctypes.byref(nparts),
        None,
        None,
        options,
        ctypes.byref(edgecut),
        ptr(part),
    )
    if status == _METIS_ERROR_MEMORY:
        raise MemoryError("METIS ran out of memory partitioning the graph")
    if status != _METIS_OK:
        raise GraphFormatError(f"METIS_PartGraphKway rejected the graph (status {status})")
    return part


def rebalance(
    parts: np.ndarray,
    mask: np.ndarray,
    num_parts: int,
    src: np.ndarray,
    dst: np.ndarray,
    slack: float = 1.02,
) -> np.ndarray:
    """Move masked nodes out of partitions holding more than ``slack`` x their fair share.

    Nodes with the fewest neighbours inside their partition move first, into the
    partitions with the largest deficit. Vectorised; loops only over partitions.
    """
    mask = np.asarray(mask).astype(bool)
    counts = np.bincount(parts[mask], minlength=num_parts)
    cap = int(np.ceil(mask.sum() / num_parts * slack))
    if counts.max(initial=0) <= cap:
        return parts
    parts = parts.copy()
    same = parts[src] == parts[dst]
    inner = np.bincount(src[same], minlength=parts.shape[0]) + np.bincount(
        dst[same], minlength=parts.shape[0]
    )
    fair = int(np.ceil(mask.sum() / num_parts))
    movers: list[np.ndarray] = []
    for p in np.flatnonzero(counts > cap):
        cand = np.flatnonzero(mask & (parts == p))
        movers.append(cand[np.argsort(inner[cand], kind="stable")][: counts[p] - fair])
    moving = np.concatenate(movers)
    deficit = np.maximum(fair - counts, 0)
    deficit[counts > cap] = 0
    targets = np.repeat(np.arange(num_parts), deficit)
    if targets.shape[0] < moving.shape[0]:
        extra = np.arange(moving.shape[0] - targets.shape[0]) % num_parts
        targets = np.concatenate([targets, np.argsort(counts)[extra]])
    parts[moving] = targets[: moving.shape[0]]
    return parts


def random_assign(
    n: int, num_parts: int, *, seed: int = 0, groups: np.ndarray | None = None
) -> np.ndarray:
    """Seeded balanced random assignment; ``groups`` (bool) are balanced separately."""
    rng = np.random.default_rng(seed)
    parts = np.empty(n, dtype=np.int64)
    if groups is None:
        parts[rng.permutation(n)] = np.arange(n) % num_parts
        return parts
    g = np.asarray(groups).astype(bool)
    for sel in (np.flatnonzero(g), np.flatnonzero(~g)):
        start = int(rng.integers(num_parts))
        parts[sel[rng.permutation(sel.shape[0])]] = (np.arange(sel.shape[0]) + start) % num_parts
    return parts
