"""``DistGraph``: the whole partitioned graph as DGL users know it.

Node and edge data are :class:`~distgnn.distributed.tensor.DistTensor` views on the
servers. IDs are the partitioned (new) global IDs; ``nodes[ntype]``/``edges[etype]``
data, ``num_nodes(ntype)``, ``find_edges(eids, etype)`` and the partition book's typed
calls use type-wise IDs, as in DGL. ``DistGraph("name")`` uses the context
``initialize()`` made the default; ``DistGraph(ctx=ctx)`` another one;
``DistGraph.standalone(manifest_url)`` (or ``part_config=`` without a context) loads
every partition in-process.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

import numpy as np
import torch

from distgnn.distributed.context import DEFAULT, DistContext, initialize, resolve_ctx
from distgnn.distributed.partition_book import (
    EdgePartitionPolicy,
    NodePartitionPolicy,
    PartitionPolicy,
    RangePartitionBook,
)
from distgnn.distributed.subgraph import SubGraph, relabel
from distgnn.distributed.tensor import DistTensor, as_ids, group, resolve_policy
from distgnn.errors import ConfigError, UnknownType
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType

Etype = str | tuple[str, str, str]


class Scheme(NamedTuple):
    """Shape of one row and dtype of a node or edge field (DGL's ``Scheme``)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


class DataView(MutableMapping[str, DistTensor]):
    """``g.ndata`` / ``g.nodes[t].data``: name -> DistTensor of one node or edge type.

    Assigning a DistTensor (``g.ndata["h"] = DistTensor(...)``) names it in this
    process's view, as in DGL (other trainers see it under its own name).
    """

    def __init__(self, g: DistGraph, policy: PartitionPolicy) -> None:
        self.g, self.policy = g, policy

    def _local(self) -> dict[str, DistTensor]:
        return self.g._aliases.setdefault(self.policy.policy_str, {})

    def _names(self, refresh: bool = True) -> dict[str, tuple[str, tuple[int, ...]]]:
        found = {}
        prefix = f"{self.policy.kind}/{self.policy.type_str}/"
        for key, spec in self.g._tensors(refresh).items():
            if key.startswith(prefix) and "." not in key[len(prefix) :]:
                found[key[len(prefix) :]] = (spec["dtype"], tuple(spec["shape"][1:]))
        return found

    def __getitem__(self, name: str) -> DistTensor:
        local = self._local()
        if name in local:
            return local[name]
        names = self._names(refresh=False)  # cached: no round trip per batch
        if name not in names:
            names = self._names()
        if name not in names:
            raise KeyError(f"no {self.policy.kind} data {name!r} for {self.policy.type_str}")
        dtype, row = names[name]
        return DistTensor.view(self.g.ctx, self.policy, name, dtype, row)

    def __contains__(self, name: object) -> bool:
        return name in self._local() or name in self._names()

    def __setitem__(self, name: str, value: DistTensor) -> None:
        if not isinstance(value, DistTensor):
            raise ConfigError(
                f"{self.policy.kind} data {name!r}: assign a DistTensor (create one with "
                "DistTensor(shape, dtype, ...) and write rows into it)"
            )
        if value.policy != self.policy:
            raise ConfigError(
                f"{self.policy.kind} data {name!r}: the DistTensor follows "
                f"{value.policy.policy_str}, not {self.policy.policy_str}"
            )
        self._local()[name] = value

    def __delitem__(self, name: str) -> None:
        local = self._local()
        if name not in local:
            raise ConfigError("graph data cannot be deleted through a DistGraph")
        del local[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._names()) | set(self._local())))

    def __len__(self) -> int:
        return len(set(self._names()) | set(self._local()))

    def __repr__(self) -> str:
        return repr({k: f"DistTensor(shape={self[k].shape}, dtype={self[k].dtype})" for k in self})


class _Space(NamedTuple):
    data: DataView


