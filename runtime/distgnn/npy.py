"""``.npy`` files without NumPy's pickle-capable loader: reading a header, and streaming
a file of known shape out to any fsspec URL chunk by chunk (inference shards, sparse
optimizer state)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import posixpath
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from distgnn import storage
from distgnn.errors import StorageError


def read_header(f: BinaryIO | Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` data at ``f``'s position, which is
    left at the first data byte; format versions 1.0, 2.0 and 3.0, another version is a
    ValueError (as is a malformed header)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(f)
    raise ValueError(f"unknown .npy version {version}")


@dataclass
class ShardInfo:
    """One written shard: where, how big, its digest."""

    path: str
    bytes: int
    sha256: str


class ShardWriter:
    """Streams one ``.npy`` file of a known shape, chunk by chunk, hashing as it goes."""

    def __init__(self, base: str, rel: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.url = storage.join(base, rel)
        self.rel, self.dtype, self.shape = rel, np.dtype(dtype), shape
        self.rows = 0
        self.size = 0
        self.hash = hashlib.sha256()
        fs, path = storage.get_fs(self.url)
        try:
            if storage.is_local(self.url):
                fs.makedirs(posixpath.dirname(path), exist_ok=True)
            self.f: BinaryIO = fs.open(path, "wb")
        except OSError as e:
            raise StorageError(f"{storage.redact(self.url)}: {e}") from e
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            head, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                   "shape": shape}
        )  # fmt: skip
        self._put(head.getvalue())

    def _put(self, data: bytes | memoryview) -> None:
        try:
            self.f.write(data)
        except OSError as e:
            raise StorageError(f"{storage.redact(self.url)}: {e}") from e
        self.hash.update(data)
        self.size += len(data)

    def write(self, rows: np.ndarray) -> None:
        a = np.ascontiguousarray(rows, dtype=self.dtype)
        if a.shape[1:] != self.shape[1:] or self.rows + a.shape[0] > self.shape[0]:
            raise StorageError(
                f"{storage.redact(self.url)}: rows {a.shape} do not fit {self.shape}"
            )
        self._put(a.tobytes())
        self.rows += a.shape[0]

    def close(self) -> ShardInfo:
        if self.rows != self.shape[0]:
            raise StorageError(
                f"{storage.redact(self.url)}: {self.rows} rows written, {self.shape[0]} expected"
            )
        try:
            self.f.close()
        except OSError as e:
            raise StorageError(f"{storage.redact(self.url)}: {e}") from e
        return ShardInfo(self.rel, self.size, self.hash.hexdigest())

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.f.close()
