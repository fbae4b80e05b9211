"""An in-memory graph with a vectorised one-hop sampler.

Used for standalone runs over a graph file and as the process-local sampler in
tests. It offers the parts of the DistGraph API the loaders and apps use:
``ndata``, ``num_nodes()``, ``num_edges()``, ``find_edges()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from distgnn.errors import ConfigError, GraphFormatError
from distgnn.sampling.neighbor import Fanout, Hop


def ragged_positions(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(segment, position)`` of every element of the ranges ``starts[i] + 0..counts[i]-1``."""
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    offs = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) - np.repeat(offs, counts) + np.repeat(starts, counts)
    return seg, pos


class LocalGraph:
    """Homogeneous-ID graph in memory (edge types optional), CSC and CSR views."""

    def __init__(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        num_nodes: int,
        ndata: Mapping[str, np.ndarray] | None = None,
        edata: Mapping[str, np.ndarray] | None = None,
        etype: np.ndarray | None = None,
        etype_names: Sequence[str] = ("_N:_E:_N",),
    ) -> None:
        self.src = np.asarray(src, dtype=np.int64)
        self.dst = np.asarray(dst, dtype=np.int64)
        if self.src.shape != self.dst.shape:
            raise GraphFormatError("src/dst: lengths differ")
        self._n = int(num_nodes)
        if self.src.size and int(max(self.src.max(), self.dst.max())) >= self._n:
            raise GraphFormatError("src/dst: node ID out of range")
        self.etype = None if etype is None else np.asarray(etype, dtype=np.int64)
        self.etype_names = list(etype_names)
        self.ndata: dict[str, torch.Tensor] = {
            k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in (ndata or {}).items()
        }
        self.edata: dict[str, np.ndarray] = dict(edata or {})
        et = self.etype if self.etype is not None else np.zeros_like(self.src)
        eid = np.arange(self.src.size, dtype=np.int64)
        self._views = {}
        for direction, key, other in (("in", self.dst, self.src), ("out", self.src, self.dst)):
            order = np.lexsort((eid, et, key))
            indptr = np.zeros(self._n + 1, dtype=np.int64)
            np.cumsum(np.bincount(key, minlength=self._n), out=indptr[1:])
            self._views[direction] = (indptr, other[order], order, et[order])

    @classmethod
    def from_npz(cls, path: str) -> LocalGraph:
        """A homogeneous graph file (``src``, ``dst``, node data) per partition-format.md."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        if "src" not in arrays or "dst" not in arrays:
            raise GraphFormatError(f"{path}: needs 'src' and 'dst' arrays")
        src, dst = arrays.pop("src"), arrays.pop("dst")
        n = int(arrays.pop("num_nodes", 0)) or None
        ndata = {k: v for k, v in arrays.items() if not k.startswith("edata/")}
        edata = {k[6:]: v for k, v in arrays.items() if k.startswith("edata/")}
        if n is None:
            n = next((len(v) for v in ndata.values()), int(max(src.max(), dst.max())) + 1)
        return cls(src, dst, n, ndata, edata)

    def num_nodes(self) -> int:
        return self._n

    def num_edges(self) -> int:
        return int(self.src.size)

    def find_edges(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eids = np.asarray(eids, dtype=np.int64)
        return self.src[eids], self.dst[eids]

    def one_hop(self, rng: np.random.Generator) -> _LocalOneHop:
        return _LocalOneHop(self, rng)


class _LocalOneHop:
    """One-hop sampler bound to a graph and a random generator."""

    def __init__(self, g: LocalGraph, rng: np.random.Generator) -> None:
        self.g, self.rng = g, rng

    def __call__(
        self, seeds: np.ndarray, fanout: Fanout, *, replace: bool, prob: str | None, edge_dir: str
    ) -> Hop:
        g = self.g
        indptr, _nbr, eids, ets = g._views[edge_dir]
        seeds = np.asarray(seeds, dtype=np.int64)
        starts = indptr[seeds]
        seg, pos = ragged_positions(starts, indptr[seeds + 1] - starts)
        cand_et = ets[pos]
        if isinstance(fanout, Mapping):
            fan = np.full(len(g.etype_names), 0, dtype=np.int64)
            for name, k in fanout.items():
                if name not in g.etype_names:
                    raise ConfigError(f"fanouts: unknown edge type {name!r}")
                fan[g.etype_names.index(name)] = k
            k_per = fan[cand_et]
        else:
            k_per = np.full(pos.size, int(fanout), dtype=np.int64)
        ntypes = max(len(g.etype_names), 1)
        key = seg * ntypes + cand_et  # one segment per (seed, edge type)
        weights = None
        if prob is not None:
            if prob not in g.edata:
                raise ConfigError(f"prob: no edge data named {prob!r}")
            weights = np.asarray(g.edata[prob], dtype=np.float64)[eids[pos]]
        if replace:
            chosen = self._with_replacement(key, pos, k_per, weights)
        else:
            chosen = self._without_replacement(key, pos, k_per, weights)
        e = eids[chosen]
        src, dst = g.src[e], g.dst[e]
        return Hop(src, dst, e, None if g.etype is None else g.etype[e])

    def _without_replacement(
        self, key: np.ndarray, pos: np.ndarray, k_per: np.ndarray, w: np.ndarray | None
    ) -> np.ndarray:
        r = self.rng.random(pos.size)
        if w is None:
            rank_key = r
        else:  # Efraimidis-Spirakis: smallest -log(U)/w wins; zero weight never
            with np.errstate(divide="ignore"):
                rank_key = np.where(w > 0, -np.log1p(-r) / np.where(w > 0, w, 1.0), np.inf)
        order = np.lexsort((rank_key, key))
        ks = key[order]
        first = np.r_[0, np.flatnonzero(ks[1:] != ks[:-1]) + 1] if ks.size else ks
        seg_start = np.repeat(first, np.diff(np.r_[first, ks.size]))
        rank = np.arange(ks.size) - seg_start
        kk = k_per[order]
        keep = ((kk < 0) | (rank < kk)) & np.isfinite(rank_key[order])
        return np.sort(pos[order[keep]])

    def _with_replacement(
        self, key: np.ndarray, pos: np.ndarray, k_per: np.ndarray, w: np.ndarray | None
    ) -> np.ndarray:
        if pos.size == 0:
            return pos
        first = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1]
        deg = np.diff(np.r_[first, key.size])
        k = k_per[first]
        out_all = pos[(np.repeat(k, deg) < 0)]
        draw = np.where(k < 0, 0, k)
        seg = np.repeat(np.arange(first.size), draw)
        u = self.rng.random(seg.size)
        if w is None:
            idx = first[seg] + np.minimum((u * deg[seg]).astype(np.int64), deg[seg] - 1)
        else:
            cw = np.cumsum(w)
            base = np.r_[0.0, cw][first]
            tot = np.r_[0.0, cw][first + deg] - base
            ok = tot[seg] > 0
            seg, u = seg[ok], u[ok]
            idx = np.searchsorted(cw, base[seg] + u * tot[seg], side="right")
            idx = np.clip(idx, first[seg], first[seg] + deg[seg] - 1)
        return np.concatenate([out_all, pos[idx]])
