"""Regrouping a two-way partition's clusters on the full graph, before the refinement.

On a graph of communities, METIS on an edge sample puts every community on one side, but
which communities go together is decided on the sample: the cut edges *between*
communities differ from one grouping to another by a few thousand out of a million, less
than the sample's own noise, so its choice is as good as a random one, and no boundary
move can change it (moving a node away from its community only adds to the cut). Here
the grouping is chosen on every edge:

1. **Clusters**: the highest-degree nodes (:data:`CORE` of them, at least
   ``64 x`` :data:`CLUSTERS`) form a core graph, which METIS splits into
   :data:`CLUSTERS` parts on an edge sample of :data:`CORE_DEGREE` edge ends per node.
   The other nodes take the cluster most of their core neighbours have; where fewer than
   :data:`SURE` core neighbours or no majority of them have it, the cluster most of all
   the node's labelled neighbours have (97 % and then 99.8 % of the nodes in their own
   community on the flat benchmark graph). Nodes without a labelled neighbour stay
   unlabelled.
2. **Grouping**: each cluster goes wholly to one side, unlabelled nodes keep their side;
   the edge cut of every one of the ``2^CLUSTERS`` groupings follows from the clusters'
   edge counts (one pass over the edges), and the lowest within the balance bounds (the
   refinement's: vertex weight at most ``1.03 x`` the mean, grouped nodes at most
   ``1.02 x`` theirs) wins.
3. It replaces the partition only when its cut is below the partition's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from distgnn.log import kv, step
from distgnn.partition.assign import metis_run
from distgnn.partition.refine import GROUP_SLACK, IMBALANCE

log = logging.getLogger("distgnn.partition")

CLUSTERS = 16  # clusters grouped (every grouping is tried: 2^16)
CORE = 0.05  # fraction of the nodes (highest degree first) that METIS clusters
CORE_DEGREE = 16.0  # sampled edge ends per core node given to METIS
SURE = 3  # core neighbours of one cluster that label a node without a second vote
_BLOCK = 1 << 22  # edges per block when counting the clusters' edges


@dataclass(frozen=True)
class RegroupResult:
    """The partition (regrouped or unchanged) and what the grouping did."""

    parts: np.ndarray
    adopted: bool  # whether the clusters' best grouping replaced the partition
    cut_before: int  # input edges the given partition cuts
    cut_after: int  # input edges the returned partition cuts
    moved_clusters: int  # clusters put on the side opposite most of their nodes'


def core_clusters(
    src: np.ndarray, dst: np.ndarray, n: int, k: int = CLUSTERS, *, seed: int = 0
) -> np.ndarray:
    """Cluster of every node (-1: none; see the module docstring, step 1)."""
    src, dst = np.asarray(src), np.asarray(dst)
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    m = min(n, max(int(CORE * n), 64 * k))
    core = np.zeros(n, dtype=bool)
    core[np.argsort(-deg, kind="stable")[:m]] = True
    del deg
    in_s, in_d = core[src], core[dst]
    inner = np.flatnonzero(in_s & in_d)
    cid = np.cumsum(core) - 1  # core node -> 0..m-1
    cs, cd = np.take(cid, np.take(src, inner)), np.take(cid, np.take(dst, inner))
    del inner, cid
    keep = min(1.0, CORE_DEGREE * m / max(2 * int(cs.shape[0]), 1))
    run = metis_run(cs, cd, m, k, seed=seed, keep=keep)
    del cs, cd
    labels = np.full(n, -1, dtype=np.int8 if k <= 127 else np.int32)
    labels[core] = run.parts
    # the other nodes: their core neighbours' commonest cluster
    cross = np.flatnonzero(np.not_equal(in_s, in_d))
    del in_s, in_d
    s, d = np.take(src, cross), np.take(dst, cross)
    del cross
    ls, ld = labels[s], labels[d]
    node = np.where(ls >= 0, d, s)
    best, top, total = _commonest(np.maximum(ls, ld), node, n, k)
    del s, d, ls, ld, node
    labels[top > 0] = best[top > 0]
    # unsure ones (fewer than SURE votes, or no majority): all labelled neighbours' commonest
    unsure = ~core & ((top < SURE) | (2 * top <= total))
    del best, top, total
    at = np.flatnonzero(unsure[src] | unsure[dst])
    s, d = np.take(src, at), np.take(dst, at)
    del at
    ls, ld = labels[s], labels[d]
    to_d, to_s = unsure[d] & (ls >= 0), unsure[s] & (ld >= 0)
    best, top, _ = _commonest(
        np.concatenate([ls[to_d], ld[to_s]]), np.concatenate([d[to_d], s[to_s]]), n, k
    )
    has = unsure & (top > 0)
    labels[has] = best[has]
    return labels


def _commonest(
    label: np.ndarray, node: np.ndarray, n: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: the commonest of its votes ``label`` (the lowest on ties; 0 without
    votes), its count, and the number of votes."""
    key = label.astype(np.int64)
    key *= n
    key += node  # label-major: each label's counts are one contiguous row
    counts = np.bincount(key, minlength=n * k).reshape(k, n)
    del key
    best = np.zeros(n, dtype=np.int8 if k <= 127 else np.int32)
    top = counts[0].copy()
    total = counts[0].copy()
    for j in range(1, k):
        more = counts[j] > top
        best[more] = j
        np.maximum(top, counts[j], out=top)
        total += counts[j]
    return best, top, total


