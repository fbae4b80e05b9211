"""Pair graphs of a heterogeneous graph (DGL's typed ``pair_graph``/``neg_pair_graph``).

Nodes are the output nodes per type (``blocks[-1].dstdata[NID][ntype]``, same order),
edges the scored pairs per canonical edge type. ``ndata[NID]`` holds the nodes' type-wise
IDs in the graph, as DGL's. ``ndata[name]`` and ``edata[name]`` are
dicts by node / edge type; ``apply_edges(func, etype=None)`` runs on one edge type or
all of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from distgnn.dataloading.types import GraphTyping
from distgnn.errors import ConfigError
from distgnn.function import EdgeBatch
from distgnn.sampling.batches import PairGraph
from distgnn.sampling.blocks import EID, NID, Block, CanonicalEtype


class HeteroPairGraph:
    """Scored pairs by edge type over the typed output nodes."""

    is_block = False

    def __init__(
        self,
        num_nodes: dict[str, int],
        edges: dict[CanonicalEtype, tuple[torch.Tensor, torch.Tensor]],
        eids: dict[CanonicalEtype, torch.Tensor] | None = None,
    ) -> None:
        self._n, self._edges = num_nodes, edges
        self.ndata: dict[str, dict[str, torch.Tensor]] = {}
        self.edata: dict[str, dict[CanonicalEtype, torch.Tensor]] = {}
        if eids is not None:
            self.edata[EID] = eids

    @property
    def ntypes(self) -> list[str]:
        return list(self._n)

    @property
    def canonical_etypes(self) -> list[CanonicalEtype]:
        return list(self._edges)

    @property
    def etypes(self) -> list[str]:
        return [c[1] for c in self._edges]

    def _cet(self, etype: Any) -> CanonicalEtype:
        cets = self.canonical_etypes
        if isinstance(etype, tuple) and tuple(etype) in cets:
            return tuple(etype)
        found = [c for c in cets if c[1] == etype or ":".join(c) == etype]
        if len(found) != 1:
            raise ConfigError(f"etype: unknown or ambiguous edge type {etype!r} (has {cets})")
        return found[0]

    def num_nodes(self, ntype: str | None = None) -> int:
        return sum(self._n.values()) if ntype is None else int(self._n.get(ntype, 0))

    def num_edges(self, etype: Any = None) -> int:
        if etype is None:
            return sum(int(s.shape[0]) for s, _ in self._edges.values())
        return int(self._edges[self._cet(etype)][0].shape[0])

    number_of_nodes = num_nodes
    number_of_edges = num_edges

    def edges(self, etype: Any = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` type-wise local node indices of ``etype`` (required with several)."""
        if etype is None:
            if len(self._edges) != 1:
                raise ConfigError("edges: etype is required on a graph with several edge types")
            return next(iter(self._edges.values()))
        return self._edges[self._cet(etype)]

    def apply_edges(self, func: Any, etype: Any = None) -> None:
        """``func`` (a ``distgnn.function`` built-in or a function of an EdgeBatch) on the
        edges of ``etype``, or of every edge type."""
        for cet in [self._cet(etype)] if etype is not None else self.canonical_etypes:
            src, dst = self._edges[cet]
            batch = EdgeBatch(
                src,
                dst,
                {k: v[cet[0]] for k, v in self.ndata.items() if cet[0] in v},
                {k: v[cet[2]] for k, v in self.ndata.items() if cet[2] in v},
                {k: v[cet] for k, v in self.edata.items() if cet in v},
            )
            for name, value in func(batch).items():
                self.edata.setdefault(name, {})[cet] = value

    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        nd = {k: dict(v) for k, v in self.ndata.items()}
        ed = {k: dict(v) for k, v in self.edata.items()}
        try:
            yield
        finally:
            self.ndata, self.edata = nd, ed

    def to(self, device: Any, **_: Any) -> HeteroPairGraph:
        if device is None:
            return self
        out = HeteroPairGraph(
            dict(self._n), {c: (s.to(device), d.to(device)) for c, (s, d) in self._edges.items()}
        )
        out.ndata = {k: {t: x.to(device) for t, x in v.items()} for k, v in self.ndata.items()}
        out.edata = {k: {c: x.to(device) for c, x in v.items()} for k, v in self.edata.items()}
        return out


def typed_pair_graph(
    typing: GraphTyping, last: Block, pairs: PairGraph, etype_of_pair: np.ndarray, with_eids: bool
) -> HeteroPairGraph:
    """``pairs`` (indices into ``last``'s destinations, homogeneous) by edge type, over the
    typed destinations of the typed block ``last``."""
    n_dst = last.num_dst_nodes()
    local = last._typed_local()[:n_dst]
    num = {t: last.num_dst_nodes(t) for t in typing.ntypes}
    src, dst = pairs.src.numpy(), pairs.dst.numpy()
    eid = pairs.edata[EID].numpy() if with_eids else None
    etid = typing.map_eids(eid)[1] if eid is not None and eid.size else eid
    edges, eids = {}, {}
    for i, cet in enumerate(typing.types.canonical_etypes):
        sel = np.flatnonzero(etype_of_pair == i)
        if not sel.size:
            continue
        edges[cet] = (torch.from_numpy(local[src[sel]]), torch.from_numpy(local[dst[sel]]))
        if etid is not None:
            eids[cet] = torch.from_numpy(etid[sel])
    out = HeteroPairGraph(num, edges, eids if with_eids else None)
    nid = last.dstdata[NID]  # type-wise IDs of the output nodes, per type (DGL's ndata[NID])
    out.ndata[NID] = {t: nid[t] for t in typing.ntypes if t in nid}
    return out
