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
* Each tensor has a write generation: 8 bytes after the stripe bytes of its ``.lock``
  file, mapped by every worker, starting at a random value when the tensor is created
  (so a re-created tensor never repeats an old one) and bumped after every write
  (PUSH, sparse update) under a record lock of its own. A PULL reads it before gathering
  its rows; a client's cache compares it with the one its rows were read at
  (:mod:`distgnn.distributed.featcache`).
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

from distgnn import npy
from distgnn.errors import ConfigError, TensorError
from distgnn.rpc.protocol import DTYPES
from distgnn.server.limits import shm_free
from distgnn.server.sweep import sweep_stale, write_owner

__all__ = ["ShmStore", "TensorError", "sweep_stale"]

STRIPES = 64
GEN_BYTES = 8
"""The write generation after the stripe bytes of a tensor's ``.lock`` file."""
MAX_NAME_BYTES = 120
"""A stored name is hex-encoded into file names (``2 * 120 + 5 <= 255``, NAME_MAX)."""
MAX_CLIENT_NAME_BYTES = 100
"""Names clients may create: room is left for optimizer-state suffixes (``.adagrad_sum``)."""
MAX_NDIM = 8
MAX_DIM = 1 << 40
MAX_HOLDERS = 1024
"""Sessions that may hold one non-persistent tensor at once."""
SHM_RESERVE = 16 << 20
"""Free bytes a create leaves in the shared-memory file system (its metadata files)."""
NAME_RE = re.compile(r"^(node|edge|graph)/[^/\x00-\x1f\x7f]{1,100}/[A-Za-z0-9_.\-]{1,100}$")
SERVER_SESSION = "server"
"""Owner of the tensors loaded from the partition (never deleted by clients)."""


@dataclass
class Entry:
    """A mapped tensor in one process."""

    name: str
    array: np.ndarray
    ino: int
    gen: np.ndarray
    """The tensor's write generation (one uint64 mapped from its ``.lock`` file)."""


@dataclass(frozen=True)
class Quota:
    """Caps on the tensors created at run time (the partition's own data is not counted)."""

    max_tensors: int = 4096
    max_bytes: int = 64 << 30


def _remove(root: str, pid: int) -> None:
    """Remove a store folder, only in the process that created it (not in forked children)."""
    if os.getpid() == pid:
        shutil.rmtree(root, ignore_errors=True)


def default_shm_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def short(value: object, n: int = 60) -> str:
    """A bounded quote of a client-given value for error messages."""
    r = repr(value)
    return r if len(r) <= n else r[:n] + "..."


def check_name(name: object, client: bool = False) -> str:
    """``name`` if it is a valid tensor name (charset, length, UTF-8), else TensorError."""
    limit = MAX_CLIENT_NAME_BYTES if client else MAX_NAME_BYTES
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise TensorError(
            f"tensor name {short(name)} is not valid: node/NTYPE/NAME or edge/S:E:D/NAME, "
            "NAME of letters, digits, '_', '.', '-'"
        )
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise TensorError(f"tensor name {short(name)} is not valid UTF-8") from None
    if size > limit:
        raise TensorError(f"tensor name {short(name)} is longer than {limit} bytes")
    return name


def check_shape(shape: object, what: str = "shape") -> tuple[int, ...]:
    """A list of 1..8 sizes in ``[0, 2**40]`` (no booleans) as a tuple, else TensorError."""
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= MAX_NDIM
        or not all(type(s) is int and 0 <= s <= MAX_DIM for s in shape)
    ):
        raise TensorError(
            f"field {what!r} must be a list of 1 to {MAX_NDIM} integer sizes <= 2**40, "
            f"got {short(shape)}"
        )
    return tuple(shape)


def _fname(name: str) -> str:
    try:
        raw = name.encode()
    except UnicodeEncodeError:
        raise TensorError(f"unknown tensor {short(name)}") from None
    if len(raw) > MAX_NAME_BYTES:
        raise TensorError(f"unknown tensor {short(name)} (name too long)")
    return raw.hex()


