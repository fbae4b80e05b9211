"""DGL's partition book and partition policies over the NumPy :class:`PartitionBook`.

``RangePartitionBook`` offers DGL's ``GraphPartitionBook`` API (torch tensors in and
out): ``partid``, ``num_partitions()``, ``metadata()``, ``nid2partid``, ``eid2partid``,
``partid2nids``, ``partid2eids``, ``nid2localnid``, ``eid2localeid``,
``map_to_per_ntype``, ``map_to_per_etype``, ``map_to_homo_nid``, ``map_to_homo_eid``,
``ntypes``, ``etypes``, ``canonical_etypes``, ``to_canonical_etype``. As in DGL, the
default type ``_N`` (``("_N", "_E", "_N")`` for edges) means homogeneous IDs.

A :class:`PartitionPolicy` says how the rows of a tensor follow one node or edge type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError, GraphFormatError, IDOutOfRange, UnknownType
from distgnn.partition.book import PartitionBook

DEFAULT_NTYPE = "_N"
DEFAULT_ETYPE = ("_N", "_E", "_N")
NODE_PART_POLICY = "node"
EDGE_PART_POLICY = "edge"

Etype = str | tuple[str, str, str]


def to_numpy_ids(ids: Any) -> np.ndarray:
    """IDs (tensor, array, list or int) as a 1-D int64 array."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise ConfigError(f"IDs must be integers, got {a.dtype}")
    return a.reshape(-1).astype(np.int64, copy=False)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a).astype(np.int64, copy=False))


