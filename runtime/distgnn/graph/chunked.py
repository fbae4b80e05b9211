"""DGL's chunked graph format (``metadata.json`` and its chunk files) as an input graph.

``metadata.json`` names the node types (``node_type``) and canonical edge types
(``edge_type``, ``SRC:REL:DST``), their sizes (``num_nodes_per_chunk`` /
``num_edges_per_chunk``, or the totals ``num_nodes_per_type`` / ``num_edges_per_type``),
the edge chunks (``edges``: per edge type a ``format`` and the ``data`` files, rows of
type-wise ``src dst`` IDs) and the node / edge data (``node_data`` / ``edge_data``: per
type per field a ``format`` and ``data`` files, concatenated in order). Chunk paths are
relative to metadata.json's folder (any fsspec URL) or absolute.

The chunks are read into the arrays of DistGNN's own input layout (docs/partition-format.md):
``_N`` / ``_N:_E:_N`` give the homogeneous keys, any other types the heterogeneous ones,
so a graph partitions exactly as the same graph given as ``.npz``. Every chunk is copied
block by block into one array per field, allocated once from the declared counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from distgnn import storage
from distgnn.errors import GraphFormatError, StorageError
from distgnn.graph.chunk_readers import FORMATS, ChunkFormat, read_blocks
from distgnn.graph.data import DEFAULT_ETYPE, DEFAULT_NTYPE, CanonicalEtype, etype_str

MAX_METADATA_BYTES = 64 << 20
"""Largest metadata.json read."""
METADATA = "metadata.json"
_HOMO_RESERVED = frozenset({"src", "dst", "indptr", "indices", "num_nodes"})


@dataclass(frozen=True)
class ChunkFiles:
    """One ``ChunkFileSpec``: where it is in metadata.json, its format, its files' URLs."""

    field: str
    format: ChunkFormat
    urls: list[str]


@dataclass(frozen=True)
class ChunkedGraph:
    """A parsed metadata.json: types, sizes and the chunk files of every array."""

    source: str
    node_types: list[str]
    edge_types: list[CanonicalEtype]
    num_nodes: dict[str, int]
    num_edges: dict[str, int]
    edge_chunk_rows: dict[str, list[int] | None]
    """Rows of each edge chunk (``num_edges_per_chunk``), None where only totals are given."""
    edges: dict[str, ChunkFiles]
    node_data: dict[str, dict[str, ChunkFiles]]
    edge_data: dict[str, dict[str, ChunkFiles]]

    @property
    def is_homogeneous(self) -> bool:
        return self.node_types == [DEFAULT_NTYPE] and self.edge_types == [DEFAULT_ETYPE]


