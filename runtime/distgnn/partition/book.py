"""The partition book: which partition owns a node/edge, and homogeneous <-> type-wise IDs.

Pure NumPy, built from a :class:`~distgnn.partition.manifest.Manifest`; every lookup is
a vectorised ``searchsorted`` over tiny offset arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distgnn.errors import GraphFormatError, IDOutOfRange, UnknownType
from distgnn.partition.manifest import Manifest


@dataclass(frozen=True)
class _Space:
    """One ID space (nodes or edges): partitions x types laid out p-major, type-minor."""

    what: str
    types: list[str]
    offsets: np.ndarray  # (k+1,) homogeneous offsets per partition
    type_offsets: np.ndarray  # (T, k+1) type-wise offsets per partition
    bounds: np.ndarray  # (k*T+1,) homogeneous start of (partition p, type t) at p*T+t

    @classmethod
    def build(
        cls, what: str, types: list[str], offsets: list[int], typed: dict[str, list[int]]
    ) -> _Space:
        off = np.asarray(offsets, dtype=np.int64)
        toff = np.asarray([typed[t] for t in types], dtype=np.int64).reshape(len(types), -1)
        counts = np.diff(toff, axis=1).T.reshape(-1)  # p-major
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(what, types, off, toff, bounds)

    @property
    def total(self) -> int:
        return int(self.offsets[-1])

    def check(self, ids: np.ndarray) -> np.ndarray:
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise GraphFormatError(f"{self.what} IDs must be integers, got {a.dtype}")
        a = a.astype(np.int64, copy=False)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= self.total):
            raise IDOutOfRange(f"{self.what} IDs out of range [0, {self.total})")
        return a

    def partid(self, ids: np.ndarray) -> np.ndarray:
        a = self.check(ids)
        return np.searchsorted(self.offsets, a, side="right").astype(np.int64) - 1

    def to_typed(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self.check(ids)
        seg = np.searchsorted(self.bounds, a, side="right") - 1
        t_count = len(self.types)
        p, t = seg // t_count, seg % t_count
        return t.astype(np.int32), self.type_offsets[t, p] + (a - self.bounds[seg])

    def to_homogeneous(self, t: int, typed_ids: np.ndarray) -> np.ndarray:
        a = np.asarray(typed_ids)
        if a.dtype.kind not in "iu":
            raise GraphFormatError(f"{self.what} IDs must be integers, got {a.dtype}")
        a = a.astype(np.int64, copy=False)
        toff = self.type_offsets[t]
        if a.size and (int(a.min()) < 0 or int(a.max()) >= int(toff[-1])):
            raise GraphFormatError(
                f"{self.what} IDs of type {self.types[t]!r} out of range [0, {int(toff[-1])})"
            )
        p = np.searchsorted(toff, a, side="right") - 1
        return self.bounds[p * len(self.types) + t] + (a - toff[p])


class PartitionBook:
    """Maps global (homogeneous, new) node/edge IDs to partitions and types.

    ``nid2partid``/``eid2partid``: owner partition; ``nid2localnid``: ID inside the owner;
    ``map_nids``/``map_eids``: homogeneous -> (type index, type-wise ID);
    ``to_homogeneous_nids``/``to_homogeneous_eids``: the inverse.
    """

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.num_parts = manifest.num_parts
        self.ntypes = list(manifest.node_types)
        self.etypes = list(manifest.etype_names)
        self.canonical_etypes = list(manifest.edge_types)
        self._n = _Space.build("node", self.ntypes, manifest.node_offsets, manifest.ntype_offsets)
        self._e = _Space.build("edge", self.etypes, manifest.edge_offsets, manifest.etype_offsets)

    # --- sizes and ranges ----------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self._n.total

    @property
    def num_edges(self) -> int:
        return self._e.total

    @property
    def node_offsets(self) -> np.ndarray:
        return self._n.offsets

    @property
    def edge_offsets(self) -> np.ndarray:
        return self._e.offsets

    def ntype_offsets(self, ntype: str) -> np.ndarray:
        """(k+1,) type-wise node offsets of ``ntype`` per partition."""
        return self._n.type_offsets[self.ntype_id(ntype)]

    def etype_offsets(self, etype: str | tuple[str, str, str]) -> np.ndarray:
        return self._e.type_offsets[self.etype_id(etype)]

    def partid2nids(self, part_id: int, ntype: str | None = None) -> np.ndarray:
        """Global IDs owned by ``part_id`` (homogeneous, or type-wise for ``ntype``)."""
        off = self._n.offsets if ntype is None else self.ntype_offsets(ntype)
        return np.arange(off[part_id], off[part_id + 1], dtype=np.int64)

    def partid2eids(self, part_id: int, etype: str | None = None) -> np.ndarray:
        off = self._e.offsets if etype is None else self.etype_offsets(etype)
        return np.arange(off[part_id], off[part_id + 1], dtype=np.int64)

    # --- type names ---------------------------------------------------------
    def ntype_id(self, ntype: str) -> int:
        try:
            return self.ntypes.index(ntype)
        except ValueError:
            raise UnknownType(f"unknown node type {ntype!r}") from None

    def etype_id(self, etype: str | tuple[str, str, str]) -> int:
        name = ":".join(etype) if isinstance(etype, tuple) else etype
        if name in self.etypes:
            return self.etypes.index(name)
        matches = [i for i, c in enumerate(self.canonical_etypes) if c[1] == name]
        if len(matches) == 1:
            return matches[0]
        raise UnknownType(f"unknown or ambiguous edge type {name!r}")

    # --- lookups --------------------------------------------------------------
    def nid2partid(self, nids: np.ndarray) -> np.ndarray:
        return self._n.partid(nids)

    def eid2partid(self, eids: np.ndarray) -> np.ndarray:
        return self._e.partid(eids)

    def nid2localnid(self, nids: np.ndarray, part_id: int) -> np.ndarray:
        """Local ID of owned nodes inside ``part_id`` (``gid - node_offsets[p]``)."""
        return self._n.check(nids) - self._n.offsets[part_id]

    def eid2localeid(self, eids: np.ndarray, part_id: int) -> np.ndarray:
        return self._e.check(eids) - self._e.offsets[part_id]

    def map_nids(self, nids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Homogeneous node IDs -> (node type index, type-wise ID)."""
        return self._n.to_typed(nids)

    def map_eids(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._e.to_typed(eids)

    def to_homogeneous_nids(self, ntype: str, ids: np.ndarray) -> np.ndarray:
        """Type-wise node IDs of ``ntype`` -> homogeneous node IDs."""
        return self._n.to_homogeneous(self.ntype_id(ntype), ids)

    def to_homogeneous_eids(self, etype: str | tuple[str, str, str], ids: np.ndarray) -> np.ndarray:
        return self._e.to_homogeneous(self.etype_id(etype), ids)

    def typed_nid2partid(self, ntype: str, ids: np.ndarray) -> np.ndarray:
        return self.nid2partid(self.to_homogeneous_nids(ntype, ids))
