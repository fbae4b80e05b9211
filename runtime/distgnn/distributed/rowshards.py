"""Rows of server tensors saved per trainer at any fsspec URL, without pickle.

What ``SparseAdam.save(f)`` / ``SparseAdagrad.save(f)`` (the optimizers' per-row state)
and the built-in apps' checkpoints (the ``DistEmbedding`` tables) write. Each trainer
writes the rows it owns (DGL's rule, :func:`distgnn.distributed.optim.row_owner`) into
its own folder ``f"{f}_{rank}"``; nothing gathers a whole table on one process::

    F_RANK/meta.json          written last: kind, hyper-parameters, world size, and per
                              table its shape and each file's dtype, shape, size, sha256
    F_RANK/t0.ids.npy         int64 (k,)     the table's row IDs this trainer owns
    F_RANK/t0.a0.npy          float32 (k, d) one array per saved tensor, rows of ``ids``

Rows are pulled from the servers and written in chunks (a trainer holds one chunk at a
time). Reading checks each file against ``meta.json`` (size and sha256 over the bytes
the array is built from, the ``.npy`` header read without NumPy's pickle-capable
loader, dtype and shape) and refuses, naming the file, what does not match.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distgnn import npy, storage
from distgnn.errors import ConfigError, StorageError
from distgnn.log import kv

log = logging.getLogger("distgnn.distributed")

FORMAT = "distgnn-rows"
VERSION = 1
META = "meta.json"
CHUNK_ROWS = 1 << 16
MAX_META_BYTES = 16 << 20


def row_owner(policy: Any, ids: np.ndarray, world: int) -> np.ndarray:
    """The trainer that updates (and saves) each row (DGL: partition, then ``row %
    trainers_per_partition``)."""
    parts, _ = policy.locate(ids)
    parts = parts.astype(np.int64)
    k = len(policy.offsets) - 1
    if world >= k and world % k == 0:
        per = world // k
        return parts * per + (ids % per)
    return parts % world


def owned_rows(policy: Any, num_rows: int, rank: int, world: int) -> np.ndarray:
    """The rows of a tensor of ``num_rows`` rows that trainer ``rank`` owns."""
    ids = np.arange(num_rows, dtype=np.int64)
    return ids[row_owner(policy, ids, world) == rank]


def rank_url(f: str | os.PathLike[str], rank: int) -> str:
    """The folder trainer ``rank`` writes for base path or URL ``f`` (DGL's ``f_RANK``)."""
    return f"{os.fspath(f)}_{rank}"


@dataclass
class Table:
    """One table to save: its rows ``ids`` of each named tensor (``name -> DistTensor``,
    all ``num_rows`` long)."""

    num_rows: int
    ids: np.ndarray
    tensors: dict[str, Any]


def _write_array(
    url: str, rel: str, dtype: np.dtype, shape: tuple[int, ...], chunks: Any
) -> dict[str, Any]:
    w = npy.ShardWriter(url, rel, dtype, shape)
    try:
        for c in chunks:
            w.write(c)
    except BaseException:
        w.abort()
        raise
    info = w.close()
    return {
        "path": info.path,
        "dtype": dtype.name,
        "shape": list(shape),
        "bytes": info.bytes,
        "sha256": info.sha256,
    }


def write(
    url: str,
    kind: str,
    params: dict[str, Any],
    world_size: int,
    tables: dict[str, Table],
    chunk: int = CHUNK_ROWS,
) -> None:
    """Write ``tables`` (their rows ``ids``, pulled ``chunk`` rows at a time) and then
    ``meta.json`` to the folder ``url`` (a ``meta.json`` already there goes first, so
    the folder never looks complete while its files are rewritten)."""
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "params": params,
        "world_size": int(world_size),
        "tables": {},
    }
    meta_url = storage.join(url, META)
    if storage.exists(meta_url):
        fs, path = storage.get_fs(meta_url)
        with storage.errors_for(meta_url):
            fs.rm(path)
    for i, (name, t) in enumerate(tables.items()):
        ids = np.ascontiguousarray(t.ids, dtype=np.int64)
        rec: dict[str, Any] = {"num_rows": int(t.num_rows), "arrays": {}}
        rec["ids"] = _write_array(url, f"t{i}.ids.npy", np.dtype(np.int64), ids.shape, [ids])
        for j, (an, dt) in enumerate(t.tensors.items()):
            shape = (len(ids), *dt.shape[1:])
            pulls = (dt.pull_numpy(ids[k : k + chunk]) for k in range(0, len(ids), chunk))
            rec["arrays"][an] = _write_array(url, f"t{i}.a{j}.npy", dt.np_dtype, shape, pulls)
        meta["tables"][name] = rec
    storage.write_bytes(meta_url, json.dumps(meta, indent=1).encode())


