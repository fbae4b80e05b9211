"""Named tensors in POSIX shared memory, shared by every worker of one server.

Each tensor is a ``.npy`` file in a tmpfs folder (``/dev/shm/distgnn-...``): the
server's parent writes the partition's arrays there once and every worker maps
them (one copy in memory whatever the number of workers). Tensors created at run
time (INIT_TENSOR) go to the same folder, so every worker sees them.

* Create/delete take an exclusive ``flock`` on the folder's ``registry.lock``.
  Non-persistent tensors are reference counted (one count per attach) in a small
  JSON file beside the data and are removed when the count reaches zero.
* Writes lock row stripes (``row % STRIPES``): a per-process ``threading.Lock``
  plus a POSIX record lock (``lockf``) on byte ``stripe`` of the tensor's
  ``.lock`` file, always in increasing stripe order, so concurrent writes and
  read-modify-write optimizer steps from any worker lose no update.
* A worker's cached mapping is checked against the file's inode on every use, so
  a deleted (or deleted and re-created) tensor is never served stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import mmap
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from distgnn.errors import ConfigError, DistGNNError
from distgnn.server.sweep import sweep_stale, write_owner

__all__ = ["ShmStore", "TensorError", "sweep_stale"]

STRIPES = 64
NAME_RE = re.compile(r"^(node|edge|graph)/[^/\x00]{1,200}/[A-Za-z0-9_.\-]{1,200}$")


class TensorError(DistGNNError, ValueError):
    """A request named an unknown tensor, a bad shape/dtype, or rows out of range."""


@dataclass
class Entry:
    """A mapped tensor in one process."""

    name: str
    array: np.ndarray
    ino: int


def _remove(root: str, pid: int) -> None:
    """Remove a store folder, only in the process that created it (not in forked children)."""
    if os.getpid() == pid:
        shutil.rmtree(root, ignore_errors=True)


def default_shm_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _fname(name: str) -> str:
    return name.encode().hex()


class ShmStore:
    """The tensor folder of one server, opened by the parent (``create``) or a worker."""

    def __init__(self, root: str, owner: bool = False) -> None:
        self.root = root
        self.owner = owner
        self._cache: dict[str, Entry] = {}
        self._cache_lock = threading.Lock()
        self._tlocks: dict[str, list[threading.Lock]] = {}
        self._lockfds: dict[str, int] = {}
        # the owner removes the folder on close, at garbage collection or at exit
        self._cleanup = weakref.finalize(self, _remove, root, os.getpid()) if owner else None

    @classmethod
    def create(cls, parent: str | None = None, prefix: str = "distgnn-") -> ShmStore:
        root = tempfile.mkdtemp(prefix=prefix, dir=parent or default_shm_root())
        store = cls(root, owner=True)  # from here on the folder is removed on failure
        write_owner(root)  # lets sweep_stale remove it if this process is killed
        with open(os.path.join(root, "registry.lock"), "wb"):
            pass
        return store

    # --- paths -------------------------------------------------------------------
    def _path(self, name: str, ext: str) -> str:
        return os.path.join(self.root, _fname(name) + ext)

    @contextlib.contextmanager
    def _registry(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.root, "registry.lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # --- create / attach / delete --------------------------------------------------
    def put(self, name: str, array: np.ndarray) -> np.ndarray:
        """Copy ``array`` in as a persistent tensor (the parent, at load time)."""
        out = self._new(name, array.dtype, array.shape)
        rows = array.shape[0] if array.ndim else 0
        step = max(1, (64 << 20) // max(1, array.itemsize * max(1, array.size // max(1, rows))))
        if array.ndim == 0:
            out[...] = array
        else:
            for i in range(0, rows, step):
                out[i : i + step] = array[i : i + step]
        out.flush()
        self._publish(name, {"persistent": True, "refs": 0})
        return out

    def _new(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.memmap:
        tmp = self._path(name, ".tmp")
        return np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)

    def _publish(self, name: str, meta: dict[str, Any]) -> None:
        with open(self._path(name, ".json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        with open(self._path(name, ".lock"), "wb") as f:
            f.truncate(STRIPES)
        os.replace(self._path(name, ".tmp"), self._path(name, ".npy"))

    def init(
        self,
        name: str,
        dtype: np.dtype,
        shape: tuple[int, ...],
        fill: Callable[[np.ndarray], None],
        persistent: bool,
    ) -> tuple[bool, bool]:
        """Create a tensor (filled by ``fill``) or attach to it; (created, persistent)."""
        if not NAME_RE.match(name) or name.startswith("graph/"):
            raise TensorError(f"tensor name {name!r} is not valid")
        with self._registry():
            npy = self._path(name, ".npy")
            if os.path.exists(npy):
                arr = self.get(name)
                if arr.dtype != dtype or arr.shape != tuple(shape):
                    raise TensorError(
                        f"tensor {name!r} exists as {arr.dtype}{list(arr.shape)}, "
                        f"not {dtype}{list(shape)}"
                    )
                meta = self._meta(name)
                if not meta["persistent"]:
                    meta["refs"] += 1
                    self._write_meta(name, meta)
                return False, bool(meta["persistent"])
            arr = self._new(name, dtype, shape)
            fill(arr)
            arr.flush()
            del arr
            self._publish(name, {"persistent": persistent, "refs": 0 if persistent else 1})
            return True, persistent

    def delete(self, name: str, force: bool = False) -> bool:
        """Drop one reference to a non-persistent tensor (or force); True if removed."""
        with self._registry():
            if not os.path.exists(self._path(name, ".npy")):
                raise TensorError(f"unknown tensor {name!r}")
            meta = self._meta(name)
            if meta["persistent"] and not force:
                raise TensorError(f"tensor {name!r} is persistent and cannot be deleted")
            meta["refs"] -= 1
            if meta["refs"] > 0 and not force:
                self._write_meta(name, meta)
                return False
            for ext in (".npy", ".json", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(name, ext))
            return True

    def _meta(self, name: str) -> dict[str, Any]:
        with open(self._path(name, ".json"), encoding="utf-8") as f:
            meta: dict[str, Any] = json.load(f)
            return meta

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        tmp = self._path(name, ".jtmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f)
        os.replace(tmp, self._path(name, ".json"))

    def names(self) -> list[str]:
        out = []
        for f in os.listdir(self.root):
            if f.endswith(".npy"):
                out.append(bytes.fromhex(f[:-4]).decode())
        return sorted(out)

    # --- access ----------------------------------------------------------------------
    def get(self, name: str) -> np.ndarray:
        """The mapped tensor; unknown or deleted names raise :class:`TensorError`."""
        path = self._path(name, ".npy")
        try:
            ino = os.stat(path).st_ino
        except (FileNotFoundError, ValueError):
            with self._cache_lock:
                self._cache.pop(name, None)
            raise TensorError(f"unknown tensor {name!r}") from None
        e = self._cache.get(name)
        if e is None or e.ino != ino:
            arr = map_npy(path)
            with self._cache_lock:
                e = self._cache[name] = Entry(name, arr, ino)
        return e.array

    @contextlib.contextmanager
    def lock_rows(self, name: str, rows: np.ndarray) -> Iterator[None]:
        """Hold the stripes covering ``rows`` (threads and processes), in increasing order."""
        stripes = np.unique(rows % STRIPES) if len(rows) else np.empty(0, np.int64)
        with self._cache_lock:
            if name not in self._tlocks:
                self._tlocks[name] = [threading.Lock() for _ in range(STRIPES)]
            tl = self._tlocks[name]
            path = self._path(name, ".lock")
            fd = self._lockfds.get(name)
            try:
                if fd is not None and os.fstat(fd).st_ino != os.stat(path).st_ino:
                    os.close(fd)
                    fd = None
                if fd is None:
                    fd = self._lockfds[name] = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                self._lockfds.pop(name, None)
                raise TensorError(f"unknown tensor {name!r}") from None
        held: list[int] = []
        try:
            for s in stripes.tolist():
                tl[s].acquire()
                held.append(s)
                fcntl.lockf(fd, fcntl.LOCK_EX, 1, s, os.SEEK_SET)
            yield
        finally:
            for s in reversed(held):
                with contextlib.suppress(OSError):
                    fcntl.lockf(fd, fcntl.LOCK_UN, 1, s, os.SEEK_SET)
                tl[s].release()

    def close(self) -> None:
        """Drop mappings and lock files; the owner also removes the folder."""
        with self._cache_lock:
            self._cache.clear()
            for fd in self._lockfds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._lockfds.clear()
        if self._cleanup is not None:
            self._cleanup()


def map_npy(path: str) -> np.ndarray:
    """Map a ``.npy`` file read-write, shared, with its page tables populated up front
    (``MAP_POPULATE``), so the first random reads do not pay one page fault per row."""
    with open(path, "r+b") as f:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(f)
        offset = f.tell()
        size = math.prod(shape) * dtype.itemsize
        if fortran or dtype.hasobject:
            raise TensorError(f"{path}: not a C-order plain array")
        if size == 0:
            return np.zeros(shape, dtype=dtype)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        mm = mmap.mmap(f.fileno(), offset + size, flags=flags)
    return np.ndarray(shape, dtype=dtype, buffer=mm, offset=offset)


def check_shm_root(path: str) -> str:
    if not os.path.isdir(path):
        raise ConfigError(f"--shm-dir {path!r} is not a folder")
    return path
