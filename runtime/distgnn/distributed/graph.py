"""``DistGraph``: the whole partitioned graph as DGL users know it.

Node and edge data are :class:`~distgnn.distributed.tensor.DistTensor` views on the servers.
IDs are the partitioned (new) global IDs; ``nodes[ntype]``/``edges[etype]`` data use
type-wise IDs as in DGL. ``DistGraph.standalone(manifest_url)`` loads every partition
in-process (no servers) and supports the same calls.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np
import torch

from distgnn.distributed.context import DistContext, initialize
from distgnn.distributed.tensor import DistTensor, PartPolicy, as_ids, group, resolve_policy
from distgnn.errors import ConfigError
from distgnn.partition.book import PartitionBook
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType


class DataView(MutableMapping[str, DistTensor]):
    """``g.ndata`` / ``g.nodes[t].data``: name -> DistTensor of one node or edge type."""

    def __init__(self, g: DistGraph, policy: PartPolicy) -> None:
        self.g, self.policy = g, policy

    def _names(self, refresh: bool = True) -> dict[str, tuple[str, tuple[int, ...]]]:
        found = {}
        prefix = f"{self.policy.kind}/{self.policy.type_name}/"
        for key, spec in self.g._tensors(refresh).items():
            if key.startswith(prefix) and "." not in key[len(prefix) :]:
                found[key[len(prefix) :]] = (spec["dtype"], tuple(spec["shape"][1:]))
        return found

    def __getitem__(self, name: str) -> DistTensor:
        names = self._names(refresh=False)  # cached: no round trip per batch
        if name not in names:
            names = self._names()
        if name not in names:
            raise KeyError(f"no {self.policy.kind} data {name!r} for {self.policy.type_name}")
        dtype, row = names[name]
        return DistTensor.attach(self.g.ctx, self.policy, name, dtype, row)

    def __setitem__(self, name: str, value: DistTensor) -> None:
        if not isinstance(value, DistTensor) or value.policy.key(name) != value.key:
            raise ConfigError("assign a DistTensor created with this name and policy")

    def __delitem__(self, name: str) -> None:
        raise ConfigError("graph data cannot be deleted through a DistGraph")

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names()))

    def __len__(self) -> int:
        return len(self._names())


class _TypeView:
    def __init__(self, data: DataView) -> None:
        self.data = data


class DistGraph:
    """A distributed graph bound to an explicit :class:`DistContext`."""

    def __init__(self, ctx: DistContext, graph_name: str | None = None, *, own: bool = False):
        if graph_name is not None and graph_name != ctx.manifest.graph_name:
            raise ConfigError(
                f"graph {graph_name!r} requested but the servers hold {ctx.manifest.graph_name!r}"
            )
        self.ctx = ctx
        self.manifest = ctx.manifest
        self.book: PartitionBook = ctx.book
        self._own = own
        self.graph_name = ctx.manifest.graph_name
        self._tensor_cache: dict[str, Any] | None = None

    @classmethod
    def standalone(cls, manifest_url: str) -> DistGraph:
        """Every partition loaded in this process; ``close()`` releases them."""
        return cls(initialize(manifest=manifest_url, standalone=True), own=True)

    def close(self) -> None:
        if self._own:
            self.ctx.close()

    def __enter__(self) -> DistGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema -------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self.manifest.node_types)

    @property
    def etypes(self) -> list[str]:
        return [e[1] for e in self.manifest.edge_types]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [tuple(e) for e in self.manifest.edge_types]  # type: ignore[misc]

    def num_nodes(self, ntype: str | None = None) -> int:
        if ntype is None:
            return int(self.manifest.num_nodes)
        return int(self.book.ntype_offsets(ntype)[-1])

    def num_edges(self, etype: str | tuple[str, str, str] | None = None) -> int:
        if etype is None:
            return int(self.manifest.num_edges)
        return int(self.book.etype_offsets(etype)[-1])

    def number_of_nodes(self, ntype: str | None = None) -> int:
        return self.num_nodes(ntype)

    def number_of_edges(self, etype: str | tuple[str, str, str] | None = None) -> int:
        return self.num_edges(etype)

    def get_partition_book(self) -> PartitionBook:
        return self.book

    # --- data -----------------------------------------------------------------
    def _tensors(self, refresh: bool = True) -> dict[str, Any]:
        """Tensors on the servers (name -> dtype, shape); cached until a refresh."""
        if refresh or self._tensor_cache is None:
            out: dict[str, Any] = {}
            after = None
            while True:  # the server answers in pages
                meta = self.ctx.call(0, Call(MsgType.LIST_TENSORS, {"after": after})).meta
                out.update(meta["tensors"])
                after = meta.get("next")
                if not after:
                    break
            self._tensor_cache = out
        return self._tensor_cache

    @property
    def ndata(self) -> DataView:
        return DataView(self, resolve_policy(self.ctx, "node"))

    @property
    def edata(self) -> DataView:
        return DataView(self, resolve_policy(self.ctx, "edge"))

    @property
    def nodes(self) -> dict[str, _TypeView]:
        return {
            t: _TypeView(DataView(self, resolve_policy(self.ctx, f"node:{t}"))) for t in self.ntypes
        }

    @property
    def edges(self) -> dict[str, _TypeView]:
        out = {}
        for cet in self.manifest.etype_names:
            view = _TypeView(DataView(self, resolve_policy(self.ctx, f"edge:{cet}")))
            out[cet] = view
            out.setdefault(cet.split(":")[1], view)
        return out

    # --- structure ----------------------------------------------------------------
    def _homo_nids(self, ids: Any, ntype: str | None) -> np.ndarray:
        a = as_ids(ids, self.num_nodes(ntype))
        return a if ntype is None else self.book.to_homogeneous_nids(ntype, a)

    def in_degrees(self, v: Any = None, ntype: str | None = None) -> torch.Tensor:
        """In-degrees (all edge types) of nodes ``v`` (all nodes when None)."""
        gid = self._homo_nids(slice(None) if v is None else v, ntype)
        parts = self.book.nid2partid(gid)
        order, b = group(parts, self.ctx.num_parts)
        calls = {}
        for p in range(self.ctx.num_parts):
            if b[p + 1] > b[p]:
                sel = gid[order[b[p] : b[p + 1]]] - self.book.node_offsets[p]
                calls[p] = Call(MsgType.DEGREES, {"dir": "in"}, [sel])
        out = np.empty(len(gid), dtype=np.int64)
        for p, f in self.ctx.call_many(calls).items():
            out[order[b[p] : b[p + 1]]] = f.bufs[0]
        return torch.from_numpy(out)

    def out_degrees(self, u: Any = None, ntype: str | None = None) -> torch.Tensor:
        """Out-degrees: every server counts the edges it owns, the answers are summed."""
        gid = self._homo_nids(slice(None) if u is None else u, ntype)
        frames = self.ctx.call_many(
            {p: Call(MsgType.DEGREES, {"dir": "out"}, [gid]) for p in range(self.ctx.num_parts)}
        )
        out = np.zeros(len(gid), dtype=np.int64)
        for f in frames.values():
            out += f.bufs[0]
        return torch.from_numpy(out)

    def find_edges(
        self, eids: Any, etype: str | tuple[str, str, str] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) homogeneous global node IDs of edges ``eids`` (type-wise with etype)."""
        a = as_ids(eids, self.num_edges(etype))
        gid = a if etype is None else self.book.to_homogeneous_eids(etype, a)
        parts = self.book.eid2partid(gid)
        order, b = group(parts, self.ctx.num_parts)
        calls = {}
        for p in range(self.ctx.num_parts):
            if b[p + 1] > b[p]:
                sel = gid[order[b[p] : b[p + 1]]] - self.book.edge_offsets[p]
                calls[p] = Call(MsgType.FIND_EDGES, {}, [sel])
        src = np.empty(len(gid), dtype=np.int64)
        dst = np.empty(len(gid), dtype=np.int64)
        for p, f in self.ctx.call_many(calls).items():
            sel = order[b[p] : b[p + 1]]
            src[sel], dst[sel] = f.bufs[0], f.bufs[1]
        return torch.from_numpy(src), torch.from_numpy(dst)

    def __repr__(self) -> str:
        mode = "standalone" if self.ctx.standalone else f"{self.ctx.num_parts} servers"
        return (
            f"DistGraph({self.graph_name!r}, nodes={self.num_nodes()}, "
            f"edges={self.num_edges()}, {mode})"
        )
