"""Vectorised boundary refinement of a partition on the full graph.

Each pass moves every boundary node whose edges to another partition outnumber its edges
inside its own (its gain) to its best partition, highest gains first, as far as the
balance bounds of each target allow. Moves of one pass never undo each other's gain, so
the edge cut never grows:

* two parts: a pass moves one way only (0 -> 1, then 1 -> 0), so no node moves into a
  partition that others leave;
* more parts: every pair of partitions at once. Two moves can only spoil each other's
  gain across an edge joining them where one node enters the partition the other leaves
  (``u: A -> B``, ``v: B -> D`` or ``v: C -> A``); of two such movers the one with the
  lower gain stays. Every other pair of moves removes at least the sum of their gains
  (two neighbours leaving one partition together lose no edge between them).

Gains come from the cut edges only: one gather of both ends' partitions per pass, then a
sort of the cut edges' ``(node, other partition)`` keys. Edges count as the edge cut
reports them (a pair linked both ways counts twice; self-loops never count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from distgnn.log import kv

log = logging.getLogger("distgnn.partition")

IMBALANCE = 0.03  # METIS's default load imbalance bound (ufactor 30)
GROUP_SLACK = 1.02  # the bound on grouped (training) nodes, as rebalance's
MAX_PASSES = 10
MIN_GAIN = 1e-3  # stop when the last two passes together cut less than this fraction


@dataclass(frozen=True)
class RefineResult:
    """The refined partition and what the passes did."""

    parts: np.ndarray
    passes: int
    moved: int
    cut_before: int  # cut input edges before the first pass
    gain: int  # cut input edges removed (a lower bound: moved neighbours only add to it)


def _part_dtype(k: int) -> type[np.signedinteger]:
    return np.int8 if k <= 127 else np.int16 if k <= 32767 else np.int32


def refine_boundary(
    parts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    num_parts: int,
    vweights: np.ndarray | None = None,
    group: np.ndarray | None = None,
    *,
    max_passes: int | None = None,
) -> RefineResult:
    """Greedy boundary moves that lower the edge cut within the balance bounds.

    ``vweights`` (default 1 per node): no partition's total may exceed ``1.03 x`` the
    mean (a partition already above it receives nothing). ``group`` (bool, e.g. training
    nodes): no partition may receive grouped nodes beyond ``1.02 x`` their mean count.
    """
    k = num_parts
    n = int(parts.shape[0])
    parts = np.asarray(parts, dtype=np.int64).copy()
    if k < 2 or n == 0 or src.shape[0] == 0:
        return RefineResult(parts, 0, 0, 0, 0)
    vw = np.ones(n, np.int64) if vweights is None else np.asarray(vweights, np.int64)
    grp = np.zeros(n, np.int64) if group is None else np.asarray(group).astype(np.int64)
    cap = (1 + IMBALANCE) * float(vw.sum()) / k
    gcap = int(np.ceil(float(grp.sum()) / k * GROUP_SLACK))
    deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    loops = np.flatnonzero(np.equal(src, dst))
    if loops.shape[0]:
        deg -= 2 * np.bincount(np.take(src, loops), minlength=n)
    if max_passes is None:
        max_passes = MAX_PASSES
    pdt = _part_dtype(k)
    gains: list[int] = []
    moved = 0
    cut_before = -1
    cut = 0
    for it in range(max_passes):
        small = parts.astype(pdt)
        ps, pd = small[src], small[dst]  # fancy indexing: faster than np.take here
        is_cut = np.not_equal(ps, pd)
        at = np.flatnonzero(is_cut)
        del is_cut
        cut = int(at.shape[0])
        if cut_before < 0:
            cut_before = cut
        if cut == 0:
            break
        # (node, partition of the other end) for both ends of every cut edge
        cu, cv = np.take(src, at), np.take(dst, at)
        pu, pv = np.take(ps, at), np.take(pd, at)
        del ps, pd, at
        keys = np.concatenate([cu * k + pv, cv * k + pu])
        keys.sort()
        first = np.empty(keys.shape[0], dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        del first
        count = np.diff(np.append(starts, keys.shape[0]))
        node, other = np.divmod(keys[starts], k)
        del keys, starts
        inside = deg - np.bincount(node, weights=count, minlength=n).astype(np.int64)
        if k == 2:  # one way per pass
            sel = np.take(parts, node) == it % 2
            node, other, count = node[sel], other[sel], count[sel]
        gain = count - np.take(inside, node)
        pos = gain > 0
        node, other, gain = node[pos], other[pos], gain[pos]
        # the best target of each node, then the nodes by falling gain
        order = np.lexsort((-gain, node))
        node, other, gain = node[order], other[order], gain[order]
        best = np.ones(node.shape[0], dtype=bool)
        np.not_equal(node[1:], node[:-1], out=best[1:])
        node, other, gain = node[best], other[best], gain[best]
        order = np.argsort(-gain, kind="stable")
        node, other, gain = node[order], other[order], gain[order]
        if k > 2:
            node, other, gain = _independent(node, other, gain, n, cu, cv, pu, pv, pdt)
        del cu, cv, pu, pv
        load = np.bincount(parts, weights=vw, minlength=k)
        gload = np.bincount(parts, weights=grp, minlength=k)
        ok = np.zeros(node.shape[0], dtype=bool)
        for t in np.unique(other):
            into = np.flatnonzero(other == t)
            w = np.cumsum(np.take(vw, node[into]))
            g = np.cumsum(np.take(grp, node[into]))
            ok[into] = (w <= cap - load[t]) & (g <= gcap - gload[t])
        parts[node[ok]] = other[ok]
        moved += int(ok.sum())
        gains.append(int(gain[ok].sum()))
        if len(gains) >= 2 and sum(gains[-2:]) <= MIN_GAIN * cut:
            break
    cut_before = max(cut_before, 0)
    log.info(
        "refined",
        extra=kv(passes=len(gains), moved=moved, cut_before=cut_before, gain=sum(gains)),
    )
    return RefineResult(parts, len(gains), moved, cut_before, sum(gains))


def _independent(
    node: np.ndarray,
    other: np.ndarray,
    gain: np.ndarray,
    n: int,
    cu: np.ndarray,
    cv: np.ndarray,
    pu: np.ndarray,
    pv: np.ndarray,
    pdt: type[np.signedinteger],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The moves (``node`` to ``other``, by falling ``gain``) without a pair that could
    spoil each other's gain: across a cut edge ``(cu, cv)`` (partitions ``pu``, ``pv``),
    one end entering the other's partition. Of such a pair the later (lower gain) stays."""
    target = np.full(n, -1, dtype=pdt)
    target[node] = other
    tu, tv = target[cu], target[cv]
    clash = (tu >= 0) & (tv >= 0) & ((tu == pv) | (tv == pu))
    if not clash.any():
        return node, other, gain
    rank = np.zeros(n, dtype=np.int64)
    rank[node] = np.arange(node.shape[0])
    a, b = cu[clash], cv[clash]
    stay = np.zeros(n, dtype=bool)
    stay[np.where(rank[a] > rank[b], a, b)] = True
    keep = ~stay[node]
    return node[keep], other[keep], gain[keep]
