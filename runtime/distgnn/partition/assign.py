"""Node -> partition assignment: METIS (a 32-bit system build or pymetis') or seeded random."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distgnn.errors import GraphFormatError
from distgnn.graph.data import drop_repeats, release_pages
from distgnn.log import step
from distgnn.partition.bisect import Split, bisect_then_halves
from distgnn.partition.metislib import ENV, NOPTIONS, MetisLib, find_metis
from distgnn.partition.sparsify import sample_edges

log = logging.getLogger("distgnn.partition")


def symmetric_csr(
    src: np.ndarray, dst: np.ndarray, n: int, dtype: type[np.signedinteger] = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """Undirected, self-loop-free, de-duplicated adjacency (xadj, adjncy) for METIS."""
    xadj, adjncy, _ = weighted_symmetric_csr(src, dst, n, dtype, counts=False)
    return xadj, adjncy


def weighted_symmetric_csr(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    dtype: type[np.signedinteger] = np.int64,
    counts: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(xadj, adjncy, adjwgt): the undirected, self-loop-free, de-duplicated adjacency,
    each entry weighted by how many input edges join the pair (either direction).

    With these weights METIS minimises the number of cut *input* edges (a pair linked
    both ways counts twice), the edge cut the manifest reports. They cost no memory at
    the peak: METIS allocates unit weights itself when given none.

    One sort of packed ``u * n + v`` keys (both directions) does the symmetrising,
    de-duplication and row grouping. ``dtype`` is the METIS library's ``idx_t``: for
    int64 the key buffer is reused for the columns; for int32 the columns are written
    into a new half-size array and the keys are freed.
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
    release_pages(src, dst)  # a memory-mapped input is not needed any more
    del src, dst
    keys.sort()  # a value sort (SIMD quicksort): far faster than an argsort, in place
    weights = _repeat_counts(keys, dtype) if counts else None
    keys = drop_repeats(keys)
    # keys are sorted: row starts by binary search, then the columns
    xadj = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(dtype)
    if np.dtype(dtype) == np.int64:
        np.remainder(keys, n, out=keys)
        return xadj, keys, weights
    adjncy = np.empty(keys.shape[0], dtype=dtype)
    np.remainder(keys, n, out=adjncy, casting="unsafe")  # < n, so it fits
    return xadj, adjncy, weights


def _repeat_counts(sorted_keys: np.ndarray, dtype: type[np.signedinteger]) -> np.ndarray:
    """How often each distinct value of a sorted array occurs, in order (``np.unique``'s
    counts without its int64 index arrays: only the repeats are located)."""
    m = int(sorted_keys.shape[0])
    if m == 0:
        return np.zeros(0, dtype=dtype)
    repeat = np.empty(m, dtype=bool)
    repeat[0] = False
    np.equal(sorted_keys[1:], sorted_keys[:-1], out=repeat[1:])
    pos = np.flatnonzero(repeat)
    del repeat
    weights = np.ones(m - pos.shape[0], dtype=dtype)
    # the i-th repeat (0-based) at position j belongs to distinct value number j - i - 1
    pos -= np.arange(1, pos.shape[0] + 1, dtype=pos.dtype)
    np.add.at(weights, pos, 1)
    return weights


@dataclass(frozen=True)
class MetisRun:
    """A METIS partition and the edge cut METIS reports for its own input."""

    parts: np.ndarray
    cut: int  # input edges METIS was given whose ends it put in different parts
    edges: int  # input edges METIS was given (all, or the sample)


def metis_assign(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    num_parts: int,
    *,
    vweights: np.ndarray | None = None,
    seed: int = 0,
    on_start: Callable[[], object] | None = None,
    keep: float = 1.0,
) -> np.ndarray:
    """:func:`metis_run`'s partition."""
    return metis_run(
        src, dst, n, num_parts, vweights=vweights, seed=seed, on_start=on_start, keep=keep
    ).parts


