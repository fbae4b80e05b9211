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
time). Loading streams the files too, in two passes of bounded reads (at most
``READ_BYTES`` of rows across a table's files at a time, never a whole file): the first
checks every file of every folder it reads against ``meta.json`` (size, the ``.npy``
header read without NumPy's pickle-capable loader, dtype, shape, sha256 over all the
file's bytes, row IDs in range) before any row is written, and refuses, naming the file,
what does not match; the second reads the rows again, chunk by chunk, into the servers,
hashing again (a file replaced in between is refused, naming it).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
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
READ_BYTES = 16 << 20
MAX_META_BYTES = 16 << 20
MAX_HEADER_BYTES = 1 << 16


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
    """One table: its rows ``ids`` (what :func:`write` saves; None when loading, which
    takes them from the files) of each named tensor (``name -> DistTensor``, all
    ``num_rows`` long)."""

    num_rows: int
    ids: np.ndarray | None
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
        if t.ids is None:
            raise ValueError(f"table {name!r}: no row IDs to write")
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
class _File:
    """One file entry of ``meta.json``, the name vetted, and what it must hold."""

    url: str
    where: str
    size: int
    sha256: Any
    dtype: np.dtype
    shape: tuple[int, ...]


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

    def file(self, info: Any, dtype: np.dtype, shape: tuple[int, ...]) -> _File:
        """The entry ``info`` of ``meta.json`` (a file of ``dtype`` and ``shape``)."""
        if not isinstance(info, dict) or not isinstance(info.get("path"), str):
            raise StorageError(f"{self.where()}: a file entry is malformed")
        rel = info["path"]
        if "/" in rel or rel.startswith(".") or not rel.endswith(".npy"):
            raise StorageError(f"{self.where()}: file name {rel!r} is refused")
        size = info.get("bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise StorageError(f"{self.where(rel)}: {META} gives no size")
        url = storage.join(self.url, rel)
        return _File(url, storage.redact(url), size, info.get("sha256"), np.dtype(dtype), shape)

    def table_files(self, name: str, t: Table) -> tuple[_File, dict[str, _File]]:
        """Table ``name``'s IDs file and one file per tensor of ``t``, rows of ``t``'s
        row shape (the IDs' count read from their file's header when streamed)."""
        rec = self.tables[name]
        n = _rows_in(rec["ids"])
        ids = self.file(rec["ids"], np.dtype(np.int64), (n,))
        arrays = {
            an: self.file(rec["arrays"][an], dt.np_dtype, (n, *dt.shape[1:]))
            for an, dt in t.tensors.items()
        }
        return ids, arrays


def _rows_in(info: Any) -> int:
    """The row count ``meta.json`` records for a file (its shape's first entry)."""
    shape = info.get("shape") if isinstance(info, dict) else None
    if not isinstance(shape, list) or not shape or not isinstance(shape[0], int):
        return -1
    return int(shape[0])


def _header(f: _File, fh: Any) -> bytes:
    """The ``.npy`` header at the start of ``fh``, read in at most two bounded reads."""
    pre = fh.read(12)
    try:
        major, _ = np.lib.format.read_magic(io.BytesIO(pre))
    except Exception as e:  # untrusted bytes
        raise StorageError(f"{f.where}: not a readable .npy file ({str(e)[:200]})") from e
    if major == 1:
        start, hlen = 10, int.from_bytes(pre[8:10], "little")
    else:
        start, hlen = 12, int.from_bytes(pre[8:12], "little")
    if start + hlen > MAX_HEADER_BYTES:
        raise StorageError(f"{f.where}: .npy header of {hlen} bytes is refused")
    return pre + fh.read(max(0, start + hlen - len(pre)))


def stream(f: _File, rows: int) -> Iterator[np.ndarray]:
    """The rows of ``f``, ``rows`` at a time (each chunk one read, then dropped), after
    checking its size, header, dtype and shape; once all are read, its sha256. Every
    mismatch is a StorageError naming the file."""
    with storage.open_read(f.url) as fh:
        size = fh.seek(0, os.SEEK_END)
        if size != f.size:
            raise StorageError(f"{f.where}: {size} bytes, {META} says {f.size} (truncated?)")
        fh.seek(0)
        head = _header(f, fh)
        bio = io.BytesIO(head)
        try:
            got_shape, fortran, got_dtype = npy.read_header(bio)
        except Exception as e:  # untrusted header text
            raise StorageError(f"{f.where}: not a readable .npy file ({str(e)[:200]})") from e
        if bio.tell() != len(head):
            raise StorageError(f"{f.where}: not a readable .npy file (header length)")
        if got_dtype.hasobject or (fortran and len(got_shape) > 1):
            raise StorageError(f"{f.where}: object or Fortran-ordered arrays are refused")
        if got_dtype != f.dtype:
            raise StorageError(f"{f.where}: dtype {got_dtype}, expected {f.dtype}")
        if tuple(got_shape) != tuple(f.shape):
            raise StorageError(f"{f.where}: shape {tuple(got_shape)}, expected {tuple(f.shape)}")
        row = f.shape[1:]
        row_bytes = math.prod(row) * got_dtype.itemsize
        total = f.shape[0]
        if len(head) + total * row_bytes != size:
            raise StorageError(f"{f.where}: header says {got_shape} but the data size differs")
        digest = hashlib.sha256(head)
        for k in range(0, total, max(1, rows)):
            n = min(max(1, rows), total - k)
            data = fh.read(n * row_bytes)
            if len(data) != n * row_bytes:
                raise StorageError(f"{f.where}: shorter than its header says (truncated?)")
            digest.update(data)
            yield np.frombuffer(data, got_dtype).reshape(n, *row)
        if digest.hexdigest() != f.sha256:
            raise StorageError(f"{f.where}: sha256 does not match {META} (corrupted or replaced)")


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


def _check(saved: Saved, kind: str, tables: dict[str, Table]) -> None:
    """ConfigError unless ``saved`` holds ``kind``'s state of exactly ``tables``."""
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


def _chunk_rows(files: list[_File], chunk: int) -> int:
    """Rows per read: at most ``chunk``, and at most ``READ_BYTES`` across ``files``."""
    per_row = sum(math.prod(f.shape[1:]) * f.dtype.itemsize for f in files)
    return max(1, min(chunk, READ_BYTES // max(1, per_row)))


def _verify(saved: Saved, tables: dict[str, Table], chunk: int) -> None:
    """Every file of ``saved`` read through once (bounded reads): its size, header,
    sha256, and the row IDs in range; nothing is written."""
    for name, t in tables.items():
        ids, arrays = saved.table_files(name, t)
        lo, hi = 0, -1
        for c in stream(ids, _chunk_rows([ids], chunk)):
            if c.size:
                lo, hi = min(lo, int(c.min())), max(hi, int(c.max()))
        if lo < 0 or hi >= t.num_rows:
            raise StorageError(f"{ids.where}: row IDs outside [0, {t.num_rows})")
        for f in arrays.values():
            for _ in stream(f, _chunk_rows([f], chunk)):
                pass


def _write_rows(saved: Saved, tables: dict[str, Table], chunk: int) -> None:
    """The rows of ``saved`` (verified) into ``tables``' tensors, one bounded chunk of
    the IDs and of every array at a time."""
    for name, t in tables.items():
        ids, arrays = saved.table_files(name, t)
        rows = _chunk_rows([ids, *arrays.values()], chunk)
        names = list(arrays)
        streams = [stream(ids, rows), *(stream(arrays[an], rows) for an in names)]
        # strict: once the IDs end, every array is read to its end (its sha256 checked)
        for idx, *vals in zip(*streams, strict=True):
            for an, v in zip(names, vals, strict=True):
                t.tensors[an][idx] = v


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
    Every folder is checked (files, sizes, checksums) before any row is written; rows
    are read and written ``chunk`` rows at a time (fewer where ``READ_BYTES`` says).
    Returns the first folder read (None: none)."""
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
    folders: list[Saved] = []
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
        _check(s, kind, tables)
        folders.append(s)
    for s in folders:  # every folder checked, whole, before any row is written
        _verify(s, tables, chunk)
    for s in folders:
        _write_rows(s, tables, chunk)
    return folders[0] if folders else None