@dataclass
class Saved:
    """A folder written by :func:`write`, its ``meta.json`` parsed and checked."""

    url: str
    kind: str
    params: dict[str, Any]
    world_size: int
    tables: dict[str, dict[str, Any]]

    def where(self, rel: str = META) -> str:
        return storage.redact(storage.join(self.url, rel))

    def ids(self, name: str, num_rows: int) -> np.ndarray:
        """The row IDs of table ``name`` (int64, 1-D, each in ``[0, num_rows)``)."""
        ids = self._array(self.tables[name]["ids"], np.dtype(np.int64), None)
        if ids.ndim != 1:
            raise StorageError(f"{self.where(self.tables[name]['ids']['path'])}: IDs not 1-D")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_rows):
            raise StorageError(
                f"{self.where(self.tables[name]['ids']['path'])}: row IDs outside [0, {num_rows})"
            )
        return ids

    def array(self, name: str, array: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """Array ``array`` of table ``name``, checked to be ``dtype`` and ``shape``."""
        return self._array(self.tables[name]["arrays"][array], dtype, shape)

    def _array(self, info: Any, dtype: np.dtype, shape: tuple[int, ...] | None) -> np.ndarray:
        if not isinstance(info, dict) or not isinstance(info.get("path"), str):
            raise StorageError(f"{self.where()}: a file entry is malformed")
        rel = info["path"]
        where = self.where(rel)
        if "/" in rel or rel.startswith(".") or not rel.endswith(".npy"):
            raise StorageError(f"{self.where()}: file name {rel!r} is refused")
        size = int(info.get("bytes", -1))
        data = storage.read_bytes(storage.join(self.url, rel), max_bytes=max(size, 0))
        if len(data) != size:
            raise StorageError(f"{where}: {len(data)} bytes, {META} says {size} (truncated?)")
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise StorageError(f"{where}: sha256 does not match {META} (corrupted or replaced)")
        head = io.BytesIO(data)
        try:
            got_shape, fortran, got_dtype = npy.read_header(head)
        except Exception as e:  # untrusted header text
            raise StorageError(f"{where}: not a readable .npy file ({str(e)[:200]})") from e
        if got_dtype.hasobject or (fortran and len(got_shape) > 1):
            raise StorageError(f"{where}: object or Fortran-ordered arrays are refused")
        if got_dtype != dtype:
            raise StorageError(f"{where}: dtype {got_dtype}, expected {dtype}")
        if shape is not None and tuple(got_shape) != tuple(shape):
            raise StorageError(f"{where}: shape {tuple(got_shape)}, expected {tuple(shape)}")
        count = math.prod(got_shape)
        if head.tell() + count * got_dtype.itemsize != len(data):
            raise StorageError(f"{where}: header says {got_shape} but the data size differs")
        return np.frombuffer(data, got_dtype, count, head.tell()).reshape(got_shape)


def read(url: str) -> Saved | None:
    """The folder at ``url`` (None when it has no ``meta.json``); StorageError when its
    ``meta.json`` is not one :func:`write` wrote."""
    meta_url = storage.join(url, META)
    if not storage.exists(meta_url):
        return None
    where = storage.redact(meta_url)
    try:
        obj = json.loads(storage.read_bytes(meta_url, max_bytes=MAX_META_BYTES))
    except ValueError as e:
        raise StorageError(f"{where}: not JSON ({e})") from e
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise StorageError(f"{where}: not a {FORMAT} folder")
    if obj.get("version") != VERSION:
        raise StorageError(f"{where}: version {obj.get('version')!r}, this reads {VERSION}")
    world = obj.get("world_size")
    tables, params = obj.get("tables"), obj.get("params")
    if not isinstance(world, int) or world < 1:
        raise StorageError(f"{where}: world_size {world!r} is not a positive integer")
    if not isinstance(tables, dict) or not isinstance(params, dict):
        raise StorageError(f"{where}: tables or params malformed")
    for name, t in tables.items():
        if not isinstance(t, dict) or not isinstance(t.get("arrays"), dict) or "ids" not in t:
            raise StorageError(f"{where}: table {name!r} malformed")
    return Saved(url, str(obj.get("kind")), params, world, tables)


def _load_one(saved: Saved, kind: str, tables: dict[str, Table], chunk: int) -> None:
    """Write the rows of ``saved`` into ``tables``' tensors (checked first)."""
    if saved.kind != kind:
        raise ConfigError(f"{saved.where()}: holds {saved.kind} state, not {kind}'s")
    missing, extra = (
        sorted(set(tables) - set(saved.tables)),
        sorted(set(saved.tables) - set(tables)),
    )
    if missing or extra:
        raise ConfigError(
            f"{saved.where()}: tables {sorted(saved.tables)}, expected {sorted(tables)}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unknown {extra})" if extra else "")
        )
    for name, t in tables.items():
        rec = saved.tables[name]
        if rec.get("num_rows") != t.num_rows:
            raise ConfigError(
                f"{saved.where()}: table {name!r} has {rec.get('num_rows')!r} rows, "
                f"this one {t.num_rows}"
            )
        if set(rec["arrays"]) != set(t.tensors):
            raise ConfigError(
                f"{saved.where()}: table {name!r} saved {sorted(rec['arrays'])}, "
                f"expected {sorted(t.tensors)}"
            )
        ids = saved.ids(name, t.num_rows)
        arrays = {
            an: saved.array(name, an, dt.np_dtype, (len(ids), *dt.shape[1:]))
            for an, dt in t.tensors.items()
        }
        for an, dt in t.tensors.items():
            for k in range(0, len(ids), chunk):
                dt[ids[k : k + chunk]] = arrays[an][k : k + chunk]