def is_chunked(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` names a chunked graph: a ``.json`` file, or a folder holding
    ``metadata.json`` (the folder DGL's pipeline takes as ``--in-dir``)."""
    if url.rstrip("/").endswith(".json"):
        return True
    fs, path = storage.get_fs(url, storage_options)
    with storage.errors_for(url):
        return bool(fs.isdir(path)) and bool(fs.isfile(path.rstrip("/") + "/" + METADATA))


def metadata_url(url: str) -> str:
    """The metadata.json of a chunked graph given as the file or its folder."""
    return url if url.rstrip("/").endswith(".json") else storage.join(url, METADATA)


def read_chunked(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """The arrays (keys of DistGNN's input layout) of the chunked graph at ``url``."""
    meta_url = metadata_url(url)
    raw = storage.read_bytes(meta_url, storage_options, max_bytes=MAX_METADATA_BYTES)
    where = storage.redact(meta_url)
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise GraphFormatError(f"{where}: not valid JSON ({str(e)[:200]})") from e
    g = parse_metadata(obj, meta_url)
    return _Reader(g, storage_options).arrays()


# -- metadata.json -------------------------------------------------------------------


def _chunk_url(base: str, path: str, meta_url: str, field: str) -> str:
    """A chunk path of metadata.json as a URL: relative to its folder, or absolute."""
    if "://" in path:
        return path
    if path.startswith("/"):
        if storage.is_local(base):
            return path
        raise GraphFormatError(
            f"{storage.redact(meta_url)}: {field}: absolute path {path!r} in a metadata.json "
            "that is not on the local file system; write chunk paths relative to "
            "metadata.json (DGL's chunk_graph writes absolute local ones)"
        )
    return storage.join(base, path)


class _Parser:
    def __init__(self, meta_url: str) -> None:
        self.url = meta_url
        self.source = storage.redact(meta_url)
        self.base = storage.dirname(meta_url)

    def err(self, field: str, msg: str) -> GraphFormatError:
        return GraphFormatError(f"{self.source}: {field}: {msg}")

    def names(self, obj: dict[str, Any], key: str) -> list[str]:
        v = obj.get(key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.err(key, "missing or not a list of names")
        if len(set(v)) != len(v):
            raise self.err(key, "names repeat")
        return v

    def type_name(self, name: str, field: str) -> None:
        if not name or any(c in name for c in ":/\\") or name.startswith("."):
            raise self.err(field, f"bad type name {name!r}")

    def counts(
        self, obj: dict[str, Any], what: str, types: list[str]
    ) -> tuple[dict[str, int], dict[str, list[int] | None]]:
        """Totals and per-chunk rows from ``num_{what}_per_chunk`` / ``num_{what}_per_type``."""
        chunk_key, type_key = f"num_{what}_per_chunk", f"num_{what}_per_type"
        totals: dict[str, int] = {}
        chunks: dict[str, list[int] | None] = dict.fromkeys(types)
        if chunk_key in obj:
            v = obj[chunk_key]
            if not isinstance(v, list) or len(v) != len(types):
                raise self.err(chunk_key, f"expected a list of {len(types)} lists (one per type)")
            for i, (t, rows) in enumerate(zip(types, v, strict=True)):
                if not isinstance(rows, list) or not all(_count(x) for x in rows):
                    raise self.err(f"{chunk_key}[{i}]", "expected a list of counts >= 0")
                chunks[t] = rows
                totals[t] = sum(rows)
        if type_key in obj:
            v = obj[type_key]
            if not isinstance(v, list) or len(v) != len(types) or not all(_count(x) for x in v):
                raise self.err(type_key, f"expected a list of {len(types)} counts >= 0")
            for i, (t, n) in enumerate(zip(types, v, strict=True)):
                if t in totals and totals[t] != n:
                    raise self.err(
                        f"{type_key}[{i}]", f"is {n} but {chunk_key}[{i}] sums to {totals[t]}"
                    )
                totals[t] = n
        if len(totals) != len(types):
            raise self.err(chunk_key, "missing (nor is there a " + type_key + ")")
        return totals, chunks

    def chunk_files(self, spec: Any, field: str) -> ChunkFiles:
        if not isinstance(spec, dict):
            raise self.err(field, "expected an object with 'format' and 'data'")
        fmt = spec.get("format")
        if not isinstance(fmt, dict) or not isinstance(fmt.get("name"), str):
            raise self.err(f"{field}.format", "expected an object with a 'name'")
        name = fmt["name"]
        if name not in FORMATS:
            raise self.err(f"{field}.format.name", f"unknown format {name!r} (one of {FORMATS})")
        delimiter = fmt.get("delimiter", ",")
        if name == "csv" and (
            not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\"'"
        ):
            raise self.err(f"{field}.format.delimiter", f"{delimiter!r} is not one character")
        data = spec.get("data")
        if not isinstance(data, list) or not all(isinstance(p, str) and p for p in data):
            raise self.err(f"{field}.data", "expected a list of file paths")
        urls = [
            _chunk_url(self.base, p, self.url, f"{field}.data[{i}]") for i, p in enumerate(data)
        ]
        return ChunkFiles(field, ChunkFormat(name, delimiter if name == "csv" else ","), urls)

    def data_specs(
        self, obj: dict[str, Any], key: str, types: list[str], homogeneous: bool
    ) -> dict[str, dict[str, ChunkFiles]]:
        v = obj.get(key, {})
        if not isinstance(v, dict):
            raise self.err(key, "expected an object keyed by type")
        out: dict[str, dict[str, ChunkFiles]] = {t: {} for t in types}
        for t, fields in v.items():
            if t not in out:
                raise self.err(f"{key}[{t!r}]", f"unknown type (not in {types})")
            if not isinstance(fields, dict):
                raise self.err(f"{key}[{t!r}]", "expected an object keyed by field name")
            for name, spec in fields.items():
                field = f"{key}[{t!r}][{name!r}]"
                if not name or "/" in name or name.startswith("."):
                    raise self.err(field, "bad field name")
                if homogeneous and key == "node_data" and name in _HOMO_RESERVED:
                    raise self.err(field, f"the name is reserved ({sorted(_HOMO_RESERVED)})")
                out[t][name] = self.chunk_files(spec, field)
        return out

    def graph(self, obj: Any) -> ChunkedGraph:
        if not isinstance(obj, dict):
            raise GraphFormatError(f"{self.source}: expected a JSON object")
        ntypes = self.names(obj, "node_type")
        for i, t in enumerate(ntypes):
            self.type_name(t, f"node_type[{i}]")
        enames = self.names(obj, "edge_type")
        etypes: list[CanonicalEtype] = []
        for i, e in enumerate(enames):
            parts = e.split(":")
            if len(parts) != 3:
                raise self.err(
                    f"edge_type[{i}]",
                    f"{e!r} is not SRC:REL:DST (DGL's tools/change_etype_to_canonical_etype.py "
                    "converts older metadata)",
                )
            for p in parts:
                self.type_name(p, f"edge_type[{i}]")
            for end in (parts[0], parts[2]):
                if end not in ntypes:
                    raise self.err(f"edge_type[{i}]", f"node type {end!r} is not in node_type")
            etypes.append((parts[0], parts[1], parts[2]))
        num_nodes, _ = self.counts(obj, "nodes", ntypes)
        num_edges, edge_chunks = self.counts(obj, "edges", enames)
        edges_obj = obj.get("edges")
        if not isinstance(edges_obj, dict):
            raise self.err("edges", "missing or not an object keyed by edge type")
        for e in edges_obj:
            if e not in enames:
                raise self.err(f"edges[{e!r}]", "not in edge_type")
        edges: dict[str, ChunkFiles] = {}
        for i, e in enumerate(enames):
            if e not in edges_obj:
                raise self.err(f"edges[{e!r}]", "missing (every edge type needs its edges)")
            files = self.chunk_files(edges_obj[e], f"edges[{e!r}]")
            rows = edge_chunks[e]
            if rows is not None and len(rows) != len(files.urls):
                raise self.err(
                    f"edges[{e!r}].data",
                    f"{len(files.urls)} files but num_edges_per_chunk[{i}] has {len(rows)} chunks",
                )
            edges[e] = files
        homogeneous = ntypes == [DEFAULT_NTYPE] and etypes == [DEFAULT_ETYPE]
        return ChunkedGraph(
            source=self.source,
            node_types=ntypes,
            edge_types=etypes,
            num_nodes=num_nodes,
            num_edges=num_edges,
            edge_chunk_rows=edge_chunks,
            edges=edges,
            node_data=self.data_specs(obj, "node_data", ntypes, homogeneous),
            edge_data=self.data_specs(obj, "edge_data", enames, homogeneous),
        )


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def parse_metadata(obj: Any, meta_url: str) -> ChunkedGraph:
    """Validate a parsed metadata.json; chunk paths become URLs (GraphFormatError if bad)."""
    return _Parser(meta_url).graph(obj)


# -- chunks --------------------------------------------------------------------------


class _Column:
    """One array of ``total`` rows filled block by block in chunk order; allocated at the
    first block (its dtype and row shape) unless ``dtype`` is given, checked against the
    declared row count. ``field`` names it in errors."""

    def __init__(self, total: int, field: str, dtype: np.dtype | None = None) -> None:
        self.total, self.field = total, field
        self.pos = 0
        self.out = None if dtype is None else self._empty((total,), dtype)

    def _empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        try:
            return np.empty(shape, dtype=dtype)
        except (MemoryError, ValueError) as e:  # a declared count far too large
            raise GraphFormatError(
                f"{self.field}: cannot allocate {shape[0]} rows of {dtype} ({str(e)[:100]}); "
                "are the declared counts right?"
            ) from e

    def add(self, block: np.ndarray, where: str) -> None:
        n = int(block.shape[0])
        if self.out is None:
            self.out = self._empty((self.total, *block.shape[1:]), block.dtype)
        elif block.shape[1:] != self.out.shape[1:]:
            raise GraphFormatError(
                f"{where}: rows of shape {block.shape[1:]}, the first chunk's are "
                f"{self.out.shape[1:]}"
            )
        elif block.dtype != self.out.dtype:
            wider = np.result_type(self.out.dtype, block.dtype)
            if wider != self.out.dtype:  # CSV: integers first, a float later
                self.out = self.out.astype(wider)
        if self.pos + n > self.total:
            raise GraphFormatError(f"{where}: more rows than the {self.total} declared")
        self.out[self.pos : self.pos + n] = block
        self.pos += n

    def result(self) -> np.ndarray:
        if self.pos != self.total:
            raise GraphFormatError(f"{self.field}: {self.pos} rows, {self.total} declared")
        return self.out if self.out is not None else np.zeros(self.total, np.float32)


class _Reader:
    def __init__(self, g: ChunkedGraph, storage_options: Mapping[str, Any] | None) -> None:
        self.g = g
        self.opts = storage_options

    def where(self, files: ChunkFiles, i: int) -> str:
        return f"{self.g.source}: {files.field}.data[{i}] ({storage.redact(files.urls[i])})"

    def blocks(self, files: ChunkFiles, i: int, *, ids: bool) -> Iterator[np.ndarray]:
        where = self.where(files, i)
        try:
            yield from read_blocks(
                files.urls[i], files.format, where, ids=ids, storage_options=self.opts
            )
        except StorageError as e:  # missing, unreadable: name the field too
            raise type(e)(f"{self.g.source}: {files.field}.data[{i}]: {e}") from e

    def edges(self, name: str, etype: CanonicalEtype) -> tuple[np.ndarray, np.ndarray]:
        files, total = self.g.edges[name], self.g.num_edges[name]
        rows = self.g.edge_chunk_rows[name]
        field = f"{self.g.source}: {files.field}"
        src = _Column(total, field, np.dtype(np.int64))
        dst = _Column(total, field, np.dtype(np.int64))
        limits = (self.g.num_nodes[etype[0]], self.g.num_nodes[etype[2]])
        for i in range(len(files.urls)):
            where, start = self.where(files, i), src.pos
            for b in self.blocks(files, i, ids=True):
                if b.ndim != 2 or b.shape[1] != 2 or b.dtype.kind not in "iu":
                    shape = b.shape[1:] if b.ndim else b.shape
                    raise GraphFormatError(
                        f"{where}: rows of {shape} {b.dtype}; edges are rows of 2 integer "
                        f"IDs (src dst){_delimiter_hint(files.format)}"
                    )
                for col, end, limit in ((b[:, 0], "src", limits[0]), (b[:, 1], "dst", limits[1])):
                    if col.size and (int(col.min()) < 0 or int(col.max()) >= limit):
                        bad = int(col.min()) if int(col.min()) < 0 else int(col.max())
                        raise GraphFormatError(
                            f"{where}: {end} ID {bad} out of range [0, {limit}) "
                            f"({etype[0] if end == 'src' else etype[2]!r} nodes)"
                        )
                pairs = b.astype(np.int64, copy=False)
                src.add(pairs[:, 0], where)
                dst.add(pairs[:, 1], where)
            if rows is not None and src.pos - start != rows[i]:
                raise GraphFormatError(
                    f"{where}: {src.pos - start} edges, num_edges_per_chunk says {rows[i]}"
                )
        return src.result(), dst.result()

    def data(self, files: ChunkFiles, total: int, what: str) -> np.ndarray:
        """One field: its files concatenated (as many files, of any sizes, as DGL allows)."""
        col = _Column(total, f"{self.g.source}: {files.field} ({what})")
        for i in range(len(files.urls)):
            where = self.where(files, i)
            for b in self.blocks(files, i, ids=False):
                col.add(b, where)
        return col.result()

    def arrays(self) -> dict[str, np.ndarray]:
        g = self.g
        out: dict[str, np.ndarray] = {}
        homo = g.is_homogeneous
        for et in g.edge_types:
            name = etype_str(et)
            src, dst = self.edges(name, et)
            if homo:
                out["src"], out["dst"] = src, dst
            else:
                out[f"edges/{name}/src"], out[f"edges/{name}/dst"] = src, dst
            for field, files in sorted(g.edge_data[name].items()):
                key = f"edata/{field}" if homo else f"edata/{name}/{field}"
                out[key] = self.data(files, g.num_edges[name], f"{name!r} edges")
        for t in g.node_types:
            n = g.num_nodes[t]
            if not homo:
                out[f"num_nodes/{t}"] = np.array(n, dtype=np.int64)
            elif not g.node_data[t]:  # else the node data's rows give it, as in a .npz
                out["num_nodes"] = np.array(n, dtype=np.int64)
            for field, files in sorted(g.node_data[t].items()):
                key = field if homo else f"ndata/{t}/{field}"
                out[key] = self.data(files, n, f"{t!r} nodes")
        return out


def _delimiter_hint(fmt: ChunkFormat) -> str:
    return f" separated by format.delimiter {fmt.delimiter!r}" if fmt.name == "csv" else ""
