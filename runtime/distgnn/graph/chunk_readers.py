"""Read one chunk file of DGL's chunked graph format, block by block.

Formats (a ``ChunkFileSpec``'s ``format.name``): ``numpy`` (``.npy``, never pickle),
``csv`` (text, no header, ``format.delimiter``; NumPy's parser, no extra dependency) and
``parquet`` (pyarrow, the optional ``distgnn[parquet]`` extra). A file is read in blocks
of a few MiB, so a chunk is never held twice; the caller copies each block into its place.
"""

from __future__ import annotations

import ast
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from distgnn import npy, storage
from distgnn.errors import ConfigError, GraphFormatError

FORMATS = ("csv", "numpy", "parquet")
BLOCK_BYTES = 8 << 20
"""Bytes read (and parsed) at a time."""
MAX_LINE_BYTES = 1 << 20
"""Longest CSV line accepted: a file without line breaks is refused, not read whole."""
_DATA_KINDS = "biuf"


@dataclass(frozen=True)
class ChunkFormat:
    """A ``ChunkFileSpec``'s ``format``: its ``name`` and, for CSV, its ``delimiter``."""

    name: str
    delimiter: str = ","


def read_blocks(
    url: str,
    fmt: ChunkFormat,
    where: str,
    *,
    ids: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[np.ndarray]:
    """The rows of the chunk file at ``url``, in file order, as arrays of up to a few MiB.

    ``ids``: the file holds edges (``src dst`` rows): CSV is parsed as int64 and every
    block is ``(rows, columns)``. Otherwise it holds node or edge data: ``numpy`` blocks
    are ``(rows, *row_shape)`` in the file's dtype (native byte order); CSV (int64, else
    float64) and parquet blocks are ``(rows,)`` for one column, else ``(rows, columns)``,
    unless a parquet file's ``shape`` metadata (DGL's writer sets it) says otherwise.
    Errors name ``where`` (the field of metadata.json and the file).
    """
    if fmt.name == "parquet":
        pq = _parquet_module(where)
        with storage.open_read(url, storage_options) as f:
            yield from _parquet_blocks(pq, f, where, squeeze=not ids)
        return
    with storage.open_read(url, storage_options) as f:
        if fmt.name == "numpy":
            yield from _numpy_blocks(f, where)
        elif fmt.name == "csv":
            yield from _csv_blocks(f, fmt.delimiter, where, ids=ids)
        else:  # parse_format refuses other names; a caller's mistake
            raise GraphFormatError(f"{where}: unknown format {fmt.name!r}")


# -- numpy ---------------------------------------------------------------------------


def _read_full(f: Any, view: memoryview) -> int:
    """Fill ``view`` from ``f``; the number of bytes read (fewer only at the file's end)."""
    pos = 0
    while pos < len(view):
        n = f.readinto(view[pos:])
        if not n:
            break
        pos += n
    return pos


def _buffer(nbytes: int, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``nbytes`` uninitialised bytes to read into (pages are touched only as data
    arrives); GraphFormatError when a (corrupt) header's shape cannot be allocated."""
    try:
        return np.empty(nbytes, dtype=np.uint8)
    except (MemoryError, ValueError, OverflowError) as e:
        raise GraphFormatError(
            f"{where}: the header's shape {shape} needs {nbytes} bytes, which cannot be "
            f"allocated ({type(e).__name__}); a corrupt .npy file?"
        ) from e


def _numpy_blocks(f: BinaryIO, where: str) -> Iterator[np.ndarray]:
    try:
        shape, fortran, dtype = npy.read_header(f)
    except Exception as e:  # untrusted header text: ValueError, SyntaxError, ...
        raise GraphFormatError(f"{where}: not a readable .npy file ({str(e)[:200]})") from e
    if dtype.hasobject or dtype.kind not in _DATA_KINDS or dtype.fields is not None:
        raise GraphFormatError(f"{where}: dtype {dtype} is not numeric or bool")
    if not shape:
        raise GraphFormatError(f"{where}: a 0-d array; a chunk holds one row per node or edge")
    native = dtype.newbyteorder("=")
    rows, row_shape = int(shape[0]), tuple(int(x) for x in shape[1:])
    row_bytes = math.prod(row_shape) * dtype.itemsize
    if fortran and len(shape) > 1:  # column-major: rows are not contiguous, read it whole
        buf = _buffer(rows * row_bytes, shape, where)
        got = _read_full(f, buf.data)
        if got < len(buf):
            raise GraphFormatError(f"{where}: truncated ({got} of {len(buf)} data bytes)")
        yield np.frombuffer(buf, dtype).reshape(shape[::-1]).T.astype(native, order="C")
        return
    per = max(1, BLOCK_BYTES // max(1, row_bytes))
    for start in range(0, rows, per):
        n = min(per, rows - start)
        buf = _buffer(n * row_bytes, shape, where)
        got = _read_full(f, buf.data)
        if got < len(buf):
            done = start + got // max(1, row_bytes)
            raise GraphFormatError(f"{where}: truncated (ends after {done} of {rows} rows)")
        yield np.frombuffer(buf, dtype).reshape(n, *row_shape).astype(native, copy=False)
    if rows == 0:
        yield np.empty((0, *row_shape), dtype=native)


# -- csv -----------------------------------------------------------------------------


def _csv_blocks(f: BinaryIO, delimiter: str, where: str, *, ids: bool) -> Iterator[np.ndarray]:
    """Whole lines, a block at a time, parsed by ``np.loadtxt`` (no comments, no quotes)."""
    carry = b""
    line = 1  # number of the block's first line
    while True:
        data = f.read(BLOCK_BYTES)
        buf = carry + data if data else carry
        if data:
            cut = buf.rfind(b"\n") + 1
            text, carry = buf[:cut], buf[cut:]
        else:
            text, carry = buf, b""
        if len(carry) > MAX_LINE_BYTES:
            at = line + text.count(b"\n")
            what = "edges" if ids else "data"
            raise GraphFormatError(
                f"{where}: line {at} is longer than {MAX_LINE_BYTES} bytes "
                f"(not a CSV file of {what}?)"
            )
        if text.strip():
            yield _parse_csv(text, delimiter, where, line, ids=ids)
        line += text.count(b"\n")
        if not data:
            return


def _parse_csv(text: bytes, delimiter: str, where: str, line: int, *, ids: bool) -> np.ndarray:
    err: ValueError | None = None
    for dtype in (np.int64,) if ids else (np.int64, np.float64):
        try:
            a = np.loadtxt(
                io.BytesIO(text),
                dtype=dtype,
                delimiter=delimiter,
                comments=None,
                ndmin=2,
                encoding="utf-8",
            )
        except ValueError as e:
            err = e
            continue
        return a if ids or a.shape[1] != 1 else a[:, 0]
    bad = _first_bad_line(text, delimiter, ids=ids)
    at, why = bad if bad is not None else (0, str(err)[:300])
    raise GraphFormatError(
        f"{where}: line {line + at}: {why} (format.delimiter is {delimiter!r}; "
        f"{'edges are integer IDs' if ids else 'data are numbers'}, no header line)"
    )


def _first_bad_line(text: bytes, delimiter: str, *, ids: bool) -> tuple[int, str] | None:
    """(index, reason) of the first line NumPy could not parse (only after it failed)."""
    width = None
    for i, raw in enumerate(text.split(b"\n")):
        s = raw.decode("utf-8", "replace").rstrip("\r")
        if not s.strip():
            continue
        fields = s.split(delimiter)
        width = len(fields) if width is None else width
        if len(fields) != width:
            return i, f"{len(fields)} fields, the lines before have {width}"
        for f in fields:
            try:
                int(f) if ids else float(f)
            except ValueError:
                return i, f"{f[:40]!r} is not {'an integer' if ids else 'a number'}"
    return None


# -- parquet -------------------------------------------------------------------------


def _parquet_module(where: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(
            f"{where}: format 'parquet' needs pyarrow, which is not installed "
            "(pip install 'distgnn[parquet]')"
        ) from e
    return pq


def _shape_of(meta: Mapping[bytes, bytes] | None, where: str) -> tuple[int, ...] | None:
    """The ``shape`` schema metadata DGL's parquet writer records (``b"(N, D)"``)."""
    raw = (meta or {}).get(b"shape")
    if raw is None:
        return None
    try:
        shape = ast.literal_eval(raw.decode("utf-8", "replace")[:200])
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise GraphFormatError(f"{where}: metadata 'shape' {raw[:60]!r} is not a tuple") from e
    if (
        not isinstance(shape, tuple | list)
        or not shape
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
    ):
        raise GraphFormatError(f"{where}: metadata 'shape' {raw[:60]!r} is not a shape")
    return tuple(shape)


def _parquet_blocks(pq: Any, f: BinaryIO, where: str, *, squeeze: bool) -> Iterator[np.ndarray]:
    import pyarrow as pa

    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise GraphFormatError(f"{where}: not a readable parquet file ({str(e)[:200]})") from e
    schema = pf.schema_arrow
    shape = _shape_of(schema.metadata, where)
    names = [n for n in schema.names if not n.startswith("__index_level_")]  # pandas' index
    if not names:
        raise GraphFormatError(f"{where}: no columns")
    rows = int(pf.metadata.num_rows)
    if shape is not None and shape[0] != rows:
        raise GraphFormatError(f"{where}: metadata 'shape' {shape} but {rows} rows")
    batch = max(1, BLOCK_BYTES // _row_bytes(pf.metadata, rows, len(names)))
    try:
        for rb in pf.iter_batches(batch_size=batch, columns=names):
            a = _batch_array(pa, rb, where)
            if shape is not None:
                if math.prod(shape[1:]) != math.prod(a.shape[1:]):
                    raise GraphFormatError(
                        f"{where}: metadata 'shape' {shape} does not fit rows of "
                        f"{math.prod(a.shape[1:])} values"
                    )
                a = a.reshape(a.shape[0], *shape[1:])
            elif squeeze and a.ndim == 2 and a.shape[1] == 1:
                a = a[:, 0]
            yield a
    except (pa.ArrowException, ValueError) as e:
        if isinstance(e, GraphFormatError):
            raise
        raise GraphFormatError(f"{where}: unreadable parquet data ({str(e)[:200]})") from e


def _row_bytes(meta: Any, rows: int, columns: int) -> int:
    """Bytes a row takes uncompressed (the row groups' sizes; a list column's rows hold
    all their values), at least 8 per column."""
    total = sum(int(meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
    return max(8 * columns, -(-total // max(1, rows)))


def _batch_array(pa: Any, rb: Any, where: str) -> np.ndarray:
    """``(rows, columns)`` of numeric columns, or ``(rows, k)`` of one column of
    equal-length lists (Spark's vector rows)."""
    import pyarrow.compute as pc

    cols, names = rb.columns, rb.schema.names
    if len(cols) == 1 and isinstance(
        cols[0].type, pa.ListType | pa.LargeListType | pa.FixedSizeListType
    ):
        col, name = cols[0], names[0]
        if col.null_count:
            raise GraphFormatError(f"{where}: column {name!r} has null rows")
        n = len(col)
        lengths = np.asarray(pc.list_value_length(col))
        k = int(lengths[0]) if n else 0
        if (lengths != k).any():
            raise GraphFormatError(f"{where}: the lists of column {name!r} differ in length")
        return _column(pa, col.flatten(), name, where).reshape(n, k)
    arrays = [_column(pa, c, name, where) for c, name in zip(cols, names, strict=True)]
    return np.stack(arrays, axis=1) if len(arrays) > 1 else arrays[0][:, None]


def _column(pa: Any, col: Any, name: str, where: str) -> np.ndarray:
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        raise GraphFormatError(f"{where}: column {name!r} is {t}, not numeric or bool")
    if col.null_count:
        raise GraphFormatError(f"{where}: column {name!r} has {col.null_count} null values")
    return np.asarray(col.to_numpy(zero_copy_only=False))