class RangePartitionBook:
    """DGL's range partition book: every partition owns contiguous ID ranges per type."""

    def __init__(self, book: PartitionBook, part_id: int = 0) -> None:
        if not 0 <= part_id < book.num_parts:
            raise ConfigError(f"part_id {part_id} is not in [0, {book.num_parts})")
        self.book = book
        self._partid = int(part_id)

    # --- schema -------------------------------------------------------------
    @property
    def partid(self) -> int:
        """The partition of this process (its trainer's partition)."""
        return self._partid

    def num_partitions(self) -> int:
        return int(self.book.num_parts)

    @property
    def ntypes(self) -> list[str]:
        return list(self.book.ntypes)

    @property
    def etypes(self) -> list[str]:
        return [c[1] for c in self.book.canonical_etypes]

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [tuple(c) for c in self.book.canonical_etypes]  # type: ignore[misc]

    @property
    def is_homogeneous(self) -> bool:
        return len(self.ntypes) == 1 and len(self.canonical_etypes) == 1

    def to_canonical_etype(self, etype: Etype) -> tuple[str, str, str]:
        """The canonical ``(src, etype, dst)`` of an edge type name (must be unique)."""
        known = self.canonical_etypes
        if isinstance(etype, tuple):
            if etype not in known:
                raise UnknownType(f"edge type {etype!r} does not exist")
            return known[known.index(etype)]
        if ":" in etype:
            named = [c for c in known if ":".join(c) == etype]
            if named:
                return named[0]
        found = [c for c in self.canonical_etypes if c[1] == etype]
        if len(found) != 1:
            why = "does not exist" if not found else f"is ambiguous ({found})"
            raise UnknownType(f"edge type {etype!r} {why}")
        return found[0]

    @property
    def node_offsets(self) -> np.ndarray:
        """(DistGNN) homogeneous node ID range of each partition: ``[off[p], off[p+1])``."""
        return self.book.node_offsets

    @property
    def edge_offsets(self) -> np.ndarray:
        """(DistGNN) homogeneous edge ID range of each partition."""
        return self.book.edge_offsets

    def metadata(self) -> list[dict[str, int]]:
        """Per partition: ``machine_id``, ``num_nodes``, ``num_edges`` (DGL's keys)."""
        n, e = self.book.node_offsets, self.book.edge_offsets
        return [
            {"machine_id": p, "num_nodes": int(n[p + 1] - n[p]), "num_edges": int(e[p + 1] - e[p])}
            for p in range(self.num_partitions())
        ]

    # --- sizes and offsets ----------------------------------------------------------
    def _is_homo_ntype(self, ntype: str) -> bool:
        return ntype == DEFAULT_NTYPE

    def _is_homo_etype(self, etype: Etype) -> bool:
        return etype in (DEFAULT_ETYPE, DEFAULT_ETYPE[1], ":".join(DEFAULT_ETYPE))

    def _noffsets(self, ntype: str) -> np.ndarray:
        if self._is_homo_ntype(ntype):
            return self.book.node_offsets
        try:
            return self.book.ntype_offsets(ntype)
        except ConfigError:
            raise  # IDOutOfRange, UnknownType: the trainer's errors already
        except GraphFormatError as e:
            raise ConfigError(str(e)) from None

    def _eoffsets(self, etype: Etype) -> np.ndarray:
        if self._is_homo_etype(etype):
            return self.book.edge_offsets
        return self.book.etype_offsets(self.to_canonical_etype(etype))

    def _num_nodes(self, ntype: str = DEFAULT_NTYPE) -> int:
        return int(self._noffsets(ntype)[-1])

    def _num_edges(self, etype: Etype = DEFAULT_ETYPE) -> int:
        return int(self._eoffsets(etype)[-1])

    # --- lookups ------------------------------------------------------------------
    @staticmethod
    def _owner_of(offsets: np.ndarray, ids: Any, what: str) -> torch.Tensor:
        a = to_numpy_ids(ids)
        if a.size and (int(a.min()) < 0 or int(a.max()) >= int(offsets[-1])):
            raise IDOutOfRange(f"{what} IDs out of range [0, {int(offsets[-1])})")
        return _t(np.searchsorted(offsets, a, side="right") - 1)

    def nid2partid(self, nids: Any, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        return self._owner_of(self._noffsets(ntype), nids, "node")

    def eid2partid(self, eids: Any, etype: Etype = DEFAULT_ETYPE) -> torch.Tensor:
        return self._owner_of(self._eoffsets(etype), eids, "edge")

    def partid2nids(self, partid: int, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        off = self._noffsets(ntype)
        return torch.arange(int(off[partid]), int(off[partid + 1]), dtype=torch.int64)

    def partid2eids(self, partid: int, etype: Etype = DEFAULT_ETYPE) -> torch.Tensor:
        off = self._eoffsets(etype)
        return torch.arange(int(off[partid]), int(off[partid + 1]), dtype=torch.int64)

    def nid2localnid(self, nids: Any, partid: int, ntype: str = DEFAULT_NTYPE) -> torch.Tensor:
        return _t(to_numpy_ids(nids) - int(self._noffsets(ntype)[partid]))

    def eid2localeid(self, eids: Any, partid: int, etype: Etype = DEFAULT_ETYPE) -> torch.Tensor:
        return _t(to_numpy_ids(eids) - int(self._eoffsets(etype)[partid]))

    def map_to_per_ntype(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Homogeneous node IDs -> (node type IDs, type-wise IDs)."""
        try:
            t, i = self.book.map_nids(to_numpy_ids(ids))
        except ConfigError:
            raise  # IDOutOfRange, UnknownType: the trainer's errors already
        except GraphFormatError as e:
            raise ConfigError(str(e)) from None
        return _t(t), _t(i)

    def map_to_per_etype(self, ids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Homogeneous edge IDs -> (edge type IDs, type-wise IDs)."""
        try:
            t, i = self.book.map_eids(to_numpy_ids(ids))
        except ConfigError:
            raise  # IDOutOfRange, UnknownType: the trainer's errors already
        except GraphFormatError as e:
            raise ConfigError(str(e)) from None
        return _t(t), _t(i)

    def map_to_homo_nid(self, ids: Any, ntype: str) -> torch.Tensor:
        """Type-wise node IDs of ``ntype`` -> homogeneous IDs."""
        if self._is_homo_ntype(ntype) and ntype not in self.ntypes:
            return _t(to_numpy_ids(ids))
        try:
            return _t(self.book.to_homogeneous_nids(ntype, to_numpy_ids(ids)))
        except ConfigError:
            raise  # IDOutOfRange, UnknownType: the trainer's errors already
        except GraphFormatError as e:
            raise ConfigError(str(e)) from None

    def map_to_homo_eid(self, ids: Any, etype: Etype) -> torch.Tensor:
        """Type-wise edge IDs of ``etype`` -> homogeneous IDs."""
        c = self.to_canonical_etype(etype)
        try:
            return _t(self.book.to_homogeneous_eids(c, to_numpy_ids(ids)))
        except ConfigError:
            raise  # IDOutOfRange, UnknownType: the trainer's errors already
        except GraphFormatError as e:
            raise ConfigError(str(e)) from None

    def __repr__(self) -> str:
        return (
            f"RangePartitionBook(partid={self.partid}, num_partitions={self.num_partitions()}, "
            f"ntypes={self.ntypes}, etypes={self.canonical_etypes})"
        )


GraphPartitionBook = RangePartitionBook


class PartitionPolicy:
    """How the rows of a tensor map to partitions: those of one node or edge type.

    ``PartitionPolicy(policy_str, partition_book)`` with ``policy_str`` ``"node"``,
    ``"edge"``, ``"node~NTYPE"`` or ``"edge~SRC:ETYPE:DST"`` (DGL's; ``:`` works for ``~``).
    """

    def __init__(self, policy_str: str, partition_book: RangePartitionBook) -> None:
        kind, _sep, rest = policy_str.replace("~", ":").partition(":")
        if kind not in (NODE_PART_POLICY, EDGE_PART_POLICY):
            raise ConfigError(f"part_policy {policy_str!r} must start with 'node' or 'edge'")
        book = partition_book
        if kind == NODE_PART_POLICY:
            if not rest:
                if len(book.ntypes) != 1:
                    raise ConfigError(
                        f"part_policy {policy_str!r} is ambiguous: "
                        f"name a node type of {book.ntypes}"
                    )
                rest = book.ntypes[0]
            if rest not in book.ntypes:
                raise ConfigError(f"part_policy: unknown node type {rest!r}")
            offsets = book.book.ntype_offsets(rest)
        else:
            if not rest:
                if len(book.canonical_etypes) != 1:
                    raise ConfigError(
                        f"part_policy {policy_str!r} is ambiguous: name an edge type of "
                        f"{book.canonical_etypes}"
                    )
                rest = ":".join(book.canonical_etypes[0])
            rest = ":".join(book.to_canonical_etype(rest))
            offsets = book.book.etype_offsets(rest)
        self.kind = kind
        self.type_str = rest  # ntype, or "SRC:ETYPE:DST"
        self.partition_book = book
        self.offsets = np.asarray(offsets, dtype=np.int64)

    # --- DGL's API ------------------------------------------------------------------
    @property
    def policy_str(self) -> str:
        """DGL's form: ``node~NTYPE`` or ``edge~SRC:ETYPE:DST``."""
        return f"{self.kind}~{self.type_str}"

    @property
    def type_name(self) -> str | tuple[str, str, str]:
        """The node type, or the canonical edge type (a tuple), as DGL."""
        if self.is_edge:
            s, e, d = self.type_str.split(":")
            return (s, e, d)
        return self.type_str

    @property
    def part_id(self) -> int:
        return self.partition_book.partid

    @property
    def is_node(self) -> bool:
        return self.kind == NODE_PART_POLICY

    @property
    def is_edge(self) -> bool:
        return self.kind == EDGE_PART_POLICY

    def get_size(self) -> int:
        return int(self.offsets[-1])

    def get_part_size(self) -> int:
        return int(self.offsets[self.part_id + 1] - self.offsets[self.part_id])

    def to_partid(self, ids: Any) -> torch.Tensor:
        return _t(np.searchsorted(self.offsets, to_numpy_ids(ids), side="right") - 1)

    def to_local(self, ids: Any) -> torch.Tensor:
        return _t(to_numpy_ids(ids) - self.offsets[self.part_id])

    def get_data_name(self, name: str) -> str:
        return self.key(name)

    # --- DistGNN ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.get_size()

    def key(self, name: str) -> str:
        """The tensor's name on the servers: ``node/NTYPE/NAME`` or ``edge/S:E:D/NAME``."""
        return f"{self.kind}/{self.type_str}/{name}"

    def part_sizes(self) -> list[int]:
        return np.diff(self.offsets).astype(int).tolist()

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(partition, local row) of each ID; out-of-range IDs raise ConfigError."""
        dtype = np.int16 if len(self.offsets) < 30000 else np.int64
        if not ids.size:
            return np.empty(0, dtype), ids
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.size:
            raise IDOutOfRange(f"{self.kind} IDs out of range [0, {self.size}) for {self.type_str}")
        p_lo, p_hi = np.searchsorted(self.offsets, [lo, hi], side="right") - 1
        if p_lo == p_hi:  # all in one partition (always so with one): no per-ID search
            return np.full(len(ids), p_lo, dtype), ids - self.offsets[p_lo]
        part = np.searchsorted(self.offsets, ids, side="right") - 1
        return part.astype(dtype), ids - self.offsets[part]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionPolicy) and other.policy_str == self.policy_str

    def __hash__(self) -> int:
        return hash(self.policy_str)

    def __repr__(self) -> str:
        return f"PartitionPolicy({self.policy_str!r})"


class NodePartitionPolicy(PartitionPolicy):
    """DGL's ``NodePartitionPolicy(partition_book, ntype="_N")``."""

    def __init__(self, partition_book: RangePartitionBook, ntype: str = DEFAULT_NTYPE) -> None:
        if ntype == DEFAULT_NTYPE and ntype not in partition_book.ntypes:
            super().__init__(NODE_PART_POLICY, partition_book)
        else:
            super().__init__(f"{NODE_PART_POLICY}:{ntype}", partition_book)


class EdgePartitionPolicy(PartitionPolicy):
    """DGL's ``EdgePartitionPolicy(partition_book, etype=("_N", "_E", "_N"))``."""

    def __init__(self, partition_book: RangePartitionBook, etype: Etype = DEFAULT_ETYPE) -> None:
        name = ":".join(etype) if isinstance(etype, tuple) else etype
        super().__init__(f"{EDGE_PART_POLICY}:{name}", partition_book)
