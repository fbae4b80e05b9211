"""Regrouping a partition's clusters (up to eight parts) on the full graph, before the
refinement.

On a graph of communities, METIS on an edge sample puts every community in one part, but
which communities go together is decided on the sample: the cut edges *between*
communities differ from one grouping to another by a few thousand out of a million, less
than the sample's own noise, so its choice is as good as a random one, and no boundary
move can change it (moving a node away from its community only adds to the cut). Here
the grouping is chosen on every edge:

1. **Clusters** (:func:`find_clusters`, which needs no partition: it runs on another
   core while the sample is drawn and METIS bisects it): the highest-degree nodes
   (:data:`CORE` of them, at least ``64 x`` :data:`CLUSTERS`) form a core graph, which
   METIS splits into
   :data:`CLUSTERS` parts on an edge sample of :data:`CORE_DEGREE` edge ends per node.
   The other nodes take the cluster most of their core neighbours have; then the core
   nodes (METIS's balance bound puts some in a neighbouring cluster) and the nodes where
   fewer than :data:`SURE` core neighbours or no majority of them agreed take the cluster
   most of all their labelled neighbours have. Nodes without a labelled neighbour stay
   unlabelled. The clusters' edge counts come from one more pass over the edges.
2. **Grouping** (:func:`regroup`): each cluster goes wholly to one part, unlabelled nodes
   keep the partition's part; the edge cut of a grouping follows from the edge counts.
   Two parts: every one of the ``2^CLUSTERS`` groupings is tried (:func:`best_grouping`);
   more parts: a local search from the part holding most of each cluster
   (:func:`local_grouping`). The lowest found within the balance bounds (the
   refinement's: vertex weight at most ``1.03 x`` the mean, grouped nodes at most
   ``1.02 x`` theirs) replaces the partition if it cuts fewer edges than the partition.

The input is read in blocks whose memory-mapped pages are released after use, and freed
memory is returned to the system after each phase (:func:`release_freed`), so the
cluster step adds about 0.1-0.2 GiB to METIS's memory peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distgnn.graph.data import release_rows
from distgnn.log import kv, step
from distgnn.partition.assign import metis_run
from distgnn.partition.refine import GROUP_SLACK, IMBALANCE

log = logging.getLogger("distgnn.partition")

CLUSTERS = 16  # clusters grouped (every grouping is tried: 2^16)
CORE = 0.05  # fraction of the nodes (highest degree first) that METIS clusters
CORE_DEGREE = 16.0  # sampled edge ends per core node given to METIS
SURE = 3  # core neighbours of one cluster that label a node without a second vote
_BLOCK = 1 << 21  # edges per block read from the input
_LABELS_AT_ONCE = 4  # labels counted per pass in _commonest (bounds its count table)


@dataclass(frozen=True)
class Clusters:
    """:func:`find_clusters`' result."""

    labels: np.ndarray  # (n,) cluster of every node, -1: none
    quot: np.ndarray  # (k, k) input edges from cluster i to cluster j
    load: np.ndarray  # (k,) vertex weight of each cluster
    gload: np.ndarray  # (k,) grouped nodes in each cluster
    loose: np.ndarray  # indices of the input edges with an unlabelled end


@dataclass(frozen=True)
class RegroupResult:
    """The partition (regrouped or unchanged) and what the grouping did."""

    parts: np.ndarray
    adopted: bool  # whether the clusters' best grouping replaced the partition
    cut_before: int  # input edges the given partition cuts
    cut_after: int  # input edges the returned partition cuts
    moved_clusters: int  # clusters put on the side opposite most of their nodes'


def release_freed() -> None:
    """Return freed heap memory to the system (glibc's ``malloc_trim``; a no-op
    elsewhere). A thread's freed blocks stay in its own malloc arena otherwise, and
    count in the process's RSS through METIS's and relabelling's peaks."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        ctypes.CDLL(name).malloc_trim(ctypes.c_size_t(0))
    except (OSError, AttributeError):
        return


def _blocks(src: np.ndarray, dst: np.ndarray) -> list[tuple[int, int]]:
    e = int(src.shape[0])
    return [(lo, min(e, lo + _BLOCK)) for lo in range(0, e, _BLOCK)]


def _read(src: np.ndarray, dst: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[lo, hi)`` of both edge arrays as in-memory copies; their mapped pages are
    released."""
    s, d = np.array(src[lo:hi]), np.array(dst[lo:hi])
    release_rows(src, lo, hi)
    release_rows(dst, lo, hi)
    return s, d


