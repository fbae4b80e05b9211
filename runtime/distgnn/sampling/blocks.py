"""Blocks (message-flow graphs): one bipartite graph per GNN layer.

A :class:`Block` maps source nodes to destination nodes. As in DGL, the
destination nodes come first among the source nodes, so ``src_nid[:num_dst]
== dst_nid``. Edges are stored in local block indices (``edge_src`` indexes
``src_nid``, ``edge_dst`` indexes ``dst_nid``) together with their global edge
IDs. Relabelling is vectorised: a lookup table over the ID range (O(edges), no
sort) or, for IDs spread over a huge range, ``np.unique`` + ``searchsorted``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from distgnn import native
from distgnn.errors import ConfigError

NID = "_ID"
"""Key of the global node IDs in a block's ``srcdata``/``dstdata`` (DGL's ``dgl.NID``)."""
EID = "_ID"
"""Key of the global edge IDs in a block's ``edata`` (DGL's ``dgl.EID``)."""

ETYPE = "_TYPE"
"""Key of each edge's type index in a homogeneous-ID block's ``edata`` (``dgl.ETYPE``)."""

CanonicalEtype = tuple[str, str, str]


@dataclass(frozen=True)
class BlockTypes:
    """The node and edge types of a heterogeneous graph, and its ID mappings.

    ``src_type``/``src_tid`` of a typed block give each (homogeneous) source node's
    type index and type-wise ID; edges' ``etype`` index ``canonical_etypes``.
    """

    ntypes: tuple[str, ...]
    canonical_etypes: tuple[CanonicalEtype, ...]


@dataclass
class Block:
    """One layer's bipartite graph over global node IDs (DGL's ``DGLBlock`` API).

    Homogeneous fields: ``src_nid``/``dst_nid`` (global IDs, destinations first among
    sources), ``edge_src``/``edge_dst`` (local indices), ``eid`` and ``etype`` (edge-type
    index). A *typed* block (heterogeneous graph) also has ``types`` and, per source
    node, ``src_type`` (node-type index) and ``src_tid`` (type-wise ID); its DGL views
    (``srcdata[NID]``, ``num_src_nodes(ntype)``, ``block[etype]``) are per type.
    """

    src_nid: np.ndarray
    dst_nid: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    eid: np.ndarray
    etype: np.ndarray | None = None
    types: BlockTypes | None = None
    src_type: np.ndarray | None = None
    src_tid: np.ndarray | None = None
    etid: np.ndarray | None = None
    device: Any = field(default_factory=lambda: torch.device("cpu"))
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _frames: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    is_block = True

    # --- sizes (DGL: methods, per type on typed blocks) ---------------------------
    def num_src_nodes(self, ntype: str | None = None) -> int:
        if ntype is None or self.types is None:
            self._check_ntype(ntype)
            return int(self.src_nid.shape[0])
        return int(self._type_counts()[0][self._ntype_index(ntype)])

    def num_dst_nodes(self, ntype: str | None = None) -> int:
        if ntype is None or self.types is None:
            self._check_ntype(ntype)
            return int(self.dst_nid.shape[0])
        return int(self._type_counts()[1][self._ntype_index(ntype)])

    def num_edges(self, etype: str | CanonicalEtype | None = None) -> int:
        if etype is None:
            return int(self.edge_src.shape[0])
        return int(np.count_nonzero(self._etype_ids() == self._etype_index(etype)))

    number_of_src_nodes = num_src_nodes
    number_of_dst_nodes = num_dst_nodes
    number_of_edges = num_edges

    # --- schema --------------------------------------------------------------------
    @property
    def srctypes(self) -> list[str]:
        return ["_N"] if self.types is None else list(self.types.ntypes)

    dsttypes = srctypes

    @property
    def ntypes(self) -> list[str]:
        """DGL's ``ntypes`` of a block: the source types, then the destination types."""
        return self.srctypes + self.dsttypes

    @property
    def canonical_etypes(self) -> list[CanonicalEtype]:
        return [("_N", "_E", "_N")] if self.types is None else list(self.types.canonical_etypes)

    @property
    def etypes(self) -> list[str]:
        return [c[1] for c in self.canonical_etypes]

    def _check_ntype(self, ntype: str | None) -> None:
        if ntype is not None and ntype not in self.srctypes:
            raise ConfigError(f"ntype: unknown node type {ntype!r} (block has {self.srctypes})")

    def _ntype_index(self, ntype: str) -> int:
        self._check_ntype(ntype)
        return self.srctypes.index(ntype)

    def _etype_index(self, etype: str | CanonicalEtype) -> int:
        cets = self.canonical_etypes
        if isinstance(etype, tuple):
            if tuple(etype) in cets:
                return cets.index(tuple(etype))  # type: ignore[arg-type]
        else:
            if ":" in etype and tuple(etype.split(":")) in cets:
                return cets.index(tuple(etype.split(":")))  # type: ignore[arg-type]
            found = [i for i, c in enumerate(cets) if c[1] == etype]
            if len(found) == 1:
                return found[0]
        raise ConfigError(f"etype: unknown or ambiguous edge type {etype!r} (block has {cets})")

    def _etype_ids(self) -> np.ndarray:
        if self.etype is None:
            return np.zeros(self.edge_src.shape[0], dtype=np.int64)
        return np.asarray(self.etype, dtype=np.int64)

    def _type_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Sources and destinations per node type (typed blocks)."""
        if "type_counts" not in self._cache:
            assert self.src_type is not None and self.types is not None
            k = len(self.types.ntypes)
            st = np.asarray(self.src_type, dtype=np.int64)
            self._cache["type_counts"] = (
                np.bincount(st, minlength=k),
                np.bincount(st[: self.dst_nid.shape[0]], minlength=k),
            )
        out: tuple[np.ndarray, np.ndarray] = self._cache["type_counts"]
        return out

    def _typed_local(self) -> np.ndarray:
        """Each source node's position among the sources of its type (typed blocks).

        Destinations are a prefix of the sources, so a destination's position among
        the destinations of its type is the same number.
        """
        if "typed_local" not in self._cache:
            assert self.src_type is not None and self.types is not None
            st = np.asarray(self.src_type, dtype=np.int64)
            order = np.argsort(st, kind="stable")
            counts = np.bincount(st, minlength=len(self.types.ntypes))
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            local = np.empty(st.size, dtype=np.int64)
            local[order] = np.arange(st.size, dtype=np.int64) - np.repeat(starts, counts)
            self._cache["typed_local"] = local
        out: np.ndarray = self._cache["typed_local"]
        return out

    # --- typed views ------------------------------------------------------------------
    def _per_type(self, ids: np.ndarray, count: int) -> dict[str, torch.Tensor]:
        assert self.src_type is not None
        st = np.asarray(self.src_type[:count])
        return {
            t: torch.from_numpy(np.ascontiguousarray(ids[:count][st == i], dtype=np.int64))
            for i, t in enumerate(self.srctypes)
        }

    def _id_frame(self, side: str) -> dict[str, Any]:
        if side == "edge":
            if self.types is None:
                frame: dict[str, Any] = {EID: torch.from_numpy(np.asarray(self.eid, np.int64))}
                if self.etype is not None:
                    frame[ETYPE] = torch.from_numpy(np.asarray(self.etype, dtype=np.int64))
                return frame
            et, tid = self._etype_ids(), self.etid if self.etid is not None else self.eid
            return {
                EID: {
                    c: torch.from_numpy(np.asarray(tid[et == i], dtype=np.int64))
                    for i, c in enumerate(self.canonical_etypes)
                }
            }
        ids = self.src_nid if side == "src" else self.dst_nid
        count = ids.shape[0]
        if self.types is None:
            return {NID: torch.from_numpy(np.asarray(ids, dtype=np.int64))}
        assert self.src_tid is not None
        return {NID: self._per_type(np.asarray(self.src_tid), count)}

    def _frame(self, side: str) -> dict[str, Any]:
        if side not in self._frames:
            self._frames[side] = self._id_frame(side)
        return self._frames[side]

    @property
    def srcdata(self) -> dict[str, Any]:
        """``srcdata[NID]``: global IDs of the sources (a dict per node type on typed blocks)."""
        return self._frame("src")

    @property
    def dstdata(self) -> dict[str, Any]:
        return self._frame("dst")

    @property
    def edata(self) -> dict[str, Any]:
        return self._frame("edge")

    def rel(self, etype: str | CanonicalEtype) -> Block:
        """The sub-block of one edge type: typed local indices, type-wise IDs."""
        if self.types is None:
            self._etype_index(etype)
            return self
        i = self._etype_index(etype)
        key = f"rel:{i}"
        if key not in self._cache:
            stype, _, dtype_ = self.canonical_etypes[i]
            si, di = self.srctypes.index(stype), self.srctypes.index(dtype_)
            sel = np.flatnonzero(self._etype_ids() == i)
            local = self._typed_local()
            assert self.src_type is not None and self.src_tid is not None
            st = np.asarray(self.src_type)
            n_dst = self.dst_nid.shape[0]
            tid = np.asarray(self.src_tid)
            eids = self.etid if self.etid is not None else self.eid
            self._cache[key] = Block(
                src_nid=tid[st == si],
                dst_nid=tid[:n_dst][st[:n_dst] == di],
                edge_src=local[self.edge_src[sel]],
                edge_dst=local[self.edge_dst[sel]],
                eid=np.asarray(eids)[sel],
                device=self.device,
            )
        out: Block = self._cache[key]
        return out

    def __getitem__(self, etype: str | CanonicalEtype) -> Block:
        return self.rel(etype)

    # --- DGL conveniences ---------------------------------------------------------------
    def to(self, device: torch.device | str | None, **_: Any) -> Block:
        """This block with its data on ``device`` (the layers move edges when used)."""
        if device is None:
            return self
        moved = {
            side: {k: _move(v, device) for k, v in frame.items()}
            for side, frame in self._frames.items()
        }
        return replace(self, device=torch.device(device), _cache=self._cache, _frames=moved)

    @property
    def idtype(self) -> torch.dtype:
        """DGL's ID type: a block's IDs are int64 (``srcdata[NID]``, ``edges()``)."""
        return torch.int64

    def long(self) -> Block:
        """DGL's ``block.long()``: this block (its IDs are int64 already)."""
        return self

    def int(self) -> Block:
        """DGL's ``block.int()`` (``[b.int().to(dev) for b in blocks]`` in DGL 0.x
        scripts): this block; its IDs stay int64, which every layer here takes."""
        return self

    def local_var(self) -> Block:
        """A view whose data changes are not seen by this block."""
        return replace(
            self, _cache=self._cache, _frames={k: dict(v) for k, v in self._frames.items()}
        )

    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        """Data written inside the ``with`` block is dropped when it exits."""
        saved = {k: dict(v) for k, v in self._frames.items()}
        try:
            yield
        finally:
            self._frames.clear()
            self._frames.update(saved)

    def edges(
        self, device: torch.device | str | None = None, **_: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` local indices as int64 tensors (cached per device)."""
        key = f"edges:{device}"
        if key not in self._cache:
            s = torch.from_numpy(np.ascontiguousarray(self.edge_src, dtype=np.int64))
            d = torch.from_numpy(np.ascontiguousarray(self.edge_dst, dtype=np.int64))
            if device is not None:
                s, d = s.to(device), d.to(device)
            self._cache[key] = (s, d)
        out: tuple[torch.Tensor, torch.Tensor] = self._cache[key]
        return out

    def etypes_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Edge-type index of every edge (zeros for homogeneous graphs)."""
        t = torch.from_numpy(self._etype_ids())
        return t if device is None else t.to(device)

    def in_degrees(self, device: torch.device | str | None = None) -> torch.Tensor:
        _, d = self.edges(device)
        return torch.bincount(d, minlength=self.num_dst_nodes())

    def out_degrees(self, device: torch.device | str | None = None) -> torch.Tensor:
        s, _ = self.edges(device)
        return torch.bincount(s, minlength=self.num_src_nodes())

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Flat ``name -> array`` form (for passing between processes without pickle)."""
        out = {
            f"{prefix}src_nid": self.src_nid,
            f"{prefix}dst_nid": self.dst_nid,
            f"{prefix}edge_src": self.edge_src,
            f"{prefix}edge_dst": self.edge_dst,
            f"{prefix}eid": self.eid,
        }
        if self.etype is not None:
            out[f"{prefix}etype"] = self.etype
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> Block:
        return cls(
            src_nid=arrays[f"{prefix}src_nid"],
            dst_nid=arrays[f"{prefix}dst_nid"],
            edge_src=arrays[f"{prefix}edge_src"],
            edge_dst=arrays[f"{prefix}edge_dst"],
            eid=arrays[f"{prefix}eid"],
            etype=arrays.get(f"{prefix}etype"),
        )


def _move(v: Any, device: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, dict):
        return {k: _move(x, device) for k, x in v.items()}
    return v


def _positions(sorted_keys: np.ndarray, order: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position in the original (unsorted) key array of each id, or -1 when absent."""
    if sorted_keys.size == 0:
        return np.full(ids.shape, -1, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, ids)
    pos_c = np.minimum(pos, sorted_keys.size - 1)
    found = sorted_keys[pos_c] == ids
    return np.where(found, order[pos_c], -1).astype(np.int64)


# dense relabelling (one lookup table over the ID range) when the ID range is at
# most this many times the work (edges + seeds), or below DENSE_RELABEL_MIN; sort-based
# otherwise. Measured on the benchmark's hops over 1M IDs (thread time, int32 table):
# 4.7k edges 0.39 ms dense vs 0.19 ms sorted, 48k edges 1.3 vs 1.9 ms, 487k edges 3.8
# ms dense; random edges cross over near a ratio of 45. (1M IDs used to be dense always.)
DENSE_RELABEL_FACTOR = 40
DENSE_RELABEL_MIN = 1 << 17
# the native kernel's dense relabelling costs ~n/64 words (bit maps and their ranks, no
# table over the range): against the sorted path it wins up to a ratio of ~500 (random
# IDs, thread time: 4M IDs and 5k edges 0.27 vs 0.23 ms, 1M IDs 0.10 vs 0.23 ms, 16M IDs
# and 50k edges 2.0 vs 2.6 ms, 64M IDs 6.2 vs 2.8 ms)
NATIVE_DENSE_RELABEL_FACTOR = 400


def to_block(
    dst_nid: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray | None,
    eid: np.ndarray,
    etype: np.ndarray | None = None,
    *,
    dst_index: np.ndarray | None = None,
) -> Block:
    """Compact the sampled edges ``src -> dst`` (global IDs) into a block.

    ``dst_nid`` must be unique and contain every ``dst``; the block's source
    nodes are ``dst_nid`` followed by the other sources in ascending ID order.
    ``dst_index`` (positions in ``dst_nid``, in range) may replace ``dst``: it is then
    the block's ``edge_dst`` as it is, no lookup.
    """
    dst_nid = np.asarray(dst_nid, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    if dst_index is not None:
        dst = None
        edge_dst = np.asarray(dst_index, dtype=np.int64)
        if edge_dst.shape != src.shape:
            raise ConfigError("sampled edges: dst_index and src differ in length")
    elif dst is None:
        raise ConfigError("sampled edges: give dst or dst_index")
    ends = (dst_nid, src) if dst is None else (dst_nid, src, np.asarray(dst, dtype=np.int64))
    work = src.size + dst_nid.size
    hi = max(int(a.max(initial=-1)) for a in ends)
    lo = min(int(a.min(initial=0)) for a in ends)
    k = native.kernels()
    factor = DENSE_RELABEL_FACTOR if k is None else NATIVE_DENSE_RELABEL_FACTOR
    dense = lo >= 0 and hi < max(DENSE_RELABEL_MIN, factor * work)
    if dense and k is not None and work < 2**31 - 1:
        try:
            src_nid, edge_src, e_dst = native.relabel(k, dst_nid, src, dst, hi + 1)
        except ValueError as e:  # duplicate seeds, an edge's destination not among them
            raise ConfigError(str(e)) from None
        if e_dst is not None:
            edge_dst = e_dst
    elif dense:
        src_nid, edge_src, edge_dst = _relabel_dense(dst_nid, src, ends[-1], hi + 1, dst is None)
    else:
        src_nid, edge_src, edge_dst = _relabel_sorted(dst_nid, src, ends[-1], dst is None)
    if dst is None:
        edge_dst = np.asarray(dst_index, dtype=np.int64)
    return Block(
        src_nid=src_nid,
        dst_nid=dst_nid,
        edge_src=edge_src,
        edge_dst=edge_dst,
        eid=np.asarray(eid, dtype=np.int64),
        etype=None if etype is None else np.asarray(etype),
    )


def _relabel_dense(
    dst_nid: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int, indexed: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """O(edges + ID range) relabelling with a lookup table (no sort), as DGL's hash map;
    ``indexed``: the destinations are already local (``edge_dst`` is left to the caller)."""
    n_dst = dst_nid.size
    # int32 local IDs when they fit: half the table to fill and to gather from (the
    # 487k-edge hop of the benchmark over 1M IDs: 3.9 vs 5.6 ms)
    itype = np.int32 if n < 2**31 else np.int64
    table = np.full(n, -1, dtype=itype)
    table[dst_nid] = np.arange(n_dst, dtype=itype)
    if n_dst > 1 and not np.array_equal(table[dst_nid], np.arange(n_dst)):
        raise ConfigError("seeds: destination node IDs must be unique")
    edge_dst = dst
    if not indexed:
        edge_dst = np.take(table, dst)  # np.take: faster than fancy indexing for int gathers
        if edge_dst.size and int(edge_dst.min()) < 0:
            raise ConfigError("sampled edges: a destination is not among the seeds")
        edge_dst = edge_dst.astype(np.int64, copy=False)
    seen = np.zeros(n, dtype=bool)
    seen[src] = True
    seen[dst_nid] = False
    new = np.flatnonzero(seen)  # the other sources, ascending
    table[new] = np.arange(n_dst, n_dst + new.size, dtype=itype)
    edge_src = np.take(table, src).astype(np.int64, copy=False)
    return np.concatenate([dst_nid, new]), edge_src, edge_dst


def _relabel_sorted(
    dst_nid: np.ndarray, src: np.ndarray, dst: np.ndarray, indexed: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique`` + ``searchsorted`` relabelling (IDs spread over a huge range)."""
    order = np.argsort(dst_nid, kind="stable")
    sorted_dst = dst_nid[order]
    if sorted_dst.size > 1 and bool(np.any(sorted_dst[1:] == sorted_dst[:-1])):
        raise ConfigError("seeds: destination node IDs must be unique")
    edge_dst = dst
    if not indexed:
        edge_dst = _positions(sorted_dst, order, dst)
        if edge_dst.size and int(edge_dst.min()) < 0:
            raise ConfigError("sampled edges: a destination is not among the seeds")
    uniq, inv = np.unique(src, return_inverse=True)
    pos = _positions(sorted_dst, order, uniq)
    new = pos < 0
    new_local = dst_nid.size + np.cumsum(new) - 1
    local = np.where(new, new_local, pos)
    src_nid = np.concatenate([dst_nid, uniq[new]])
    return src_nid, local[inv.reshape(-1)].astype(np.int64), edge_dst


def blocks_to_arrays(blocks: list[Block]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"num_blocks": np.array(len(blocks), dtype=np.int64)}
    for i, b in enumerate(blocks):
        out.update(b.to_arrays(f"b{i}/"))
    return out


def blocks_from_arrays(arrays: dict[str, np.ndarray]) -> list[Block]:
    n = int(arrays["num_blocks"])
    return [Block.from_arrays(arrays, f"b{i}/") for i in range(n)]
