"""The validated in-memory form of an input graph (:class:`GraphData`)."""

from __future__ import annotations

import contextlib
import hashlib
import mmap
from dataclasses import dataclass, field

import numpy as np

DEFAULT_NTYPE = "_N"
DEFAULT_ETYPE: tuple[str, str, str] = ("_N", "_E", "_N")

CanonicalEtype = tuple[str, str, str]


def etype_str(etype: CanonicalEtype) -> str:
    """``("user", "follows", "user")`` -> ``"user:follows:user"``."""
    return ":".join(etype)


def parse_etype(text: str) -> CanonicalEtype:
    """Inverse of :func:`etype_str`; raises ValueError unless there are exactly 3 parts."""
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"edge type {text!r} is not SRC:ETYPE:DST")
    return (parts[0], parts[1], parts[2])


@dataclass
class GraphData:
    """A validated graph, homogeneous or heterogeneous, in homogeneous ID space.

    Node types are laid end to end in ``node_types`` order (``ntype_offsets``), edge types
    likewise (``etype_offsets``). ``src``/``dst`` are homogeneous IDs (int64, possibly
    memory-mapped). Node/edge data are keyed by node type / ``SRC:ETYPE:DST`` string and
    are in type-wise ID order.
    """

    node_types: list[str]
    edge_types: list[CanonicalEtype]
    num_nodes_per_type: dict[str, int]
    num_edges_per_type: dict[str, int]
    src: np.ndarray
    dst: np.ndarray
    node_data: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    edge_data: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    source: str = ""
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)
    """The raw input arrays by key (for the fingerprint)."""

    @property
    def is_homogeneous(self) -> bool:
        return self.node_types == [DEFAULT_NTYPE] and self.edge_types == [DEFAULT_ETYPE]

    @property
    def num_nodes(self) -> int:
        return int(sum(self.num_nodes_per_type.values()))

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def ntype_offsets(self) -> np.ndarray:
        """(T+1,) start of each node type in homogeneous ID space."""
        counts = [self.num_nodes_per_type[t] for t in self.node_types]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    @property
    def etype_offsets(self) -> np.ndarray:
        """(R+1,) start of each edge type in homogeneous edge ID space."""
        counts = [self.num_edges_per_type[etype_str(e)] for e in self.edge_types]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    def node_type_ids(self) -> np.ndarray:
        """(N,) int32 node type index of every homogeneous node ID."""
        counts = [self.num_nodes_per_type[t] for t in self.node_types]
        return np.repeat(np.arange(len(counts), dtype=np.int32), counts)

    def edge_type_ids(self) -> np.ndarray:
        """(E,) int32 edge type index of every homogeneous edge ID."""
        counts = [self.num_edges_per_type[etype_str(e)] for e in self.edge_types]
        return np.repeat(np.arange(len(counts), dtype=np.int32), counts)

    def to_homogeneous_nid(self, ntype: str, ids: np.ndarray) -> np.ndarray:
        """Type-wise node IDs of ``ntype`` -> homogeneous IDs."""
        t = self.node_types.index(ntype)
        return np.asarray(ids, dtype=np.int64) + self.ntype_offsets[t]

    def fingerprint(self) -> str:
        """sha256 of the input's array names, shapes, dtypes and bytes (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_arrays(self.arrays)
        return self._fingerprint


def _file_region(a: np.ndarray) -> tuple[str, int] | None:
    """(file, byte offset) of a whole-file, C-ordered ``np.memmap`` (not a view of one)."""
    if (
        isinstance(a, np.memmap)
        and isinstance(a.base, mmap.mmap)
        and a.filename
        and a.flags.c_contiguous
    ):
        return str(a.filename), int(a.offset)
    return None


def drop_repeats(sorted_keys: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted 1-D array (``np.unique`` without its sort, which is
    several times slower than NumPy's value sort here); the input itself when none repeat."""
    if sorted_keys.shape[0] < 2:
        return sorted_keys
    keep = np.empty(sorted_keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=keep[1:])
    return sorted_keys if keep.all() else sorted_keys[keep]


def release_pages(*arrays: np.ndarray) -> None:
    """Drop the resident pages of whole-file memory maps (they are re-read on next access).

    Read-only file-backed pages count towards a process's RSS while mapped; releasing
    them before a memory-hungry step (METIS) keeps the peak down. Other arrays: no-op.
    """
    for a in arrays:
        if _file_region(a) is not None and hasattr(mmap, "MADV_DONTNEED"):
            base = a.base
            assert isinstance(base, mmap.mmap)
            with contextlib.suppress(OSError, ValueError):  # best effort
                base.madvise(mmap.MADV_DONTNEED)


def release_rows(a: np.ndarray, lo: int, hi: int) -> None:
    """Drop the resident pages holding rows ``[lo, hi)`` of a whole-file memory map
    (whole pages around them: a neighbouring row touched later is just re-read from the
    page cache). Other arrays: no-op."""
    if _file_region(a) is None or not hasattr(mmap, "MADV_DONTNEED") or hi <= lo:
        return
    base = a.base
    assert isinstance(base, mmap.mmap)
    row = int(a.strides[0]) if a.ndim else int(a.itemsize)
    start_addr = int(np.frombuffer(base, dtype=np.uint8).ctypes.data)
    first = int(a.ctypes.data) - start_addr + lo * row
    last = min(int(a.ctypes.data) - start_addr + hi * row, len(base))
    page = mmap.PAGESIZE
    first -= first % page
    with contextlib.suppress(OSError, ValueError):  # best effort
        base.madvise(mmap.MADV_DONTNEED, first, last - first)


def fingerprint_arrays(arrays: dict[str, np.ndarray], chunk: int = 1 << 20) -> str:
    """sha256 over sorted keys, each with dtype, shape and raw bytes (streamed in chunks).

    Memory-mapped input files are read with plain reads into one reused buffer, so the
    hashed bytes never become resident pages of this process. The buffer is small (1 MiB:
    the partitioner hashes while METIS is at its memory peak); the digest does not depend
    on it.
    """
    h = hashlib.sha256()
    buf: bytearray | None = None
    for key in sorted(arrays):
        a = arrays[key]
        h.update(f"{key}|{a.dtype.str}|{list(a.shape)}\n".encode())
        region = _file_region(a)
        if region is not None:
            buf = buf if buf is not None else bytearray(chunk)
            _hash_file_region(h, region[0], region[1], int(a.nbytes), buf)
            continue
        flat = a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)
        step = max(1, chunk // max(1, flat.itemsize))
        for i in range(0, flat.shape[0], step):
            h.update(np.ascontiguousarray(flat[i : i + step]).view(np.uint8).data)
    return h.hexdigest()


def _hash_file_region(h: hashlib._Hash, path: str, offset: int, size: int, buf: bytearray) -> None:
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        left = size
        while left > 0:
            got = f.readinto(view[: min(left, len(buf))])
            if not got:
                raise OSError(f"{path}: file ended {left} bytes early")
            h.update(view[:got])
            left -= got