def find_clusters(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
    *,
    k: int = CLUSTERS,
    seed: int = 0,
    core_done: Callable[[], object] | None = None,
) -> Clusters:
    """The clusters and their edge counts (see the module docstring, step 1).
    ``core_done`` is called once METIS has clustered the core: METIS draws from one
    process-wide random state, so no other METIS call may run beside that one."""
    blocks = _blocks(src, dst)
    deg = np.zeros(n, dtype=np.int64)
    for lo, hi in blocks:
        s, d = _read(src, dst, lo, hi)
        deg += np.bincount(s, minlength=n)
        deg += np.bincount(d, minlength=n)
    m = min(n, max(int(CORE * n), 64 * k))
    core = np.zeros(n, dtype=bool)
    core[np.argsort(-deg, kind="stable")[:m]] = True
    del deg
    cid = np.cumsum(core) - 1  # core node -> 0..m-1
    inner_s: list[np.ndarray] = []
    inner_d: list[np.ndarray] = []
    idt = np.int32 if n < 2**31 else np.int64
    for lo, hi in blocks:
        s, d = _read(src, dst, lo, hi)
        both = core[s] & core[d]
        inner_s.append(np.take(cid, s[both]))
        inner_d.append(np.take(cid, d[both]))
    del cid
    cs, cd = np.concatenate(inner_s), np.concatenate(inner_d)
    del inner_s, inner_d
    keep = min(1.0, CORE_DEGREE * m / max(2 * int(cs.shape[0]), 1))
    run = metis_run(cs, cd, m, k, seed=seed, keep=keep)
    # the partition's METIS call waits for this one: the rest runs beside it
    if core_done is not None:
        core_done()
    del cs, cd
    cross_node: list[np.ndarray] = []  # the non-core end of an edge with one core end
    cross_core: list[np.ndarray] = []  # its core end
    for lo, hi in blocks:
        s, d = _read(src, dst, lo, hi)
        in_s = core[s]
        one = np.not_equal(in_s, core[d])
        s, d, in_s = s[one], d[one], in_s[one]
        cross_node.append(np.where(in_s, d, s).astype(idt))
        cross_core.append(np.where(in_s, s, d).astype(idt))
    ldt = np.int8 if k <= 127 else np.int32
    labels = np.full(n, -1, dtype=ldt)
    labels[core] = run.parts
    # the other nodes: their core neighbours' commonest cluster
    node = np.concatenate(cross_node)
    del cross_node
    vote = labels[np.concatenate(cross_core)]
    del cross_core
    best, top, total = _commonest(vote, node, n, k)
    del node, vote
    labels[top > 0] = best[top > 0]
    release_freed()
    # the unsure (too few votes, or no majority), and the core nodes (METIS's balance
    # puts some in a neighbouring cluster): all labelled neighbours' commonest
    unsure = core | (top < SURE) | (2 * top <= total)
    del best, top, total
    votes: list[np.ndarray] = []
    nodes: list[np.ndarray] = []
    for lo, hi in blocks:
        s, d = _read(src, dst, lo, hi)
        ls, ld = labels[s], labels[d]
        to_d, to_s = unsure[d] & (ls >= 0), unsure[s] & (ld >= 0)
        votes += [ls[to_d], ld[to_s]]
        nodes += [d[to_d].astype(idt), s[to_s].astype(idt)]
    best, top, _ = _commonest(np.concatenate(votes), np.concatenate(nodes), n, k)
    del votes, nodes
    has = unsure & (top > 0)
    labels[has] = best[has]
    del best, top, has, unsure
    release_freed()
    # the clusters' edge counts, and the edges with an unlabelled end
    q = np.zeros(k * k, dtype=np.int64)
    loose: list[np.ndarray] = []
    for lo, hi in blocks:
        s, d = _read(src, dst, lo, hi)
        ls, ld = labels[s], labels[d]
        known = (ls >= 0) & (ld >= 0)
        key = ls[known].astype(np.intp)
        key *= k
        key += ld[known]
        q += np.bincount(key, minlength=k * k)
        loose.append(lo + np.flatnonzero(~known))
    lab = labels.astype(np.intp)
    ok = lab >= 0
    vw = np.ones(n, np.int64) if vweights is None else np.asarray(vweights, np.int64)
    grp = np.zeros(n, np.int64) if group is None else np.asarray(group).astype(np.int64)
    load = np.bincount(lab[ok], weights=vw[ok], minlength=k).astype(np.int64)
    gload = np.bincount(lab[ok], weights=grp[ok], minlength=k).astype(np.int64)
    out = Clusters(labels, q.reshape(k, k), load, gload, np.concatenate(loose))
    release_freed()
    return out


