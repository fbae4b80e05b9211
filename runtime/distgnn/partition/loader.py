"""Load one partition (only its own files), verifying every file's size and sha256."""

from __future__ import annotations

import hashlib
import io
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distgnn import storage
from distgnn.errors import ConfigError, PartitionDataError, StorageError
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


def load_manifest(url: str, storage_options: Mapping[str, Any] | None = None) -> Manifest:
    """Read and validate ``NAME.json`` (StorageError if unreadable, ManifestError if bad)."""
    data = storage.read_bytes(url, storage_options)
    return Manifest.from_json(data, storage.redact(url))


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


def _read_verified(
    base: str, rel: str, info: FileInfo, storage_options: Mapping[str, Any] | None, mmap: bool
) -> np.ndarray:
    url = storage.join(base, rel)
    where = storage.redact(url)
    h = hashlib.sha256()
    if storage.is_local(url) and mmap:
        path = storage.local_path(url)
        try:
            size = 0
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
                    size += len(chunk)
        except FileNotFoundError as e:
            raise PartitionDataError(f"{where}: partition file is missing") from e
        except OSError as e:
            raise StorageError(f"{where}: {e}") from e
        _check(where, info, size, h.hexdigest())
        src: Any = path
    else:
        try:
            data = storage.read_bytes(url, storage_options)
        except StorageError as e:
            if "not found" in str(e):
                raise PartitionDataError(f"{where}: partition file is missing") from e
            raise
        h.update(data)
        _check(where, info, len(data), h.hexdigest())
        src = io.BytesIO(data)
    try:
        arr = np.load(src, mmap_mode="r" if isinstance(src, str) else None, allow_pickle=False)
    except ValueError as e:
        raise PartitionDataError(f"{where}: not a readable .npy file ({e})") from e
    return np.asarray(arr) if not isinstance(arr, np.memmap) else arr


def _check(where: str, info: FileInfo, size: int, digest: str) -> None:
    if size != info.bytes:
        raise PartitionDataError(f"{where}: size {size} != {info.bytes} bytes in the manifest")
    if digest != info.sha256:
        raise PartitionDataError(f"{where}: sha256 mismatch (file corrupted or replaced)")


def load_partition(
    manifest_url: str,
    part_id: int,
    storage_options: Mapping[str, Any] | None = None,
    mmap: bool = True,
    manifest: Manifest | None = None,
) -> Partition:
    """Load partition ``part_id`` of the manifest at ``manifest_url``, reading only its files."""
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
    arrays = {
        rel: _read_verified(base, rel, fi, storage_options, mmap) for rel, fi in info.files.items()
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
    if p.num_owned_nodes != info.owned_nodes or p.num_owned_edges != info.edges:
        raise PartitionDataError(f"{storage.redact(str(base))}: sizes disagree with the manifest")
    return p


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
    return _read_verified(base, rel, info.files[rel], storage_options, mmap=False)
