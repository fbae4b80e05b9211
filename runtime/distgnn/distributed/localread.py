"""Co-located trainers: read the local partition's rows from its server's shared memory.

A trainer placed beside the graph server of partition ``P`` (``trainers.colocate``)
gets ``DISTGNN_LOCAL_PARTITION=P`` and ``DISTGNN_LOCAL_STORE`` (the server's store
folder, or the folder it creates its store in). The server names its store folder in
its HELLO answer (``store``); the trainer maps the tensor files of that folder
**read-only** and answers pulls of partition ``P``'s rows by a gather from the map,
with no copy through the network stack. Everything else goes over TCP as before:
rows of other partitions, writes (PUSH, optimizer updates: the server applies them to
the same memory, so the map sees them), and any tensor this reader cannot use (not
in the folder, a header that does not match the file's size, another dtype or row
shape than the caller expects). Tensors created at run time appear as files in the
same folder, so they are read locally too once they exist.

Each read checks the file's inode (one ``stat``), so a deleted or re-created tensor
is re-mapped or read over TCP, never served stale; a server that restarted with
another store folder (its HELLO names it) turns local reads off.
"""

from __future__ import annotations

import json
import logging
import math
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from distgnn import npy
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.rpc.gather import default_gatherer

log = logging.getLogger("distgnn.distributed.localread")

INFO_FILE = "info.json"


@dataclass
class Mapped:
    """One tensor file mapped read-only."""

    array: np.ndarray
    ino: int


@dataclass
class LocalStats:
    """Rows and bytes read from shared memory instead of over TCP."""

    reads: int = 0
    rows: int = 0
    bytes: int = 0
    fallbacks: int = 0


def map_readonly(path: str) -> Mapped:
    """Map a ``.npy`` file read-only; ValueError when its header and size disagree."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            shape, fortran, dtype = npy.read_header(f)
            offset = f.tell()
        if fortran or dtype.hasobject:
            raise ValueError(f"{path}: not a C-order plain array")
        st = os.fstat(fd)
        nbytes = math.prod(shape) * dtype.itemsize
        if st.st_size < offset + nbytes:
            raise ValueError(
                f"{path}: header says {dtype}{list(shape)} ({nbytes} bytes) but the file has "
                f"{st.st_size - offset} data bytes"
            )
        if nbytes == 0:
            return Mapped(np.zeros(shape, dtype), st.st_ino)
        mm = mmap.mmap(fd, offset + nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        return Mapped(np.ndarray(shape, dtype=dtype, buffer=mm, offset=offset), st.st_ino)
    finally:
        os.close(fd)


def find_store(folder: str, name: str | None) -> str:
    """The store folder: ``folder`` itself (it holds ``info.json``) or ``folder/name``;
    the server's advertised ``name`` must match either way."""
    if os.path.isfile(os.path.join(folder, INFO_FILE)):
        root = folder
    elif name:
        root = os.path.join(folder, name)
    else:
        raise ConfigError(f"local store {folder!r}: no {INFO_FILE} and the server named none")
    if name is not None and os.path.basename(os.path.normpath(root)) != name:
        raise ConfigError(
            f"local store {root!r} is not the store of the co-located server (it serves {name!r})"
        )
    if not os.path.isfile(os.path.join(root, INFO_FILE)):
        raise ConfigError(f"local store {root!r} has no {INFO_FILE} (not a loaded server store)")
    return root


class LocalReader:
    """Reads partition ``part``'s rows from the co-located server's store folder."""

    def __init__(
        self, root: str, part: int, store_name: str, current: Callable[[], str | None]
    ) -> None:
        self.root = root
        self.part = part
        self.store_name = store_name
        self._current = current
        self._maps: dict[str, Mapped] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.stats = LocalStats()
        self.enabled = True

    @classmethod
    def open(
        cls, folder: str, part: int, store_name: str | None, current: Callable[[], str | None]
    ) -> LocalReader:
        """Validate ``folder`` against the server's HELLO (``store_name``) and its
        ``info.json`` (partition ``part``); ConfigError says why it cannot be used."""

        root = find_store(folder, store_name)
        try:
            with open(os.path.join(root, INFO_FILE), encoding="utf-8") as f:
                info = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"local store {root!r}: cannot read {INFO_FILE}: {e}") from e
        if info.get("part_id") != part:
            raise ConfigError(
                f"local store {root!r} holds partition {info.get('part_id')}, not {part}"
            )
        return cls(root, part, os.path.basename(os.path.normpath(root)), current)

    def current_store(self) -> str | None:
        """The store folder the co-located server names now (its latest HELLO)."""
        return self._current()

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key.encode().hex() + ".npy")

    def _warn(self, key: str, why: str) -> None:
        self.stats.fallbacks += 1
        if key not in self._warned:
            self._warned.add(key)
            log.warning("local read falls back to TCP", extra=kv(name=key, why=why))

    def _array(
        self, key: str, dtype: np.dtype, row: tuple[int, ...], rows: int
    ) -> np.ndarray | None:
        if not self.enabled:
            return None
        if self._current() != self.store_name:
            self.enabled = False
            self._maps.clear()
            log.warning(
                "co-located server changed its store: local reads off",
                extra=kv(was=self.store_name, now=self._current()),
            )
            return None
        path = self._path(key)
        try:
            ino = os.stat(path).st_ino
        except OSError:
            self._maps.pop(key, None)
            return None  # not in shared memory (yet): TCP
        m = self._maps.get(key)
        if m is None or m.ino != ino:
            try:
                m = map_readonly(path)
            except (OSError, ValueError) as e:
                self._warn(key, str(e))
                return None
            with self._lock:
                self._maps[key] = m
        a = m.array
        if a.dtype != dtype or a.shape[1:] != row or a.shape[0] != rows:
            self._warn(key, f"file is {a.dtype}{list(a.shape)}, expected {dtype}[{rows}, {row}]")
            return None
        return a

    def table(self, key: str, like: np.ndarray, rows: int) -> np.ndarray | None:
        """The mapped tensor ``key`` when rows of ``like``'s dtype and row shape can be read
        from it (``rows``: the partition's rows), else None (read over TCP)."""
        return self._array(key, like.dtype, tuple(like.shape[1:]), rows)

    def gather_from(self, table: np.ndarray, ids: np.ndarray, dests: Sequence[np.ndarray]) -> None:
        """Fill ``dests`` (in order) with rows ``ids`` of ``table`` (from :meth:`table`)."""
        g = default_gatherer()
        pos = 0
        for d in dests:  # a step's feature read: streamed (not read back at once)
            n = d.shape[0]
            g.gather(table, ids[pos : pos + n], d, stream=True)
            pos += n
        s = self.stats
        s.reads += 1
        s.rows += pos
        s.bytes += pos * table.itemsize * math.prod(table.shape[1:])

    def gather(self, key: str, ids: np.ndarray, dests: Sequence[np.ndarray], rows: int) -> bool:
        """Fill ``dests`` (in order) with rows ``ids`` of tensor ``key``; False (nothing
        written) when the tensor must be read over TCP. ``rows``: the partition's rows."""
        if not dests:
            return True
        a = self.table(key, dests[0], rows)
        if a is None:
            return False
        self.gather_from(a, ids, dests)
        return True

    def close(self) -> None:
        s = self.stats
        log.info(
            "local reads from shared memory",
            extra=kv(partition=self.part, rows=s.rows, bytes=s.bytes, reads=s.reads,
                     fallbacks=s.fallbacks),
        )  # fmt: skip
        self._maps.clear()