def metis_run(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    num_parts: int,
    *,
    vweights: np.ndarray | None = None,
    seed: int = 0,
    on_start: Callable[[], object] | None = None,
    keep: float = 1.0,
    recursive: bool = False,
    niter: int | None = None,
    halves: bool = False,
) -> MetisRun:
    """METIS k-way partition of the symmetrised graph with optional vertex weights.

    ``keep`` < 1: METIS gets a seeded random sample of that fraction of the edges
    (:mod:`distgnn.partition.sparsify`; see :mod:`distgnn.partition.sampled`).
    ``recursive``: ``METIS_PartGraphRecursive`` instead of ``METIS_PartGraphKway``.
    ``niter``: METIS's refinement passes per level (``METIS_OPTION_NITER``; default 10).
    ``halves`` (with ``recursive``): the two halves below the top bisection at once
    (:func:`~distgnn.partition.bisect.bisect_then_halves`).

    ``on_start`` is called when METIS itself starts (it runs single-threaded with the GIL
    released, so the caller can start work for another core then).

    One balance constraint (``ncon`` = 1): several balance goals are folded into
    ``vweights`` and refined by :func:`rebalance` (multi-constraint METIS is slower and
    needs more memory). The METIS library is :func:`~distgnn.partition.metislib.find_metis`'s
    (a 32-bit-index build when available: half the memory).
    """

    if num_parts == 1 or n == 0:
        return MetisRun(np.zeros(n, dtype=np.int64), 0, int(src.shape[0]))
    lib = find_metis()
    if lib is not None and not lib.fits(n, 2 * int(src.shape[0]), _total(vweights, n)):
        lib = _pymetis_lib()  # too large for 32-bit indices
    dtype = np.int64 if lib is None else lib.dtype
    if keep < 1.0:
        with step("sample edges", log, keep=round(keep, 4), edges=int(src.shape[0])):
            sampled = sample_edges(src, dst, keep, seed)
        release_pages(src, dst)
        src, dst = sampled
        del sampled
    edges = int(src.shape[0])
    with step("symmetrise", log, nodes=n, edges=int(src.shape[0])):
        xadj, adjncy, adjwgt = weighted_symmetric_csr(src, dst, n, dtype)
    release_pages(src, dst)  # METIS is the memory peak: no mapped input pages through it
    vw = None if vweights is None else np.ascontiguousarray(vweights, dtype=dtype)
    if on_start is not None:
        on_start()
    with step(
        "metis",
        log,
        parts=num_parts,
        weighted=vw is not None,
        idx_bits=64 if lib is None else lib.idx_bits,
        library=lib.path if lib is not None else "pymetis.part_graph",
        routine="recursive" if recursive else "kway",
        niter=niter if niter is not None else 10,  # METIS's default
    ):
        parts, cut = _partition(
            xadj, adjncy, num_parts, vw, seed, lib, adjwgt, recursive, niter, halves
        )
    del xadj, adjncy, adjwgt
    return MetisRun(parts, cut, edges)


def _total(vweights: np.ndarray | None, n: int) -> int:
    return n if vweights is None else int(np.asarray(vweights).sum(dtype=np.int64))


def _pymetis_lib() -> MetisLib | None:
    return find_metis({ENV: "pymetis"})


def _partition(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    k: int,
    vw: np.ndarray | None,
    seed: int,
    lib: MetisLib | None,
    adjwgt: np.ndarray | None,
    recursive: bool,
    niter: int | None = None,
    halves: bool = False,
) -> tuple[np.ndarray, int]:
    """:func:`_kway_cut`; with ``halves``, a recursive bisection into an even number of
    parts (4 or more) bisects the two halves below its top bisection at once
    (:func:`~distgnn.partition.bisect.bisect_then_halves`)."""
    lib = lib if lib is not None else _pymetis_lib()
    if not (recursive and halves) or lib is None or k < 4:
        return _kway_cut(xadj, adjncy, k, vw, seed, lib, adjwgt, recursive, niter)
    return bisect_then_halves(xadj, adjncy, adjwgt, vw, k, lib, recursive_split(seed, niter))