def _commonest(
    label: np.ndarray, node: np.ndarray, n: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: the commonest of its votes ``label`` (the lowest on ties; 0 without
    votes), its count, and the number of votes. The votes are counted a few labels at a
    time (a count table of ``n`` x :data:`_LABELS_AT_ONCE`)."""
    best = np.zeros(n, dtype=np.int8 if k <= 127 else np.int32)
    top = np.zeros(n, dtype=np.int64)
    total = np.zeros(n, dtype=np.int64)
    for first in range(0, k, _LABELS_AT_ONCE):
        width = min(_LABELS_AT_ONCE, k - first)
        sel = (label >= first) & (label < first + width)
        key = label[sel].astype(np.int64)
        key -= first
        key *= n
        key += node[sel]  # label-major: each label's counts are one contiguous row
        del sel
        counts = np.bincount(key, minlength=n * width).reshape(width, n)
        del key
        for j in range(width):
            more = counts[j] > top
            best[more] = first + j
            np.maximum(top, counts[j], out=top)
            total += counts[j]
        del counts
    return best, top, total


def best_grouping(
    quot: np.ndarray, load: np.ndarray, gload: np.ndarray, k: int
) -> tuple[np.ndarray, int] | None:
    """(side of each cluster, cut) of the lowest-cut grouping within the balance bounds;
    None if none is. Pieces ``k`` and ``k + 1`` (unlabelled nodes on side 0 and 1) stay:
    ``quot`` is ``(k + 2, k + 2)`` input edges between pieces, ``load`` and ``gload``
    their vertex weight and grouped nodes."""
    sym = quot + quot.T
    sides = (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k)) & 1
    fixed = np.broadcast_to(np.array([0, 1], np.int64), (1 << k, 2))
    s = np.concatenate([sides, fixed], axis=1)
    # edges between side-1 and side-0 pieces (sym counts both directions)
    cuts = ((s @ sym) * (1 - s)).sum(axis=1)
    total, gtotal = int(load.sum()), int(gload.sum())
    w1, g1 = s @ load, s @ gload
    cap = (1 + IMBALANCE) * total / 2
    gcap = int(np.ceil(gtotal / 2 * GROUP_SLACK))
    ok = (np.maximum(w1, total - w1) <= cap) & (np.maximum(g1, gtotal - g1) <= gcap)
    if not ok.any():
        return None
    cuts = np.where(ok, cuts, np.iinfo(np.int64).max)
    b = int(np.argmin(cuts))
    return sides[b], int(cuts[b])


def local_grouping(
    quot: np.ndarray, load: np.ndarray, gload: np.ndarray, k: int, num_parts: int, start: np.ndarray
) -> tuple[np.ndarray, int] | None:
    """(part of each cluster, cut) of a grouping of ``k`` clusters into ``num_parts`` parts
    found by local search from ``start``: moving one cluster to another part or swapping
    two clusters' parts, the best such change at a time, while one lowers the balance
    bounds' excess or, within them, the cut; None if it ends outside the bounds. Pieces
    ``k + p`` (unlabelled nodes of part ``p``) stay in part ``p``; ``quot``, ``load`` and
    ``gload`` as in :func:`best_grouping`. Deterministic: no random choice."""
    sym = quot + quot.T
    total, gtotal = float(load.sum()), float(gload.sum())
    cap = (1 + IMBALANCE) * total / num_parts
    gcap = float(np.ceil(gtotal / num_parts * GROUP_SLACK))
    fixed = np.arange(num_parts)
    # every candidate grouping: one cluster moved, or two swapped
    moves = [(i, t) for i in range(k) for t in range(num_parts)]
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]

    def score(cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = np.concatenate([cands, np.broadcast_to(fixed, (cands.shape[0], num_parts))], 1)
        onehot = (a[:, :, None] == np.arange(num_parts)).astype(np.int64)  # (c, pieces, P)
        inside = np.einsum("cip,ij,cjp->c", onehot, sym, onehot)
        cut = (int(sym.sum()) - inside) // 2
        w = np.einsum("cip,i->cp", onehot, load)
        g = np.einsum("cip,i->cp", onehot, gload)
        excess = np.maximum(w - cap, 0).sum(1) + np.maximum(g - gcap, 0).sum(1)
        return excess, cut

    cur = np.asarray(start, dtype=np.int64).copy()
    excess, cut = (x[0] for x in score(cur[None]))
    for _ in range(4 * k * num_parts):  # each step lowers (excess, cut): a bound, not a limit
        cands = np.repeat(cur[None], len(moves) + len(pairs), axis=0)
        for c, (i, t) in enumerate(moves):
            cands[c, i] = t
        for c, (i, j) in enumerate(pairs, start=len(moves)):
            cands[c, i], cands[c, j] = cur[j], cur[i]
        ex, ct = score(cands)
        b = int(np.lexsort((ct, ex))[0])
        if (ex[b], ct[b]) >= (excess, cut):
            break
        cur, excess, cut = cands[b], ex[b], ct[b]
    if excess > 0:
        return None
    return cur, int(cut)


def regroup(
    parts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    clusters: Clusters,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
    *,
    cut: int | None = None,
    num_parts: int = 2,
) -> RegroupResult:
    """The best grouping of ``clusters`` for a partition ``parts`` into ``num_parts`` (see
    the module docstring, step 2). ``cut``: the input edges ``parts`` cuts, if known."""
    parts = np.asarray(parts, dtype=np.int64)
    n = int(parts.shape[0])
    if cut is None:
        cut = int(np.count_nonzero(np.take(parts, src) != np.take(parts, dst)))
    labels = clusters.labels
    k = int(clusters.quot.shape[0])
    if cut == 0:
        return RegroupResult(parts, False, cut, cut, 0)
    # pieces: clusters 0..k-1, then the unlabelled nodes of each part (k + part)
    piece = np.where(labels >= 0, labels.astype(np.int64), k + parts)
    npieces = k + num_parts
    quot = np.zeros((npieces, npieces), dtype=np.int64)
    quot[:k, :k] = clusters.quot
    if clusters.loose.shape[0]:
        ls = np.take(piece, np.take(src, clusters.loose))
        ld = np.take(piece, np.take(dst, clusters.loose))
        quot += np.bincount(ls * npieces + ld, minlength=npieces * npieces).reshape(
            npieces, npieces
        )
    free = np.flatnonzero(labels < 0)
    vw = np.ones(n, np.int64) if vweights is None else np.asarray(vweights, np.int64)
    grp = np.zeros(n, np.int64) if group is None else np.asarray(group).astype(np.int64)
    part_of_free = np.take(parts, free)
    load = np.concatenate(
        [
            clusters.load,
            np.bincount(part_of_free, weights=vw[free], minlength=num_parts).astype(np.int64),
        ]
    )
    gload = np.concatenate(
        [
            clusters.gload,
            np.bincount(part_of_free, weights=grp[free], minlength=num_parts).astype(np.int64),
        ]
    )
    lab = labels.astype(np.int64)
    known = lab >= 0
    # the part holding most of each cluster's nodes
    held = np.bincount(lab[known] * num_parts + parts[known], minlength=k * num_parts).reshape(
        k, num_parts
    )
    majority = np.argmax(held, axis=1)
    if num_parts == 2:
        found = best_grouping(quot, load, gload, k)
    else:
        found = local_grouping(quot, load, gload, k, num_parts, majority)
    if found is None or found[1] >= cut:
        log.info("regrouped", extra=kv(adopted=False, cut_before=cut))
        return RegroupResult(parts, False, cut, cut, 0)
    side, new_cut = found
    moved = int(np.count_nonzero(majority != side))  # clusters put in another part
    out = np.where(known, side[np.maximum(lab, 0)], parts)
    log.info("regrouped", extra=kv(adopted=True, cut_before=cut, cut_after=new_cut, moved=moved))
    return RegroupResult(out, True, cut, new_cut, moved)


def regroup_now(
    parts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
    *,
    seed: int = 0,
    num_parts: int = 2,
) -> RegroupResult:
    """:func:`find_clusters` then :func:`regroup`, in this thread."""
    with step("clusters", log, clusters=CLUSTERS):
        clusters = find_clusters(src, dst, int(parts.shape[0]), vweights, group, seed=seed)
    return regroup(parts, src, dst, clusters, vweights, group, num_parts=num_parts)
