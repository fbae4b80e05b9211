"""A small graph of sampled or selected edges, what DGL returns as a ``DGLGraph``.

``sample_neighbors``, ``sample_etype_neighbors``, ``in_subgraph`` and
``DistGraph.edge_subgraph`` return a :class:`SubGraph`: ``edges()``, ``num_edges()``,
``edata[EID]``, ``num_nodes()`` and, on heterogeneous graphs, per-type views
(``edges(etype=...)``, ``edata[EID]`` as a dict keyed by canonical edge type) with
type-wise IDs, as DGL's frontier has. The homogeneous columns are kept as ``src``,
``dst``, ``eid`` and ``etype`` (global homogeneous IDs, edge-type index), which is
what the block builders of :mod:`distgnn.sampling` consume.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from distgnn.errors import ConfigError

NID = "_ID"
EID = "_ID"
Etype = str | tuple[str, str, str]


class _Data(Mapping[str, Any]):
    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class SubGraph:
    """Edges of a distributed graph with their IDs (see the module doc)."""

    def __init__(
        self,
        g: Any,
        src: torch.Tensor,
        dst: torch.Tensor,
        eid: torch.Tensor,
        etype: torch.Tensor,
        node_ids: torch.Tensor | None = None,
    ) -> None:
        self.g = g
        self.src, self.dst, self.eid, self.etype = src, dst, eid, etype
        self._node_ids = node_ids  # relabelled subgraph: local node i is node_ids[i]
        self.book = g.get_partition_book()
        self.hetero = len(self.book.canonical_etypes) > 1 or len(self.book.ntypes) > 1

    # --- schema ---------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self.book.ntypes)

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return list(self.book.canonical_etypes)

    @property
    def etypes(self) -> list[str]:
        return [c[1] for c in self.canonical_etypes]

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    def in_degrees(self, v: Any = None, etype: Etype | None = None) -> torch.Tensor:
        """In-degrees in this subgraph of nodes ``v`` (IDs as ``edges()`` returns them)."""
        _src, dst = (
            self.edges(etype=etype)
            if etype is not None or not self.hetero
            else (self.src, self.dst)
        )
        n = self.num_nodes() if not self.hetero else int(dst.max()) + 1 if len(dst) else 0
        deg = torch.bincount(dst, minlength=n)
        return deg if v is None else deg[torch.as_tensor(v, dtype=torch.int64)]

    def out_degrees(self, u: Any = None, etype: Etype | None = None) -> torch.Tensor:
        src, _dst = (
            self.edges(etype=etype)
            if etype is not None or not self.hetero
            else (self.src, self.dst)
        )
        n = self.num_nodes() if not self.hetero else int(src.max()) + 1 if len(src) else 0
        deg = torch.bincount(src, minlength=n)
        return deg if u is None else deg[torch.as_tensor(u, dtype=torch.int64)]

    def num_nodes(self, ntype: str | None = None) -> int:
        if self._node_ids is not None:
            return len(self._node_ids)
        return int(self.g.num_nodes(ntype))

    number_of_nodes = num_nodes

    def _select(self, etype: Etype | None) -> tuple[np.ndarray | None, int | None]:
        if etype is None:
            if self.hetero and len(self.canonical_etypes) > 1:
                return None, None
            return None, 0
        c = self.book.to_canonical_etype(etype)
        t = self.canonical_etypes.index(c)
        return (self.etype == t).numpy(), t

    def num_edges(self, etype: Etype | None = None) -> int:
        sel, _ = self._select(etype)
        return len(self.eid) if sel is None else int(sel.sum())

    number_of_edges = num_edges

    # --- edges ---------------------------------------------------------------------------
    def _typed_nodes(self, ids: torch.Tensor) -> torch.Tensor:
        return self.book.map_to_per_ntype(ids)[1] if len(self.book.ntypes) > 1 else ids

    @property
    def edges(self) -> EdgeView:
        """``edges(form, order, etype)`` (see :meth:`_edges`) and, as on DGL's graphs,
        ``edges[etype].data[EID]``."""
        return EdgeView(self)

    def _edges(
        self, form: str = "uv", order: str = "eid", etype: Etype | None = None
    ) -> tuple[torch.Tensor, ...]:
        """``(src, dst)`` (``form="all"``: ``(src, dst, eid)``) of one edge type.

        IDs are type-wise on heterogeneous graphs (``etype`` required when there are
        several edge types), homogeneous global IDs otherwise; in a relabelled
        ``edge_subgraph`` node IDs are local (``ndata[NID]`` maps them back).
        """
        if form not in ("uv", "all", "eid"):
            raise ConfigError(f"form must be 'uv', 'all' or 'eid', got {form!r}")
        sel, t = self._select(etype)
        if t is None:
            raise ConfigError("edges(): name an etype (the graph has several edge types)")
        src, dst, eid = self.src, self.dst, self.eid
        if sel is not None:
            m = torch.from_numpy(sel)
            src, dst, eid = src[m], dst[m], eid[m]
        if self._node_ids is None:
            src, dst = self._typed_nodes(src), self._typed_nodes(dst)
        if self.hetero:
            eid = self.book.map_to_per_etype(eid)[1]
        if form == "eid":
            return (eid,)
        return (src, dst) if form == "uv" else (src, dst, eid)

    def find_edges(self, eids: Any, etype: Etype | None = None) -> tuple[torch.Tensor, ...]:
        src, dst = self.edges(etype=etype)
        idx = torch.as_tensor(eids, dtype=torch.int64)
        return src[idx], dst[idx]

    @property
    def edata(self) -> Mapping[str, Any]:
        """``edata[EID]``: edge IDs in the parent graph (dict by canonical type if typed)."""
        if not self.hetero:
            return _Data({EID: self.eid})
        out = {}
        for c in self.canonical_etypes:
            if self.num_edges(c):
                out[c] = self.edges(form="all", etype=c)[2]
        return _Data({EID: out})

    @property
    def ndata(self) -> Mapping[str, Any]:
        """``ndata[NID]`` of a relabelled subgraph: parent node ID of each local node."""
        return _Data({} if self._node_ids is None else {NID: self._node_ids})

    def __repr__(self) -> str:
        return f"SubGraph(num_nodes={self.num_nodes()}, num_edges={self.num_edges()})"


class EdgeSpace(NamedTuple):
    """``g.edges[etype]``: the edge data of one edge type (DGL's ``EdgeSpace``)."""

    data: Mapping[str, Any]


class EdgeView:
    """``sg.edges``: called, the edges' endpoints; indexed by an edge type, its data."""

    def __init__(self, sg: SubGraph) -> None:
        self._sg = sg

    def __call__(
        self, form: str = "uv", order: str = "eid", etype: Etype | None = None
    ) -> tuple[torch.Tensor, ...]:
        return self._sg._edges(form, order, etype)

    def __getitem__(self, etype: Etype) -> EdgeSpace:
        (eid,) = self._sg._edges("eid", etype=etype)
        return EdgeSpace(_Data({EID: eid}))


def relabel(
    g: Any, src: torch.Tensor, dst: torch.Tensor, eid: torch.Tensor, etype: torch.Tensor
) -> SubGraph:
    """An edge subgraph over only its incident nodes (local IDs in ascending parent order)."""
    both = torch.cat([src, dst]).numpy()
    nodes = np.unique(both)
    local = np.searchsorted(nodes, both)
    n = len(src)
    return SubGraph(
        g,
        torch.from_numpy(local[:n]),
        torch.from_numpy(local[n:]),
        eid,
        etype,
        node_ids=torch.from_numpy(nodes),
    )