def load(
    f: str | os.PathLike[str],
    rank: int,
    world: int,
    kind: str,
    tables: dict[str, Table],
    check: Callable[[Saved], None] | None = None,
    saved_world: int | None = None,
    chunk: int = CHUNK_ROWS,
) -> Saved | None:
    """Load what trainer ``rank`` of ``world`` reads of the folders written at ``f``:
    ``f_RANK`` and, when fewer trainers than at save time, ``f_{RANK+world}``, ...
    (DGL's rule). ``check(saved)`` vets each folder before anything is written.

    ``saved_world`` None (DGL's ``load``): a missing ``f_RANK`` is a warning and loads
    nothing (more trainers than at save time). Given (a checkpoint that recorded it):
    every folder ``RANK, RANK+world, ... < saved_world`` must be there and say so.
    Returns the first folder read (None: none)."""
    first: Saved | None = None
    own: Saved | None = None
    if saved_world is None:
        own = read(rank_url(f, rank))
        if own is None:
            where = storage.redact(storage.join(rank_url(f, rank), META))
            log.warning("saved rows not found, nothing loaded", extra=kv(path=where))
            return None
        ranks = [rank, *range(rank + world, own.world_size, world)]
    else:
        ranks = list(range(rank, saved_world, world))
    for r in ranks:
        s = own if r == rank and own is not None else read(rank_url(f, r))
        if s is None:
            where = storage.redact(storage.join(rank_url(f, r), META))
            raise StorageError(f"{where}: missing (trainer {r}'s rows were not saved)")
        if saved_world is not None and s.world_size != saved_world:
            raise StorageError(
                f"{s.where()}: written by {s.world_size} trainers, expected {saved_world}"
            )
        if check is not None:
            check(s)
        _load_one(s, kind, tables, chunk)
        first = first or s
    return first
