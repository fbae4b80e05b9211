"""Load one partition (only its own files), verifying every file against the manifest.

Files that lie are refused with a :class:`~distgnn.errors.PartitionDataError` naming the
file: symlinks out of the partition folder, FIFOs and devices, sizes or checksums that
differ, and arrays whose dtype, byte order, shape or index ranges contradict the manifest.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import posixpath
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distgnn import npy, storage
from distgnn.errors import ConfigError, DistGNNError, PartitionDataError, StorageError
from distgnn.partition.book import PartitionBook
from distgnn.partition.manifest import FileInfo, Manifest

REQUIRED = (
    "graph/indptr.npy",
    "graph/indices.npy",
    "graph/eid.npy",
    "graph/halo_nid.npy",
    "graph/orig_nid.npy",
    "graph/orig_eid.npy",
)


MAX_MANIFEST_BYTES = 64 << 20
"""Largest partition manifest read (a 1,024-part manifest is a few MiB)."""
_CHUNK = 4 << 20


def load_manifest(url: str, storage_options: Mapping[str, Any] | None = None) -> Manifest:
    """Read and validate ``NAME.json`` (StorageError if unreadable, ManifestError if bad)."""
    data = storage.read_bytes(url, storage_options, max_bytes=MAX_MANIFEST_BYTES)
    return Manifest.from_json(data, storage.redact(url))


class LoadCancelled(DistGNNError):
    """Loading was stopped by the caller (the server got SIGTERM)."""


@dataclass
class Partition:
    """One partition's local graph and data (see docs/partition-format.md)."""

    manifest: Manifest
    book: PartitionBook
    part_id: int
    indptr: np.ndarray
    indices: np.ndarray
    eid: np.ndarray
    etype: np.ndarray | None
    halo_nid: np.ndarray
    orig_nid: np.ndarray
    orig_eid: np.ndarray
    node_data: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    edge_data: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def num_owned_nodes(self) -> int:
        return int(self.orig_nid.shape[0])

    @property
    def num_local_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_owned_edges(self) -> int:
        return int(self.orig_eid.shape[0])

    @property
    def node_offset(self) -> int:
        return int(self.manifest.node_offsets[self.part_id])

    @property
    def local2global(self) -> np.ndarray:
        """(L,) new global ID of every local node (owned, then halo)."""
        owned = np.arange(self.node_offset, self.node_offset + self.num_owned_nodes)
        return np.concatenate([owned, self.halo_nid]).astype(np.int64)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _open_local(path: str, root: str, info: FileInfo, where: str) -> int:
    """An fd of a regular file inside ``root`` (real paths) of exactly ``info.bytes``.

    ``O_NONBLOCK``: opening a FIFO never waits for a writer; it is then refused as not a
    regular file. The folder check uses the opened file's real path, so a symlink out of
    the partition folder (``/dev/zero``, ``/etc/...``) is refused whatever it points to.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise PartitionDataError(f"{where}: partition file is missing") from e
    except OSError as e:
        raise StorageError(f"{where}: {e.strerror or e}") from e
    try:
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            real = os.path.realpath(path)
        if not _inside(real, root):
            raise PartitionDataError(f"{where}: resolves outside the partition folder ({real})")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PartitionDataError(f"{where}: not a regular file")
        if st.st_size != info.bytes:
            raise PartitionDataError(
                f"{where}: size {st.st_size} != {info.bytes} bytes in the manifest"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_exact(
    read: Any, info: FileInfo, where: str, cancel: Callable[[], bool] | None
) -> tuple[np.ndarray, str]:
    """Read exactly ``info.bytes`` (one more is an error) into one buffer, hashing the
    bytes as they arrive: the checksum covers the very bytes the arrays are built from."""
    buf = np.empty(info.bytes, dtype=np.uint8)
    view = memoryview(buf.data)
    h = hashlib.sha256()
    pos = 0
    while pos < info.bytes:
        if cancel is not None and cancel():
            raise LoadCancelled(f"{where}: loading stopped")
        n = read(view[pos : pos + _CHUNK])
        if not n:
            raise PartitionDataError(
                f"{where}: size {pos} != {info.bytes} bytes in the manifest (truncated)"
            )
        h.update(view[pos : pos + n])
        pos += n
    extra = bytearray(1)
    if read(memoryview(extra)):
        raise PartitionDataError(f"{where}: larger than {info.bytes} bytes in the manifest")
    if h.hexdigest() != info.sha256:
        raise PartitionDataError(f"{where}: sha256 mismatch (file corrupted or replaced)")
    return buf, where


def _read_verified(
    base: str,
    rel: str,
    info: FileInfo,
    storage_options: Mapping[str, Any] | None,
    root: str | None,
    cancel: Callable[[], bool] | None = None,
) -> np.ndarray:
    """The array of one partition file, read once, size- and sha256-checked."""
    url = storage.join(base, rel)
    where = storage.redact(url)
    if root is not None:
        fd = _open_local(storage.local_path(url), root, info, where)
        try:
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                buf, _ = _read_exact(f.readinto, info, where, cancel)
        except OSError as e:
            raise StorageError(f"{where}: {e.strerror or e}") from e
        finally:
            os.close(fd)
    else:
        fs, path = storage.get_fs(url, storage_options)
        try:
            with storage.errors_for(url), fs.open(path, "rb") as f:
                size = getattr(f, "size", None)
                if size is not None and size != info.bytes:
                    raise PartitionDataError(
                        f"{where}: size {size} != {info.bytes} bytes in the manifest"
                    )
                buf, _ = _read_exact(f.readinto, info, where, cancel)
        except StorageError as e:
            if "not found" in str(e):
                raise PartitionDataError(f"{where}: partition file is missing") from e
            raise
    return _parse_npy(buf, where)


def _parse_npy(buf: np.ndarray, where: str) -> np.ndarray:
    """A view of the ``.npy`` array in ``buf``: header checked, no pickle, exact size."""
    head = io.BytesIO(buf[: 16 + 65536].tobytes())
    try:
        shape, fortran, dtype = npy.read_header(head)
    except Exception as e:  # untrusted header text: ValueError, SyntaxError, TokenError...
        raise PartitionDataError(f"{where}: not a readable .npy file ({str(e)[:200]})") from e
    if dtype.hasobject:
        raise PartitionDataError(f"{where}: object arrays are refused")
    if fortran and len(shape) > 1:
        raise PartitionDataError(f"{where}: Fortran-ordered arrays are not supported")
    count = math.prod(int(x) for x in shape)
    offset = head.tell()
    if offset + count * dtype.itemsize != buf.nbytes:
        raise PartitionDataError(
            f"{where}: header says {shape} x {dtype} but the file holds "
            f"{buf.nbytes - offset} data bytes"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=offset).reshape(shape)


def _root_of(base: str) -> str | None:
    """Real path of a local partition folder (files must resolve inside it); None if remote."""
    if not storage.is_local(base):
        return None
    return os.path.realpath(storage.local_path(base))


def load_partition(
    manifest_url: str,
    part_id: int,
    storage_options: Mapping[str, Any] | None = None,
    mmap: bool = True,
    manifest: Manifest | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Partition:
    """Load partition ``part_id`` of the manifest at ``manifest_url``, reading only its files.

    Every file is read once into memory (``mmap`` is accepted for compatibility and
    ignored): only regular files inside the partition folder, exactly the manifest's
    size, sha256 over the bytes the arrays are built from; dtypes, byte order, shapes and
    index ranges are checked against the manifest (see docs/partition-format.md).
    ``cancel()`` is polled between reads; when true, :class:`LoadCancelled` is raised.
    """
    del mmap
    m = manifest or load_manifest(manifest_url, storage_options)
    if not 0 <= part_id < m.num_parts:
        raise ConfigError(f"part_id {part_id} out of range [0, {m.num_parts})")
    info = m.parts[part_id]
    base = storage.join(storage.dirname(manifest_url), info.path)
    for rel in REQUIRED:
        if rel not in info.files:
            raise PartitionDataError(
                f"{storage.redact(manifest_url)}: parts[{part_id}] lacks {rel}"
            )
    root = _root_of(base)
    arrays = {
        rel: _read_verified(base, rel, fi, storage_options, root, cancel)
        for rel, fi in info.files.items()
    }
    node_data: dict[str, dict[str, np.ndarray]] = {t: {} for t in m.node_types}
    edge_data: dict[str, dict[str, np.ndarray]] = {e: {} for e in m.etype_names}
    for rel, arr in arrays.items():
        top, _, rest = rel.partition("/")
        kind, _, fname = rest.rpartition("/")
        if top in ("node", "edge") and fname.endswith(".npy"):
            target = node_data if top == "node" else edge_data
            if kind not in target:
                raise PartitionDataError(f"{base}/{rel}: unknown type {kind!r}")
            target[kind][posixpath.splitext(fname)[0]] = arr
    p = Partition(
        manifest=m,
        book=PartitionBook(m),
        part_id=part_id,
        indptr=arrays["graph/indptr.npy"],
        indices=arrays["graph/indices.npy"],
        eid=arrays["graph/eid.npy"],
        etype=arrays.get("graph/etype.npy"),
        halo_nid=arrays["graph/halo_nid.npy"],
        orig_nid=arrays["graph/orig_nid.npy"],
        orig_eid=arrays["graph/orig_eid.npy"],
        node_data=node_data,
        edge_data=edge_data,
    )
    check_partition(p, storage.redact(base))
    return p


def check_partition(p: Partition, where: str) -> None:
    """Refuse arrays that contradict the manifest: dtype, byte order, shape, index ranges."""
    m, info, k = p.manifest, p.manifest.parts[p.part_id], p.part_id

    def bad(name: str, msg: str) -> PartitionDataError:
        return PartitionDataError(f"{where}/{name}: {msg}")

    def ids(name: str, a: np.ndarray, length: int | None, lo: int, hi: int) -> None:
        if a.dtype.kind not in "iu" or not a.dtype.isnative or a.ndim != 1:
            raise bad(name, f"expected a 1-D native-endian integer array, got {a.dtype} {a.shape}")
        if length is not None and a.shape[0] != length:
            raise bad(name, f"{a.shape[0]} entries, the manifest implies {length}")
        if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
            raise bad(name, f"values outside [{lo}, {hi})")

    n_local = info.owned_nodes + info.halo_nodes
    indptr = p.indptr
    ids("graph/indptr.npy", indptr, n_local + 1, 0, 2**62)
    nnz = int(p.indices.shape[0]) if p.indices.ndim == 1 else -1
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise bad("graph/indptr.npy", f"must start at 0 and end at {nnz} (the edge count)")
    if np.any(indptr[1:] < indptr[:-1]):
        raise bad("graph/indptr.npy", "must be non-decreasing")
    if int(indptr[info.owned_nodes]) < info.edges:
        raise bad("graph/indptr.npy", "owned nodes hold fewer in-edges than the manifest")
    ids("graph/indices.npy", p.indices, None, 0, n_local)
    ids("graph/eid.npy", p.eid, nnz, 0, m.num_edges)
    ea, eb = m.edge_offsets[k], m.edge_offsets[k + 1]
    owned_eids = p.eid[: info.edges]
    if owned_eids.size and (int(owned_eids.min()) < ea or int(owned_eids.max()) >= eb):
        raise bad("graph/eid.npy", f"owned edges outside [{ea}, {eb})")
    if p.etype is not None:
        ids("graph/etype.npy", p.etype, nnz, 0, max(1, len(m.edge_types)))
    ids("graph/halo_nid.npy", p.halo_nid, info.halo_nodes, 0, m.num_nodes)
    ids("graph/orig_nid.npy", p.orig_nid, info.owned_nodes, 0, m.num_nodes)
    ids("graph/orig_eid.npy", p.orig_eid, info.edges, 0, m.num_edges)
    for section, data, specs, offsets in (
        ("node", p.node_data, m.node_data, m.ntype_offsets),
        ("edge", p.edge_data, m.edge_data, m.etype_offsets),
    ):
        for t, arrays in data.items():
            rows = offsets[t][k + 1] - offsets[t][k]
            for name, arr in arrays.items():
                rel = f"{section}/{t}/{name}.npy"
                spec = specs.get(t, {}).get(name)
                if spec is None:
                    raise bad(rel, "not declared in the manifest's data specs")
                try:
                    want = np.dtype(spec.dtype)
                except TypeError as e:
                    raise bad(rel, f"the manifest's dtype {spec.dtype!r} is invalid") from e
                if want.hasobject or arr.dtype != want:
                    raise bad(rel, f"dtype {arr.dtype.str} != {want.str} in the manifest")
                if arr.shape != (rows, *spec.shape):
                    raise bad(rel, f"shape {arr.shape} != {(rows, *spec.shape)} per the manifest")


def read_part_array(
    manifest_url: str,
    manifest: Manifest,
    part_id: int,
    rel: str,
    storage_options: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """One file of one partition (e.g. ``graph/orig_nid.npy``), size and sha256 verified."""
    if not 0 <= part_id < manifest.num_parts:
        raise ConfigError(f"part_id {part_id} out of range [0, {manifest.num_parts})")
    info = manifest.parts[part_id]
    if rel not in info.files:
        raise PartitionDataError(f"{storage.redact(manifest_url)}: parts[{part_id}] lacks {rel}")
    base = storage.join(storage.dirname(manifest_url), info.path)
    return _read_verified(base, rel, info.files[rel], storage_options, _root_of(base))