def best_grouping(
    labels: np.ndarray,
    parts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    k: int,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
) -> tuple[np.ndarray, int] | None:
    """(side of each cluster, cut) of the lowest-cut grouping within the balance bounds
    (unlabelled nodes keep ``parts``' side); None if no grouping is within them."""
    n = int(parts.shape[0])
    npieces = k + 2
    pdt = np.int8 if npieces <= 127 else np.int32
    piece = np.where(labels >= 0, labels, k + np.asarray(parts)).astype(pdt)
    q = np.zeros(npieces * npieces, dtype=np.int64)
    for lo in range(0, int(src.shape[0]), _BLOCK):
        ps = np.take(piece, src[lo : lo + _BLOCK])
        pd = np.take(piece, dst[lo : lo + _BLOCK])
        key = ps.astype(np.intp)
        key *= npieces
        key += pd
        q += np.bincount(key, minlength=npieces * npieces)
    quot = q.reshape(npieces, npieces)
    quot = quot + quot.T
    vw = np.ones(n, np.int64) if vweights is None else np.asarray(vweights, np.int64)
    grp = np.zeros(n, np.int64) if group is None else np.asarray(group).astype(np.int64)
    load = np.bincount(piece, weights=vw, minlength=npieces).astype(np.int64)
    gload = np.bincount(piece, weights=grp, minlength=npieces).astype(np.int64)
    sides = (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k)) & 1
    s = np.concatenate([sides, np.zeros((1 << k, 1), np.int64), np.ones((1 << k, 1), np.int64)], 1)
    # edges between side-1 and side-0 pieces (quot counts each input edge once per end)
    cuts = ((s @ quot) * (1 - s)).sum(axis=1)
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


def regroup(
    parts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
    *,
    cut: int | None = None,
    seed: int = 0,
) -> RegroupResult:
    """The best grouping of ``parts``' clusters (two parts; see the module docstring).
    ``cut``: the input edges ``parts`` cuts, if known."""
    parts = np.asarray(parts, dtype=np.int64)
    n = int(parts.shape[0])
    if cut is None:
        cut = int(np.count_nonzero(np.take(parts, src) != np.take(parts, dst)))
    if n < 2 * CLUSTERS or src.shape[0] == 0 or cut == 0:
        return RegroupResult(parts, False, cut, cut, 0)
    with step("clusters", log, clusters=CLUSTERS):
        labels = core_clusters(src, dst, n, CLUSTERS, seed=seed)
    found = best_grouping(labels, parts, src, dst, CLUSTERS, vweights, group)
    if found is None or found[1] >= cut:
        log.info("regrouped", extra=kv(adopted=False, cut_before=cut))
        return RegroupResult(parts, False, cut, cut, 0)
    side, new_cut = found
    lab = labels.astype(np.int64)
    known = lab >= 0
    # clusters put on the side opposite to most of their nodes'
    on1 = np.bincount(lab[known], weights=parts[known], minlength=CLUSTERS)
    size = np.bincount(lab[known], minlength=CLUSTERS)
    moved = int(np.count_nonzero((2 * on1 > size) != (side == 1)))
    out = np.where(known, side[np.maximum(lab, 0)], parts)
    log.info("regrouped", extra=kv(adopted=True, cut_before=cut, cut_after=new_cut, moved=moved))
    return RegroupResult(out, True, cut, new_cut, moved)
