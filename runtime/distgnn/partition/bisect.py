"""Recursive bisection on two cores: the top bisection, then both halves at once.

``METIS_PartGraphRecursive`` into ``k`` parts bisects the whole graph, then each half into
``k / 2`` parts, and so on: the levels below the top are independent calls on disjoint
subgraphs, about half of its time with 8 parts. METIS draws from the C library's
``rand()`` (process-wide state, reseeded by every call), so two calls in one namespace at
once would interleave their draws and lose the seed's determinism. The second half runs
in a **second instance** of the METIS library loaded with ``dlmopen`` into its own
link-map namespace, with its own C library and so its own random state: both halves are
then the same, call after call, as if run one after the other.

Where no second instance loads (not glibc, or pymetis' library, a Python extension that
needs the interpreter's symbols) or the parts are odd in number, METIS recurses itself.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress

import numpy as np

from distgnn.log import kv
from distgnn.partition.metislib import MetisLib

log = logging.getLogger("distgnn.partition")

_LM_ID_NEWLM = -1  # dlfcn.h: a new link-map namespace
_RTLD_NOW = 2

# (xadj, adjncy, adjwgt, vweights, parts, lib) -> (partition, METIS's edge cut)
Split = Callable[
    [np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, int, MetisLib],
    tuple[np.ndarray, int],
]


@contextmanager
def second_instance(lib: MetisLib) -> Iterator[MetisLib | None]:
    """Another instance of ``lib`` in a new link-map namespace (None where none loads);
    unloaded on exit, after its C library has returned its freed memory."""
    try:
        libc = ctypes.CDLL(None)
        dlmopen, dlclose = libc.dlmopen, libc.dlclose
    except (OSError, AttributeError):
        yield None
        return
    dlmopen.restype = ctypes.c_void_p
    dlmopen.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_int]
    dlclose.argtypes = [ctypes.c_void_p]
    handle = dlmopen(_LM_ID_NEWLM, lib.path.encode(), _RTLD_NOW)
    if not handle:
        yield None
        return
    try:
        other = ctypes.CDLL(lib.path, handle=handle)
        other.METIS_PartGraphRecursive  # noqa: B018 (symbol check)
    except (OSError, AttributeError):
        dlclose(handle)
        yield None
        return
    try:
        yield MetisLib(lib.path, lib.idx_bits, other)
    finally:
        with suppress(AttributeError):  # its own heap: METIS's freed levels
            other.malloc_trim(ctypes.c_size_t(0))
        dlclose(handle)


def induced(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    adjwgt: np.ndarray | None,
    vweights: np.ndarray | None,
    inside: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(nodes, xadj, adjncy, adjwgt, vweights) of the subgraph on the nodes where
    ``inside`` (bool) is set, renumbered in order; edges leaving it are dropped."""
    n = int(xadj.shape[0]) - 1
    dt = xadj.dtype
    nodes = np.flatnonzero(inside)
    newid = np.zeros(n, dtype=dt)
    newid[nodes] = np.arange(nodes.shape[0], dtype=dt)
    keep = np.repeat(inside, np.diff(xadj))
    keep &= inside[adjncy]
    kept = np.zeros(keep.shape[0] + 1, dtype=np.int64)  # kept entries before each one
    np.cumsum(keep, out=kept[1:])
    counts = np.take(kept, xadj[1:][nodes]) - np.take(kept, xadj[:-1][nodes])
    sub_xadj = np.zeros(nodes.shape[0] + 1, dtype=dt)
    np.cumsum(counts, out=sub_xadj[1:])
    sub_adj = np.take(newid, adjncy[keep])
    sub_w = None if adjwgt is None else adjwgt[keep]
    sub_vw = None if vweights is None else np.ascontiguousarray(vweights[nodes])
    return nodes, sub_xadj, sub_adj, sub_w, sub_vw


def bisect_then_halves(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    adjwgt: np.ndarray | None,
    vweights: np.ndarray | None,
    k: int,
    lib: MetisLib,
    split: Split,
) -> tuple[np.ndarray, int]:
    """(partition into ``k`` parts, edge cut) by recursive bisection, the two halves below
    the top bisection at once (see the module docstring). ``split`` is the recursive METIS
    call (its seed fixed by the caller)."""
    n = int(xadj.shape[0]) - 1
    if k < 4 or k % 2 or n < 2 * k:
        return split(xadj, adjncy, adjwgt, vweights, k, lib)
    with second_instance(lib) as other:
        if other is None:
            return split(xadj, adjncy, adjwgt, vweights, k, lib)
        top, top_cut = split(xadj, adjncy, adjwgt, vweights, 2, lib)
        sides = top.astype(bool)
        if min(int(sides.sum()), n - int(sides.sum())) < k:  # a degenerate top split
            return split(xadj, adjncy, adjwgt, vweights, k, lib)
        half = k // 2

        def run(side: int, instance: MetisLib) -> tuple[np.ndarray, np.ndarray, int]:
            inside = sides if side else ~sides
            nodes, sx, sa, sw, svw = induced(xadj, adjncy, adjwgt, vweights, inside)
            parts, cut = split(sx, sa, sw, svw, half, instance)
            return nodes, parts, cut

        with ThreadPoolExecutor(1, thread_name_prefix="metis-half") as pool:
            second = pool.submit(run, 1, other)
            nodes0, parts0, cut0 = run(0, lib)
            nodes1, parts1, cut1 = second.result()
    out = np.empty(n, dtype=np.int64)
    out[nodes0] = parts0
    out[nodes1] = parts1 + half
    log.info(
        "bisected",
        extra=kv(
            parts=k, top_cut=top_cut, half_cuts=[cut0, cut1], halves=[nodes0.size, nodes1.size]
        ),
    )
    return out, top_cut + cut0 + cut1