class _TypeViews:
    """``g.nodes`` / ``g.edges``: ``[type].data``; an unknown type raises ConfigError."""

    def __init__(self, g: DistGraph, kind: str) -> None:
        self.g, self.kind = g, kind

    def __getitem__(self, key: Etype) -> _Space:
        book = self.g.get_partition_book()
        if self.kind == "node":
            if not isinstance(key, str) or key not in book.ntypes:
                raise UnknownType(f"node type {key!r} does not exist (node types: {book.ntypes})")
            return _Space(DataView(self.g, NodePartitionPolicy(book, key)))
        return _Space(DataView(self.g, EdgePartitionPolicy(book, book.to_canonical_etype(key))))


class DistGraph:
    """DGL's ``DistGraph(graph_name, gpb=None, part_config=None)`` (see the module doc)."""

    def __init__(
        self,
        graph_name: str | None = None,
        gpb: RangePartitionBook | None = None,
        part_config: str | None = None,
        *,
        ctx: DistContext | None = None,
        own: bool = False,
    ) -> None:
        if graph_name is not None and not isinstance(graph_name, str):
            raise ConfigError(
                f"DistGraph: graph_name must be a str, not {type(graph_name).__name__} "
                "(DGL's signature: DistGraph(graph_name, gpb=None, part_config=None); "
                "pass a context as ctx=...)"
            )
        if ctx is None and DEFAULT.ctx is None and part_config is not None:
            ctx, own = initialize(manifest=part_config, standalone=True), True
        self.ctx = resolve_ctx(ctx)
        if graph_name is not None and graph_name != self.ctx.manifest.graph_name:
            if own:
                self.ctx.close()  # the partitions part_config= loaded for this graph
            raise ConfigError(
                f"DistGraph: graph {graph_name!r} requested but the "
                f"{'partitions loaded' if self.ctx.standalone else 'servers'} hold graph "
                f"{self.ctx.manifest.graph_name!r}"
            )
        self.manifest = self.ctx.manifest
        self.book = self.ctx.book
        self._own = own
        self.graph_name = self.manifest.graph_name
        self._tensor_cache: dict[str, Any] | None = None
        self._aliases: dict[str, dict[str, DistTensor]] = {}

    @classmethod
    def standalone(cls, manifest_url: str) -> DistGraph:
        """Every partition loaded in this process; ``close()`` releases them."""
        return cls(ctx=initialize(manifest=manifest_url, standalone=True), own=True)

    def close(self) -> None:
        if self._own:
            self.ctx.close()

    def __enter__(self) -> DistGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- process ------------------------------------------------------------------
    def rank(self) -> int:
        """This trainer's rank (``RANK``)."""
        return self.ctx.rank

    def barrier(self) -> None:
        """Wait until every trainer called ``barrier()``."""
        self.ctx.barrier()

    @property
    def _client(self) -> DistContext:
        """DGL's private ``DistGraph._client``, which DGL's own examples call
        (``g._client.barrier()``): the context, whose ``barrier()`` is ``g.barrier()``."""
        return self.ctx

    @property
    def idtype(self) -> torch.dtype:
        return torch.int64

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def is_pinned(self) -> bool:
        return False

    @property
    def local_partition(self) -> None:
        """None: trainers never map a server's partition (servers run in their own pods),
        as DGL's ``local_partition`` when clients and servers are on separate machines."""
        return None

    # --- schema ---------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self.manifest.node_types)

    @property
    def etypes(self) -> list[str]:
        return [e[1] for e in self.manifest.edge_types]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [tuple(e) for e in self.manifest.edge_types]  # type: ignore[misc]

    def to_canonical_etype(self, etype: Etype) -> tuple[str, str, str]:
        return self.get_partition_book().to_canonical_etype(etype)

    def get_ntype_id(self, ntype: str | None) -> int:
        if ntype is None:
            if len(self.ntypes) != 1:
                raise ConfigError("ntype must be given: the graph has several node types")
            return 0
        if ntype not in self.ntypes:
            raise UnknownType(f"node type {ntype!r} does not exist")
        return self.ntypes.index(ntype)

    def get_etype_id(self, etype: Etype | None) -> int:
        if etype is None:
            if len(self.canonical_etypes) != 1:
                raise ConfigError("etype must be given: the graph has several edge types")
            return 0
        return self.canonical_etypes.index(self.to_canonical_etype(etype))

    def num_nodes(self, ntype: str | None = None) -> int:
        if ntype is None:
            return int(self.manifest.num_nodes)
        return self.get_partition_book()._num_nodes(ntype)

    def num_edges(self, etype: Etype | None = None) -> int:
        if etype is None:
            return int(self.manifest.num_edges)
        return int(self.book.etype_offsets(self.to_canonical_etype(etype))[-1])

    def number_of_nodes(self, ntype: str | None = None) -> int:
        return self.num_nodes(ntype)

    def number_of_edges(self, etype: Etype | None = None) -> int:
        return self.num_edges(etype)

    def get_partition_book(self) -> RangePartitionBook:
        return self.ctx.partition_book

    def get_node_partition_policy(self, ntype: str) -> PartitionPolicy:
        return NodePartitionPolicy(self.get_partition_book(), ntype)

    def get_edge_partition_policy(self, etype: Etype) -> PartitionPolicy:
        book = self.get_partition_book()
        return EdgePartitionPolicy(book, book.to_canonical_etype(etype))

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
        """Node data of the only node type (several types: use ``nodes[ntype].data``)."""
        if len(self.ntypes) > 1:  # DGL refuses too
            raise ConfigError(
                f"g.ndata: the graph has node types {self.ntypes}; use "
                "g.nodes[NTYPE].data (DGL's ndata works for one node type only)"
            )
        return DataView(self, resolve_policy(self.ctx, "node"))

    @property
    def edata(self) -> DataView:
        """Edge data of the only edge type (several types: use ``edges[etype].data``)."""
        if len(self.canonical_etypes) > 1:
            raise ConfigError(
                f"g.edata: the graph has edge types {self.etypes}; use "
                "g.edges[ETYPE].data (DGL's edata works for one edge type only)"
            )
        return DataView(self, resolve_policy(self.ctx, "edge"))

    @property
    def nodes(self) -> _TypeViews:
        return _TypeViews(self, "node")

    @property
    def edges(self) -> _TypeViews:
        return _TypeViews(self, "edge")

    def _schemes(self, view: DataView) -> dict[str, Scheme]:
        return {k: Scheme(tuple(view[k].shape[1:]), view[k].dtype) for k in view}

    def node_attr_schemes(self) -> dict[str, Scheme]:
        return self._schemes(self.ndata)

    def edge_attr_schemes(self) -> dict[str, Scheme]:
        return self._schemes(self.edata)

    # --- structure ----------------------------------------------------------------
    def _homo_nids(self, ids: Any, ntype: str | None) -> np.ndarray:
        a = as_ids(ids, self.num_nodes(ntype))
        return a if ntype is None else self.book.to_homogeneous_nids(ntype, a)

    def in_degrees(self, v: Any = None, ntype: str | None = None) -> torch.Tensor | int:
        """In-degrees (all edge types) of nodes ``v`` (all nodes when None); an ``int``
        for an integer ``v``, as DGL documents."""
        if isinstance(v, numbers.Integral):
            return int(self._in_degrees(torch.tensor([int(v)]), ntype)[0])
        return self._in_degrees(v, ntype)

    def _in_degrees(self, v: Any, ntype: str | None) -> torch.Tensor:
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

    def out_degrees(self, u: Any = None, ntype: str | None = None) -> torch.Tensor | int:
        """Out-degrees: every server counts the edges it owns, the answers are summed (an
        ``int`` for an integer ``u``, as DGL documents)."""
        if isinstance(u, numbers.Integral):
            return int(self._out_degrees(torch.tensor([int(u)]), ntype)[0])
        return self._out_degrees(u, ntype)

    def _out_degrees(self, u: Any, ntype: str | None) -> torch.Tensor:
        gid = self._homo_nids(slice(None) if u is None else u, ntype)
        frames = self.ctx.call_many(
            {p: Call(MsgType.DEGREES, {"dir": "out"}, [gid]) for p in range(self.ctx.num_parts)}
        )
        out = np.zeros(len(gid), dtype=np.int64)
        for f in frames.values():
            out += f.bufs[0]
        return torch.from_numpy(out)

    def _find_homo(self, gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
        return src, dst

    def find_edges(self, edges: Any, etype: Etype | None = None) -> tuple[torch.Tensor, ...]:
        """``(src, dst)`` of edges ``edges`` (type-wise IDs of ``etype`` on typed graphs).

        As in DGL, node IDs are type-wise when the graph has several node types, and
        ``etype`` is required when it has several edge types.
        """
        if etype is None and len(self.canonical_etypes) > 1:
            raise ConfigError("find_edges: etype is required on a graph with several edge types")
        a = as_ids(edges, self.num_edges(etype))
        gid = (
            a if etype is None else self.book.to_homogeneous_eids(self.to_canonical_etype(etype), a)
        )
        src, dst = self._find_homo(gid)
        if len(self.ntypes) > 1:
            src, dst = self.book.map_nids(src)[1], self.book.map_nids(dst)[1]
        return torch.from_numpy(src), torch.from_numpy(dst)

    def edge_subgraph(
        self, edges: Any, relabel_nodes: bool = True, store_ids: bool = True
    ) -> SubGraph:
        """The subgraph of the given edges (a dict by edge type on typed graphs).

        ``edata[EID]`` holds the edges' IDs; with ``relabel_nodes`` only incident nodes
        are kept (``ndata[NID]``: their IDs in this graph).
        """
        if not store_ids:
            raise ConfigError("edge_subgraph always stores the original IDs (store_ids=True)")
        if isinstance(edges, dict):
            gids = [
                self.book.to_homogeneous_eids(
                    self.to_canonical_etype(et), as_ids(e, self.num_edges(et))
                )
                for et, e in edges.items()
            ]
            gid = np.concatenate(gids) if gids else np.empty(0, np.int64)
        else:
            if len(self.canonical_etypes) > 1:
                raise ConfigError("edge_subgraph: pass {etype: edge IDs} on a typed graph")
            gid = as_ids(edges, self.num_edges())
        src, dst = self._find_homo(gid)
        et = self.book.map_eids(gid)[0] if len(gid) else np.empty(0, np.int32)
        cols = [torch.from_numpy(x) for x in (src, dst, gid, et.astype(np.int64))]
        return relabel(self, *cols) if relabel_nodes else SubGraph(self, *cols)

    def sample_neighbors(
        self,
        seed_nodes: Any,
        fanout: Any,
        edge_dir: str = "in",
        prob: str | None = None,
        exclude_edges: Any = None,
        replace: bool = False,
        etype_sorted: bool = True,
        output_device: Any = None,
    ) -> SubGraph:
        """DGL's ``DistGraph.sample_neighbors`` (see :func:`sample_neighbors`)."""
        from distgnn.distributed.sampling import sample_neighbors

        return sample_neighbors(
            self, seed_nodes, fanout, edge_dir, prob, exclude_edges, replace, etype_sorted,
            output_device,
        )  # fmt: skip

    def __repr__(self) -> str:
        mode = "standalone" if self.ctx.standalone else f"{self.ctx.num_parts} servers"
        return (
            f"DistGraph({self.graph_name!r}, nodes={self.num_nodes()}, "
            f"edges={self.num_edges()}, {mode})"
        )
