"""Build one partition's local graph: owned in-edges, halo nodes (k hops), CSC over local IDs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Relabeled:
    """The whole graph in new IDs: edges in new-ID order (grouped by owner partition)."""

    num_parts: int
    num_nodes: int
    new2orig: np.ndarray  # (N,) original homogeneous node ID of each new ID
    node_offsets: np.ndarray  # (k+1,)
    edge_offsets: np.ndarray  # (k+1,)
    eorder: np.ndarray  # (E,) original edge ID of each new edge ID
    nsrc: np.ndarray  # (E,) new source ID of each new edge ID
    ndst: np.ndarray  # (E,) new destination ID of each new edge ID
    etype: np.ndarray | None  # (E,) int32 edge type of each new edge ID (None: homogeneous)
    num_etypes: int = 1
    _by_dst: tuple[np.ndarray, np.ndarray | None] | None = None

    def edge_cut(self) -> float:
        """Fraction of edges whose endpoints are owned by different partitions."""
        if self.nsrc.shape[0] == 0:
            return 0.0
        cross = 0
        for p in range(self.num_parts):
            a, b = self.node_offsets[p], self.node_offsets[p + 1]
            s = self.nsrc[self.edge_offsets[p] : self.edge_offsets[p + 1]]
            cross += s.shape[0] - int(np.count_nonzero((s >= a) & (s < b)))
        return cross / self.nsrc.shape[0]

    def in_edge_index(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(indptr over new node IDs, permutation to new edge IDs or None) of all in-edges."""
        if self._by_dst is None:
            perm = None if self.etype is None else np.argsort(self.ndst, kind="stable")
            d = self.ndst if perm is None else self.ndst[perm]
            indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
            np.cumsum(np.bincount(d, minlength=self.num_nodes), out=indptr[1:])
            self._by_dst = (indptr, perm)
        return self._by_dst


@dataclass
class LocalGraph:
    indptr: np.ndarray
    indices: np.ndarray
    eid: np.ndarray
    etype: np.ndarray | None
    halo_nid: np.ndarray
    num_owned: int


def expand_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for every pair, vectorised."""
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return offs + np.arange(total, dtype=np.int64)


def build_local(r: Relabeled, p: int, halo_hops: int) -> LocalGraph:
    """Local CSC of partition ``p``: owned nodes first, then halo nodes hop by hop."""
    a, b = int(r.node_offsets[p]), int(r.node_offsets[p + 1])
    ea, eb = int(r.edge_offsets[p]), int(r.edge_offsets[p + 1])
    n_owned = b - a
    src_parts = [r.nsrc[ea:eb]]
    dst_parts = [r.ndst[ea:eb]]
    eid_parts = [np.arange(ea, eb, dtype=np.int64)]
    s = src_parts[0]
    halo_levels = [_unique_ids(s[(s < a) | (s >= b)], r.num_nodes)]
    known = halo_levels[0]
    for _ in range(1, halo_hops):
        frontier = halo_levels[-1]
        if frontier.shape[0] == 0:
            break
        indptr, perm = r.in_edge_index()
        pos = expand_ranges(indptr[frontier], indptr[frontier + 1])
        eids = pos if perm is None else perm[pos]
        es, ed = r.nsrc[eids], r.ndst[eids]
        src_parts.append(es)
        dst_parts.append(ed)
        eid_parts.append(eids)
        outside = es[(es < a) | (es >= b)]
        new = np.setdiff1d(np.unique(outside), known, assume_unique=True)
        halo_levels.append(new)
        known = np.union1d(known, new)
    halo_nid = np.concatenate(halo_levels).astype(np.int64)
    num_local = n_owned + halo_nid.shape[0]
    if len(dst_parts) == 1 and r.etype is None:
        # owned in-edges only, already sorted by new destination: no reordering, and the
        # row starts come from a binary search (no local destination array)
        gdst = dst_parts[0]
        lsrc = _to_local(src_parts[0], a, b, halo_nid)
        indptr = np.full(num_local + 1, gdst.shape[0], dtype=np.int64)
        indptr[: n_owned + 1] = np.searchsorted(gdst, np.arange(a, b + 1, dtype=np.int64))
        return LocalGraph(indptr, lsrc, eid_parts[0], None, halo_nid, n_owned)
    gsrc = np.concatenate(src_parts)
    gdst = np.concatenate(dst_parts)
    eid = np.concatenate(eid_parts)
    lsrc = _to_local(gsrc, a, b, halo_nid)
    ldst = _to_local(gdst, a, b, halo_nid) if len(dst_parts) > 1 else gdst - a
    etype = None if r.etype is None else r.etype[eid]
    if etype is not None or len(dst_parts) > 1:
        key = ldst if etype is None else ldst * r.num_etypes + etype
        order = np.argsort(key, kind="stable")
        lsrc, ldst, eid = lsrc[order], ldst[order], eid[order]
        if etype is not None:
            etype = etype[order]
    indptr = np.zeros(num_local + 1, dtype=np.int64)
    np.cumsum(np.bincount(ldst, minlength=num_local), out=indptr[1:])
    return LocalGraph(indptr, lsrc, eid, etype, halo_nid, n_owned)


_DENSE_MAX_NODES = 1 << 26  # dense ID tables up to 256 MiB (int32) per partition


def _unique_ids(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    """Sorted unique node IDs (a bitmap over all IDs when that is small, else np.unique)."""
    if num_nodes > _DENSE_MAX_NODES:
        return np.unique(ids).astype(np.int64)
    seen = np.zeros(num_nodes, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen).astype(np.int64)


def _to_local(gids: np.ndarray, a: int, b: int, halo_nid: np.ndarray) -> np.ndarray:
    out = gids - a
    outside = (gids < a) | (gids >= b)
    if outside.any():
        og = gids[outside]
        top = int(og.max()) + 1
        if top <= _DENSE_MAX_NODES:  # direct table lookup instead of a binary search
            table = np.zeros(top, dtype=np.int64)
            table[halo_nid[halo_nid < top]] = (b - a) + np.flatnonzero(halo_nid < top)
            out[outside] = table[og]
        else:
            sorter = np.argsort(halo_nid)
            idx = np.searchsorted(halo_nid, og, sorter=sorter)
            out[outside] = (b - a) + sorter[idx]
    return out
