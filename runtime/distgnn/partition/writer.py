"""Write ``.npy`` files to any fsspec URL while computing their sha256 and size."""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from distgnn import storage
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
                    np.lib.format.write_array(hf, np.asanyarray(arr), allow_pickle=False)
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
