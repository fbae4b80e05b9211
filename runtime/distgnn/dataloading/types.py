"""Homogeneous <-> per-type IDs for the loaders of heterogeneous graphs.

Sampling runs on homogeneous IDs; the trainer-side loader turns seeds given per node
type into homogeneous IDs and the sampled blocks into typed blocks (DGL's view:
``srcdata[NID]`` per node type, ``block[etype]``), through the partition book.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError
from distgnn.sampling.blocks import Block, BlockTypes


def to_numpy(ids: Any) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = np.asarray(ids)
    if a.dtype == np.bool_:
        return np.flatnonzero(a).astype(np.int64)
    if a.size and a.dtype.kind not in "iu":
        raise ConfigError(f"IDs must be integers, got {a.dtype}")
    return a.reshape(-1).astype(np.int64, copy=False)


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


@dataclass(frozen=True)
class GraphTyping:
    """A heterogeneous graph's types and its partition book's ID maps (DGL's
    ``map_to_per_ntype``/``map_to_homo_nid`` ...); edge-type indices follow
    ``canonical_etypes``."""

    book: Any
    types: BlockTypes

    @property
    def ntypes(self) -> list[str]:
        return list(self.types.ntypes)

    def etype_key(self, etype: Any) -> str:
        """``"SRC:ETYPE:DST"`` of an edge type given by name or canonical triple."""
        cets = list(self.types.canonical_etypes)
        if isinstance(etype, tuple) and tuple(etype) in cets:
            return ":".join(etype)
        if isinstance(etype, str):
            if ":" in etype and tuple(etype.split(":")) in cets:
                return etype
            found = [c for c in cets if c[1] == etype]
            if len(found) == 1:
                return ":".join(found[0])
        raise ConfigError(f"fanouts: unknown or ambiguous edge type {etype!r} (graph has {cets})")

    def homo_seeds(self, nids: Mapping[str, Any]) -> np.ndarray:
        parts = []
        for ntype, ids in nids.items():
            if ntype not in self.types.ntypes:
                raise ConfigError(f"nids: unknown node type {ntype!r} (graph has {self.ntypes})")
            parts.append(_arr(self.book.map_to_homo_nid(to_numpy(ids), ntype)))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def homo_eids(self, eids: Mapping[Any, Any]) -> np.ndarray:
        parts = []
        for etype, ids in eids.items():
            key = self.etype_key(etype)
            parts.append(_arr(self.book.map_to_homo_eid(to_numpy(ids), key)))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def map_nids(self, homo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t, tid = self.book.map_to_per_ntype(homo)
        return _arr(t).astype(np.int64), _arr(tid).astype(np.int64)

    def map_eids(self, homo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t, tid = self.book.map_to_per_etype(homo)
        return _arr(t).astype(np.int64), _arr(tid).astype(np.int64)

    def per_type(self, homo: np.ndarray) -> dict[str, torch.Tensor]:
        """Homogeneous IDs as ``ntype -> type-wise IDs`` (every node type, order kept)."""
        t, tid = self.map_nids(np.asarray(homo, dtype=np.int64))
        return {n: torch.from_numpy(tid[t == i]) for i, n in enumerate(self.ntypes)}

    def type_block(self, b: Block) -> Block:
        """The block with its per-type view filled in (``src_type``/``src_tid``/``etid``)."""
        st, tid = self.map_nids(b.src_nid)
        _, etid = self.map_eids(b.eid) if b.eid.size else (None, np.zeros(0, np.int64))
        b.types, b.src_type, b.src_tid, b.etid = self.types, st, tid, etid
        return b


def graph_typing(g: Any) -> GraphTyping | None:
    """The typing of a heterogeneous DistGraph (None for a homogeneous graph)."""
    get_book = getattr(g, "get_partition_book", None)
    if get_book is None:
        return None
    book = get_book()
    ntypes = tuple(getattr(book, "ntypes", ()) or ())
    cets = tuple(tuple(c) for c in (getattr(book, "canonical_etypes", ()) or ()))
    if len(ntypes) <= 1 and len(cets) <= 1:
        return None
    return GraphTyping(book, BlockTypes(ntypes, cets))
