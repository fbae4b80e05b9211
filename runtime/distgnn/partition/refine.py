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
            node, other, gain = _compatible(node, other, gain, n, cu, cv, pu, pv, pdt)
        del cu, cv, pu, pv
        ok = _within_bounds(parts, node, other, vw, grp, k, cap, gcap)
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


def _within_bounds(
    parts: np.ndarray,
    node: np.ndarray,
    other: np.ndarray,
    vw: np.ndarray,
    grp: np.ndarray,
    k: int,
    cap: float,
    gcap: int,
) -> np.ndarray:
    """Which moves (``node`` to ``other``, by falling gain) stay within the bounds: into
    each partition, the best moves whose weight fits below ``cap`` (grouped nodes below
    ``gcap``), counting the room that accepted moves out of it free. A move refused
    frees no room, so the acceptance is repeated until nothing more is refused (two
    parts: one pass, as the moves go one way)."""
    load = np.bincount(parts, weights=vw, minlength=k)
    gload = np.bincount(parts, weights=grp, minlength=k)
    src_part = np.take(parts, node)
    wn, gn = np.take(vw, node), np.take(grp, node)
    ok = np.ones(node.shape[0], dtype=bool)
    while True:
        out = np.bincount(src_part[ok], weights=wn[ok], minlength=k)
        gout = np.bincount(src_part[ok], weights=gn[ok], minlength=k)
        now = np.zeros_like(ok)
        for t in np.unique(other[ok]):
            into = np.flatnonzero(ok & (other == t))
            w, g = np.cumsum(wn[into]), np.cumsum(gn[into])
            now[into] = (w <= cap - load[t] + out[t]) & (g <= gcap - gload[t] + gout[t])
        if np.array_equal(now, ok):
            return ok
        ok = now


def _compatible(
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
    """The moves (``node`` to ``other``, by falling ``gain``) that keep a positive gain
    whatever the others do, each with the gain it is sure of.

    A move ``u: A -> B`` loses one edge of its gain for each neighbour in ``B`` that moves
    too (across a cut edge ``(cu, cv)``, partitions ``pu``, ``pv``); no other move changes
    it for the worse. Moves whose gain exceeds that loss with every other move made are
    kept whatever is later refused. Of the others, a move is made if no kept move
    lowers it and it comes before (higher gain) every other such move it shares an edge
    with in either direction: then no made move lowers it (two neighbours about to swap
    parts: the first moves)."""
    target = np.full(n, -1, dtype=pdt)
    target[node] = other
    tu, tv = target[cu], target[cv]
    hurts_u = (tu >= 0) & (tv >= 0) & (pv == tu)  # cv leaves the part cu enters
    hurts_v = (tu >= 0) & (tv >= 0) & (pu == tv)
    if not (hurts_u.any() or hurts_v.any()):
        return node, other, gain
    loss = np.bincount(cu[hurts_u], minlength=n) + np.bincount(cv[hurts_v], minlength=n)
    sure = gain > np.take(loss, node)
    kept = np.zeros(n, dtype=bool)
    kept[node[sure]] = True
    rest = np.zeros(n, dtype=bool)
    rest[node[~sure]] = True
    rank = np.zeros(n, dtype=np.int64)
    rank[node] = np.arange(node.shape[0])
    blocked = np.zeros(n, dtype=bool)
    blocked[cu[hurts_u & kept[cv]]] = True  # lowered by a kept move
    blocked[cv[hurts_v & kept[cu]]] = True
    pair = (hurts_u | hurts_v) & rest[cu] & rest[cv]
    a, b = cu[pair], cv[pair]
    blocked[np.where(rank[a] > rank[b], a, b)] = True  # the later of two such moves
    made = sure | ~blocked[node]
    sure_gain = np.where(sure, gain - np.take(loss, node), gain)
    return node[made], other[made], sure_gain[made]