def recursive_split(seed: int, niter: int | None = None) -> Split:
    """``METIS_PartGraphRecursive`` with ``seed`` (and ``niter``) fixed, as
    :func:`~distgnn.partition.bisect.bisect_then_halves` calls it on each instance."""

    def split(
        x: np.ndarray,
        a: np.ndarray,
        w: np.ndarray | None,
        v: np.ndarray | None,
        parts: int,
        instance: MetisLib,
    ) -> tuple[np.ndarray, int]:
        return _kway_cut(x, a, parts, v, seed, instance, w, recursive=True, niter=niter)

    return split


_METIS_OK = 1
_METIS_ERROR_MEMORY = -3
_METIS_OPTION_NITER = 6  # metis.h (5.1): index of METIS_OPTION_NITER
_METIS_OPTION_SEED = 8  # metis.h (5.1): index of METIS_OPTION_SEED


def _kway(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    k: int,
    vw: np.ndarray | None,
    seed: int,
    lib: MetisLib | None = None,
    adjwgt: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`_kway_cut`'s partition."""
    return _kway_cut(xadj, adjncy, k, vw, seed, lib, adjwgt)[0]


def _kway_cut(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    k: int,
    vw: np.ndarray | None,
    seed: int,
    lib: MetisLib | None = None,
    adjwgt: np.ndarray | None = None,
    recursive: bool = False,
    niter: int | None = None,
) -> tuple[np.ndarray, int]:
    """(partition, METIS's edge cut): ``METIS_PartGraphKway`` (``recursive``:
    ``METIS_PartGraphRecursive``, same arguments) of ``lib`` (default: pymetis' own
    library) through ctypes.

    A ctypes foreign call releases the GIL, so other threads (the input fingerprint)
    run on the other cores while METIS works; ``pymetis.part_graph`` holds the GIL for
    the whole call. With pymetis' library: same inputs, same result as
    ``pymetis.part_graph``, which is also the fallback when no library loads.
    """
    import pymetis

    lib = lib if lib is not None else _pymetis_lib()
    if lib is None:
        res = pymetis.part_graph(
            k,
            pymetis.CSRAdjacency(xadj.astype(np.int64), adjncy.astype(np.int64)),
            vweights=vw,
            eweights=adjwgt,
            options=pymetis.Options(seed=seed, niter=niter if niter is not None else -1),
            recursive=recursive,
        )
        return np.asarray(res.vertex_part, dtype=np.int64), int(res.edge_cuts)
    idx, dt = lib.ctype, lib.dtype
    options = (idx * NOPTIONS)()
    lib.lib.METIS_SetDefaultOptions(options)
    options[_METIS_OPTION_SEED] = seed
    if niter is not None:
        options[_METIS_OPTION_NITER] = niter
    n = xadj.shape[0] - 1
    nvtxs, ncon, nparts, edgecut = idx(n), idx(1), idx(k), idx(0)
    part = np.zeros(n, dtype=dt)

    def ptr(a: np.ndarray | None) -> ctypes.c_void_p | None:
        return None if a is None else ctypes.c_void_p(a.ctypes.data)

    xadj = np.ascontiguousarray(xadj, dtype=dt)
    adjncy = np.ascontiguousarray(adjncy, dtype=dt)
    vw = None if vw is None else np.ascontiguousarray(vw, dtype=dt)
    adjwgt = None if adjwgt is None else np.ascontiguousarray(adjwgt, dtype=dt)
    kway = lib.lib.METIS_PartGraphRecursive if recursive else lib.lib.METIS_PartGraphKway
    kway.restype = ctypes.c_int
    status = kway(
        ctypes.byref(nvtxs),
        ctypes.byref(ncon),
        ptr(xadj),
        ptr(adjncy),
        ptr(vw),
        None,
        ptr(adjwgt),
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
        name = "METIS_PartGraphRecursive" if recursive else "METIS_PartGraphKway"
        raise GraphFormatError(f"{name} rejected the graph (status {status})")
    return part.astype(np.int64, copy=False), int(edgecut.value)


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