class ShmStore:
    """The tensor folder of one server, opened by the parent (``create``) or a worker.

    Non-persistent tensors created at run time have an owner (the creating session) and
    holders (sessions that attached, with a count each; the creator holds one reference).
    ``detach`` drops one reference and removes the tensor when none is left; ``delete``
    by the owner with ``force`` removes it at once; another session's delete only detaches
    (when it holds a reference) or is refused.

    ``readonly`` (a co-located trainer's view): tensors are mapped ``PROT_READ`` from files
    opened read-only, and anything that would create, attach or delete raises TensorError.
    """

    def __init__(
        self, root: str, owner: bool = False, quota: Quota | None = None, readonly: bool = False
    ) -> None:
        self.root = root
        self.owner = owner
        self.readonly = readonly
        self.quota = quota or Quota()
        self._cache: dict[str, Entry] = {}
        self._cache_lock = threading.Lock()
        self._tlocks: dict[str, list[threading.Lock]] = {}
        self._lockfds: dict[str, int] = {}
        self._base: frozenset[str] | None = None
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
        if self.readonly:
            raise TensorError(f"store {self.root!r} is opened read-only")
        fd = os.open(os.path.join(self.root, "registry.lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # --- create / attach / delete --------------------------------------------------
    def put(self, name: str, array: np.ndarray) -> np.ndarray:
        """Copy ``array`` in as a persistent tensor (the parent, at load time). The
        partition's own names are not held to the client charset, only to the length."""
        _fname(name)
        with self._registry():
            out = self._new(name, array.dtype, array.shape)
            try:
                rows = array.shape[0] if array.ndim else 0
                row_bytes = array.itemsize * max(1, array.size // max(1, rows))
                step = max(1, (64 << 20) // max(1, row_bytes))
                if array.ndim == 0:
                    out[...] = array
                else:
                    for i in range(0, rows, step):
                        out[i : i + step] = array[i : i + step]
                del out
                self._publish(name, {"persistent": True, "owner": SERVER_SESSION, "holders": {}})
            except BaseException:
                self._discard(name)
                raise
        return self.get(name)

    def seal(self) -> None:
        """Mark every tensor present now as the partition's own (not counted by the quota)."""
        names = sorted(self.names())
        tmp = os.path.join(self.root, "base.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(names, f)
        os.replace(tmp, os.path.join(self.root, "base.json"))
        self._base = frozenset(names)

    def _base_names(self) -> frozenset[str]:
        if self._base is None:
            try:
                with open(os.path.join(self.root, "base.json"), encoding="utf-8") as f:
                    self._base = frozenset(json.load(f))
            except FileNotFoundError:
                return frozenset()
        return self._base

    def _new(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A ``.tmp`` file of the tensor with all its pages reserved (``posix_fallocate``):
        a full tmpfs is an error here, never a SIGBUS when the pages are first written."""
        if dtype.hasobject or dtype.name not in DTYPES:
            raise TensorError(f"dtype {dtype} cannot be stored")
        nbytes = math.prod(shape) * dtype.itemsize
        free = shm_free(self.root)
        if nbytes + SHM_RESERVE > free:
            raise TensorError(
                f"tensor {short(name)} needs {nbytes} bytes but the shared memory of this "
                f"server has {free} free"
            )
        tmp = self._path(name, ".tmp")
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": shape}  # fmt: skip
        try:
            with open(tmp, "wb") as fp:
                np.lib.format.write_array_header_2_0(fp, header)
                size = fp.tell() + nbytes
                fp.flush()
                if nbytes:
                    os.posix_fallocate(fp.fileno(), 0, size)
                else:
                    fp.truncate(size)
            return map_npy(tmp)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise TensorError(
                f"tensor {short(name)} of {nbytes} bytes does not fit in this server's shared "
                f"memory ({e.strerror or e})"
            ) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _publish(self, name: str, meta: dict[str, Any]) -> None:
        self._write_meta(name, meta)
        with open(self._path(name, ".lock"), "wb") as f:
            # a random start (62 bits): a re-created tensor never repeats a generation
            start = int.from_bytes(os.urandom(GEN_BYTES), "little") >> 2
            f.write(bytes(STRIPES) + start.to_bytes(GEN_BYTES, "little"))
        os.replace(self._path(name, ".tmp"), self._path(name, ".npy"))

    def _discard(self, name: str) -> None:
        """Remove every file of ``name`` (a failed create or a delete)."""
        for ext in (".npy", ".tmp", ".json", ".jtmp", ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(name, ext))

    def _sweep_partial(self) -> None:
        """Remove ``.tmp``/``.jtmp`` files: under the registry lock none can be in progress,
        so they are left over by a worker that died while creating."""
        for f in os.listdir(self.root):
            if f.endswith((".tmp", ".jtmp")) and not f.startswith(("base", "info", "owner")):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.root, f))

    def usage(self) -> tuple[int, int]:
        """(count, bytes) of the tensors created at run time."""
        base = self._base_names()
        count = size = 0
        for f in os.listdir(self.root):
            if not f.endswith(".npy"):
                continue
            try:
                name = bytes.fromhex(f[:-4]).decode()
            except ValueError:
                continue
            if name in base:
                continue
            with contextlib.suppress(FileNotFoundError):
                size += os.stat(os.path.join(self.root, f)).st_size
                count += 1
        return count, size

    def _check_quota(self, name: str, nbytes: int) -> None:
        count, used = self.usage()
        q = self.quota
        if count + 1 > q.max_tensors:
            raise TensorError(
                f"cannot create {short(name)}: this server holds {count} tensors, the limit "
                f"is {q.max_tensors} (DISTGNN_SERVER_MAX_TENSORS); delete unused tensors"
            )
        if used + nbytes > q.max_bytes:
            raise TensorError(
                f"cannot create {short(name)} ({nbytes} bytes): tensors created on this server "
                f"use {used} of {q.max_bytes} bytes (DISTGNN_SERVER_MAX_TENSOR_BYTES)"
            )

    def init(
        self,
        name: str,
        dtype: np.dtype,
        shape: tuple[int, ...],
        fill: Callable[[np.ndarray], None],
        persistent: bool,
        session: str = SERVER_SESSION,
    ) -> tuple[bool, bool]:
        """Create a tensor (filled by ``fill``) or attach to it; (created, persistent)."""
        check_name(name)
        if name.startswith("graph/"):
            raise TensorError(f"tensor name {short(name)} is internal")
        with self._registry():
            if os.path.exists(self._path(name, ".npy")):
                arr = self.get(name)
                if arr.dtype != dtype or arr.shape != tuple(shape):
                    raise TensorError(
                        f"tensor {short(name)} exists as {arr.dtype}{list(arr.shape)}, "
                        f"not {dtype}{list(shape)}"
                    )
                meta = self._meta(name)
                if not meta["persistent"]:
                    self._hold(name, meta, session)
                return False, bool(meta["persistent"])
            self._sweep_partial()
            self._check_quota(name, math.prod(shape) * dtype.itemsize)
            arr = self._new(name, dtype, shape)
            try:
                fill(arr)
                del arr
                holders = {} if persistent else {session: 1}
                self._publish(name, {"persistent": persistent, "owner": session,
                                     "holders": holders})  # fmt: skip
            except BaseException:
                self._discard(name)
                raise
            return True, persistent

    def _hold(self, name: str, meta: dict[str, Any], session: str) -> None:
        holders: dict[str, int] = meta.setdefault("holders", {})
        if session not in holders and len(holders) >= MAX_HOLDERS:
            raise TensorError(f"tensor {short(name)} already has {MAX_HOLDERS} holders")
        holders[session] = holders.get(session, 0) + 1
        self._write_meta(name, meta)

    def attach(self, name: str, session: str) -> dict[str, Any]:
        """Hold one more reference to an existing tensor; its dtype, shape, persistence."""
        check_name(name)
        with self._registry():
            if not os.path.exists(self._path(name, ".npy")):
                raise TensorError(f"unknown tensor {short(name)}")
            arr = self.get(name)
            meta = self._meta(name)
            if not meta["persistent"]:
                self._hold(name, meta, session)
            return {"dtype": arr.dtype.name, "shape": list(arr.shape),
                    "persistent": bool(meta["persistent"])}  # fmt: skip

    def detach(self, name: str, session: str) -> bool:
        """Drop one of ``session``'s references; True when that removed the tensor."""
        check_name(name)
        with self._registry():
            meta = self._existing_meta(name)
            if meta["persistent"]:
                raise TensorError(f"tensor {short(name)} is persistent: it has no references")
            holders: dict[str, int] = meta.get("holders", {})
            if holders.get(session, 0) <= 0:
                raise TensorError(f"this session holds no reference to tensor {short(name)}")
            holders[session] -= 1
            if holders[session] == 0:
                del holders[session]
            if holders:
                self._write_meta(name, meta)
                return False
            self._discard(name)
            return True

    def delete(self, name: str, session: str = SERVER_SESSION, force: bool = False) -> bool:
        """Remove a tensor (its owner with ``force``, or the server) or drop ``session``'s
        reference (removed with the last); True if removed. Anyone else is refused."""
        check_name(name)
        with self._registry():
            meta = self._existing_meta(name)
            owner = meta.get("owner", SERVER_SESSION)
            if session == SERVER_SESSION or (force and session == owner != SERVER_SESSION):
                self._discard(name)
                return True
            if meta["persistent"]:
                raise TensorError(
                    f"tensor {short(name)} is persistent: only its creator can delete it "
                    "(with force)"
                )
            holders: dict[str, int] = meta.get("holders", {})
            if holders.get(session, 0) <= 0:
                raise TensorError(
                    f"tensor {short(name)} is held by other sessions: only its creator (with "
                    "force) or the last holder to detach deletes it"
                )
        return self.detach(name, session)

    def _existing_meta(self, name: str) -> dict[str, Any]:
        if not os.path.exists(self._path(name, ".npy")):
            raise TensorError(f"unknown tensor {short(name)}")
        return self._meta(name)

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
                with contextlib.suppress(ValueError):
                    out.append(bytes.fromhex(f[:-4]).decode())
        return sorted(out)

    def describe(self, name: str) -> tuple[np.dtype, tuple[int, ...]]:
        """dtype and shape of a tensor from its file header (nothing is mapped)."""
        e = self._cache.get(name)
        if e is not None:
            return e.array.dtype, e.array.shape
        try:
            with open(self._path(name, ".npy"), "rb") as f:
                shape, _, dtype = npy.read_header(f)
        except (OSError, ValueError):
            raise TensorError(f"unknown tensor {short(name)}") from None
        return dtype, shape

    # --- access ----------------------------------------------------------------------
    def get(self, name: str) -> np.ndarray:
        """The mapped tensor; unknown or deleted names raise :class:`TensorError`."""
        return self._entry(name).array

    def _entry(self, name: str) -> Entry:
        path = self._path(name, ".npy")
        try:
            ino = os.stat(path).st_ino
        except (OSError, ValueError):
            with self._cache_lock:
                self._cache.pop(name, None)
            raise TensorError(f"unknown tensor {short(name)}") from None
        e = self._cache.get(name)
        if e is None or e.ino != ino:
            e = self._map(name, path)
        return e

    def _map(self, name: str, path: str) -> Entry:
        """Map a tensor with its generation. The ``.lock`` file is mapped first and
        checked again after the data: a tensor is published lock file first, so an
        unchanged lock file means the data mapped belongs to it."""
        lpath = self._path(name, ".lock")
        for _ in range(8):
            try:
                gen, lino = map_gen(lpath, writable=not self.readonly)
                ino = os.stat(path).st_ino
                arr = map_npy(path, writable=not self.readonly)
                if os.stat(lpath).st_ino != lino:
                    continue  # deleted and re-created meanwhile: map the new one
            except FileNotFoundError:
                break
            with self._cache_lock:
                e = self._cache[name] = Entry(name, arr, ino, gen)
            return e
        with self._cache_lock:
            self._cache.pop(name, None)
        raise TensorError(f"unknown tensor {short(name)}")

    def get_gen(self, name: str) -> tuple[np.ndarray, int]:
        """The mapped tensor and its write generation (read now, before the caller reads
        any row: a write finished after this is seen by the next generation read)."""
        e = self._entry(name)
        return e.array, int(e.gen[0])

    def bump(self, name: str) -> None:
        """Advance the write generation of ``name`` (after a write, before its answer)."""
        e = self._entry(name)
        with self._lock_bytes(name, [STRIPES]):
            e.gen[0] += np.uint64(1)

    @contextlib.contextmanager
    def lock_rows(self, name: str, rows: np.ndarray) -> Iterator[None]:
        """Hold the stripes covering ``rows`` (threads and processes), in increasing order."""
        stripes = np.unique(rows % STRIPES) if len(rows) else np.empty(0, np.int64)
        with self._lock_bytes(name, stripes.tolist()):
            yield

    @contextlib.contextmanager
    def _lock_bytes(self, name: str, which: list[int]) -> Iterator[None]:
        """Hold bytes ``which`` (increasing) of the tensor's ``.lock`` file: a per-process
        ``threading.Lock`` each plus a POSIX record lock."""
        with self._cache_lock:
            if name not in self._tlocks:
                self._tlocks[name] = [threading.Lock() for _ in range(STRIPES + 1)]
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
                raise TensorError(f"unknown tensor {short(name)}") from None
        held: list[int] = []
        try:
            for s in which:
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


def map_npy(path: str, writable: bool = True) -> np.ndarray:
    """Map a ``.npy`` file shared, read-write (or read-only: ``writable=False``), with its
    page tables populated up front (``MAP_POPULATE``), so the first random reads do not
    pay one page fault per row. A file shorter than its header says raises ValueError."""
    with open(path, "r+b" if writable else "rb") as f:
        shape, fortran, dtype = npy.read_header(f)
        offset = f.tell()
        size = math.prod(shape) * dtype.itemsize
        if fortran or dtype.hasobject:
            raise TensorError(f"{path}: not a C-order plain array")
        if size == 0:
            return np.zeros(shape, dtype=dtype)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        mm = mmap.mmap(f.fileno(), offset + size, flags=flags, prot=prot)
    return np.ndarray(shape, dtype=dtype, buffer=mm, offset=offset)


def map_gen(path: str, writable: bool = True) -> tuple[np.ndarray, int]:
    """The write generation of a tensor's ``.lock`` file, mapped shared (one uint64),
    and the file's inode. ValueError for a file without one."""
    with open(path, "r+b" if writable else "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size < STRIPES + GEN_BYTES:
            raise TensorError(f"{path}: no write generation")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        mm = mmap.mmap(f.fileno(), STRIPES + GEN_BYTES, flags=mmap.MAP_SHARED, prot=prot)
    return np.ndarray((1,), dtype="<u8", buffer=mm, offset=STRIPES), st.st_ino


def check_shm_root(path: str) -> str:
    if not os.path.isdir(path):
        raise ConfigError(f"--shm-dir {path!r} is not a folder")
    return path
