"""Write ``.npy`` files to any fsspec URL while computing their sha256 and size."""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from distgnn import storage
from distgnn.graph.data import release_rows
from distgnn.partition.manifest import FileInfo


class _HashingFile:
    """A write-only file object that hashes and counts what passes through."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.h = hashlib.sha256()
        self.n = 0

    def write(self, data: Any) -> int:
        mv = memoryview(data).cast("B")
        self.h.update(mv)
        self.f.write(mv)
        self.n += mv.nbytes
        return mv.nbytes


class PartWriter:
    """Writes the files of one partition folder and records their FileInfo."""

    def __init__(
        self, base_url: str, rel_dir: str, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self.base_url = base_url
        self.rel_dir = rel_dir
        self.fs, self.root = storage.get_fs(storage.join(base_url, rel_dir), storage_options)
        self.files: dict[str, FileInfo] = {}

    def write(self, rel_name: str, arr: np.ndarray) -> FileInfo:
        """Write one ``.npy`` file. On a local file system it goes to a temporary name and
        is renamed when complete, so a reader never sees a partial file under its name."""
        a = np.asanyarray(arr)
        return self._write(
            rel_name, lambda hf: np.lib.format.write_array(hf, a, allow_pickle=False)
        )

    def write_rows(
        self, rel_name: str, src: np.ndarray, rows: np.ndarray, block_bytes: int = 16 << 20
    ) -> FileInfo:
        """Write ``src[rows]`` as one ``.npy`` file (the same bytes as ``write(rel_name,
        np.take(src, rows, axis=0))``) without holding the whole gather: rows are gathered,
        hashed and written in blocks of about ``block_bytes``, and a memory-mapped
        ``src``'s pages are released after each block (see :func:`release_rows`)."""
        if src.dtype.hasobject:
            raise ValueError(f"{rel_name}: object arrays are not written")
        shape = (int(rows.shape[0]), *src.shape[1:])
        row_bytes = max(1, int(src.dtype.itemsize * int(np.prod(src.shape[1:], dtype=np.int64))))
        step = int(min(max(block_bytes // row_bytes, 1024), 1 << 20))
        header = {
            "descr": np.lib.format.dtype_to_descr(src.dtype),
            "fortran_order": False,
            "shape": shape,
        }

        def body(hf: _HashingFile) -> None:
            np.lib.format.write_array_header_1_0(hf, header)
            for i in range(0, shape[0], step):
                block = rows[i : i + step]
                hf.write(np.ascontiguousarray(np.take(src, block, axis=0)))
                release_rows(src, int(block.min()), int(block.max()) + 1)

        return self._write(rel_name, body)

    def _write(self, rel_name: str, body: Callable[[_HashingFile], None]) -> FileInfo:
        path = posixpath.join(self.root, rel_name)
        url = storage.redact(storage.join(self.base_url, self.rel_dir, rel_name))
        local = isinstance(self.fs, LocalFileSystem)
        target = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp" if local else path
        with storage.errors_for(url):
            try:
                if local:
                    self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
                with self.fs.open(target, "wb") as f:
                    hf = _HashingFile(f)
                    body(hf)
                if local:
                    os.replace(target, path)
            except BaseException:
                if local:
                    with contextlib.suppress(OSError):
                        os.unlink(target)
                raise
        info = FileInfo(sha256=hf.h.hexdigest(), bytes=hf.n)
        self.files[rel_name] = info
        return info
