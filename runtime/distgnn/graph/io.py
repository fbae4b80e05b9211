"""Read and validate input graphs at any fsspec URL: ``.npz`` files, directories of ``.npy``,
and DGL's chunked graph format (``metadata.json``, see :mod:`distgnn.graph.chunked`).

Everything is validated before anything is returned, so a bad graph fails before a
partitioner writes a byte. Local directories are memory-mapped, never copied.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
from collections.abc import Mapping
from typing import Any

import numpy as np

from distgnn import storage
from distgnn.errors import GraphFormatError, StorageError, StorageNotFound
from distgnn.graph import chunked
from distgnn.graph.data import (
    DEFAULT_ETYPE,
    DEFAULT_NTYPE,
    CanonicalEtype,
    GraphData,
    etype_str,
    parse_etype,
)

log = logging.getLogger("distgnn.graph")

_DATA_KINDS = "biuf"


def read_arrays(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """All arrays of a ``.npz`` file, a directory of ``.npy`` files or a chunked graph
    (its ``.json`` metadata or the folder holding ``metadata.json``), by key.

    Keys of a directory are the relative paths without ``.npy`` (``edata/w``).
    Local directories are memory-mapped. Unreadable URLs raise StorageError.
    """
    fs, path = storage.get_fs(url, storage_options)
    where = storage.redact(url)
    try:
        if not fs.exists(path):
            raise StorageNotFound(f"{where}: not found")
        if chunked.is_chunked(url, storage_options):
            return chunked.read_chunked(url, storage_options)
        if fs.isdir(path):
            return _read_dir(fs, path, where, storage.is_local(url))
        return _read_npz(fs, path, where, storage.is_local(url))
    except StorageError:
        raise
    except (PermissionError, FileNotFoundError, ConnectionError) as e:
        raise StorageError(f"{where}: {type(e).__name__}: {e}") from e
    except OSError as e:
        raise StorageError(f"{where}: {e}") from e


def _load_npy(data: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(np.load(data, allow_pickle=False))
    except ValueError as e:
        raise GraphFormatError(f"{name}: not a plain numeric .npy array ({e})") from e


def _read_npz(fs: Any, path: str, where: str, local: bool) -> dict[str, np.ndarray]:
    if not path.endswith(".npz"):
        raise GraphFormatError(
            f"{where}: expected a .npz file, a directory of .npy files or a chunked "
            "graph's metadata.json"
        )
    src: Any = path if local else io.BytesIO(fs.cat_file(path))
    try:
        npz = np.load(src, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise GraphFormatError(f"{where}: not a readable .npz file ({e})") from e
    out: dict[str, np.ndarray] = {}
    with npz:
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise GraphFormatError(f"{where}: not a .npz archive")
        for key in npz.files:
            try:
                out[key] = np.asarray(npz[key])
            except ValueError as e:
                raise GraphFormatError(f"{where}: array {key!r}: {e}") from e
    return out


def _read_dir(fs: Any, path: str, where: str, local: bool) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    root = path.rstrip("/")
    for f in sorted(fs.find(root)):
        if not f.endswith(".npy"):
            continue
        key = posixpath.relpath(f, root)[: -len(".npy")].replace(os.sep, "/")
        name = f"{where}: {key}.npy"
        if local:
            try:
                out[key] = np.load(f, mmap_mode="r", allow_pickle=False)
            except ValueError as e:
                raise GraphFormatError(f"{name}: not a plain numeric .npy array ({e})") from e
        else:
            out[key] = _load_npy(io.BytesIO(fs.cat_file(f)), name)
    if not out:
        raise GraphFormatError(f"{where}: no .npy files in the directory")
    return out


def load_graph(url_or_path: str, storage_options: Mapping[str, Any] | None = None) -> GraphData:
    """Read and fully validate a graph (see docs/partition-format.md, "Input graphs")."""
    url = str(url_or_path)
    arrays = read_arrays(url, storage_options)
    return graph_from_arrays(arrays, source=storage.redact(url))


def graph_from_arrays(arrays: dict[str, np.ndarray], source: str = "<arrays>") -> GraphData:
    """Validate raw arrays (keys as in the input format) and build a :class:`GraphData`."""
    if any(k.startswith("num_nodes/") for k in arrays):
        g = _hetero(arrays, source)
    else:
        g = _homo(arrays, source)
    g.arrays = arrays
    return g


def _err(source: str, key: str, msg: str) -> GraphFormatError:
    return GraphFormatError(f"{source}: array {key!r}: {msg}")


def _id_array(arrays: Mapping[str, np.ndarray], key: str, source: str) -> np.ndarray:
    if key not in arrays:
        raise GraphFormatError(f"{source}: missing array {key!r}")
    a = arrays[key]
    if a.dtype != np.int64:
        raise _err(source, key, f"IDs must be int64, got {a.dtype}")
    if a.ndim != 1:
        raise _err(source, key, f"must be 1-D, got shape {a.shape}")
    return a


def _scalar_count(arrays: Mapping[str, np.ndarray], key: str, source: str) -> int:
    a = arrays[key]
    if a.ndim != 0 or a.dtype.kind not in "iu":
        raise _err(source, key, f"must be an integer scalar, got {a.dtype} {a.shape}")
    n = int(a)
    if n < 0:
        raise _err(source, key, f"must be >= 0, got {n}")
    return n


def _check_range(a: np.ndarray, n: int, key: str, source: str) -> None:
    if a.shape[0] == 0:
        return
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise _err(source, key, f"ID {bad} out of range [0, {n})")


def _check_data(a: np.ndarray, rows: int, key: str, source: str, what: str) -> None:
    if a.dtype.kind not in _DATA_KINDS:
        raise _err(source, key, f"data must be numeric or bool, got {a.dtype}")
    if a.ndim == 0 or a.shape[0] != rows:
        raise _err(source, key, f"expected {rows} rows ({what}), got shape {a.shape}")


def _homo(arrays: dict[str, np.ndarray], source: str) -> GraphData:
    csr = "indptr" in arrays or "indices" in arrays
    coo = "src" in arrays or "dst" in arrays
    if csr and coo:
        raise GraphFormatError(f"{source}: give either src/dst or indptr/indices, not both")
    if not csr and not coo:
        raise GraphFormatError(
            f"{source}: missing arrays 'src' and 'dst' (or 'indptr' and 'indices')"
        )
    reserved = {"src", "dst", "indptr", "indices", "num_nodes"}
    ndata_keys = [k for k in arrays if k not in reserved and not k.startswith("edata/")]
    for k in ndata_keys:
        if "/" in k:
            raise GraphFormatError(f"{source}: unexpected array {k!r} in a homogeneous graph")
    n_given = _scalar_count(arrays, "num_nodes", source) if "num_nodes" in arrays else None
    if csr:
        indptr = _id_array(arrays, "indptr", source)
        dst = _id_array(arrays, "indices", source)
        if indptr.shape[0] == 0:
            raise _err(source, "indptr", "must have N+1 >= 1 entries")
        n = indptr.shape[0] - 1
        if n_given is not None and n_given != n:
            raise _err(source, "num_nodes", f"is {n_given} but indptr implies {n}")
        if int(indptr[0]) != 0 or int(indptr[-1]) != dst.shape[0]:
            raise _err(source, "indptr", f"must start at 0 and end at len(indices)={len(dst)}")
        if n and bool(np.any(np.diff(indptr) < 0)):
            raise _err(source, "indptr", "must be non-decreasing")
        _check_range(dst, n, "indices", source)
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    else:
        src = _id_array(arrays, "src", source)
        dst = _id_array(arrays, "dst", source)
        if src.shape != dst.shape:
            raise _err(source, "dst", f"length {dst.shape[0]} != length of 'src' {src.shape[0]}")
        if n_given is not None:
            n = n_given
        elif ndata_keys:
            first = arrays[sorted(ndata_keys)[0]]
            n = int(first.shape[0]) if first.ndim else 0
        else:
            n = int(max(src.max(), dst.max())) + 1 if src.shape[0] else 0
        _check_range(src, n, "src", source)
        _check_range(dst, n, "dst", source)
    e = int(src.shape[0])
    ndata: dict[str, np.ndarray] = {}
    for k in sorted(ndata_keys):
        _check_data(arrays[k], n, k, source, "one per node")
        ndata[k] = arrays[k]
    edata: dict[str, np.ndarray] = {}
    for k in sorted(k for k in arrays if k.startswith("edata/")):
        name = k[len("edata/") :]
        if not name or "/" in name:
            raise GraphFormatError(f"{source}: unexpected array {k!r} in a homogeneous graph")
        _check_data(arrays[k], e, k, source, "one per edge")
        edata[name] = arrays[k]
    et = etype_str(DEFAULT_ETYPE)
    return GraphData(
        node_types=[DEFAULT_NTYPE],
        edge_types=[DEFAULT_ETYPE],
        num_nodes_per_type={DEFAULT_NTYPE: n},
        num_edges_per_type={et: e},
        src=src,
        dst=dst,
        node_data={DEFAULT_NTYPE: ndata},
        edge_data={et: edata},
        source=source,
    )


def _check_name(name: str, key: str, source: str) -> None:
    if not name or any(c in name for c in ":/\\") or name.startswith("."):
        raise GraphFormatError(f"{source}: array {key!r}: bad type name {name!r}")


def _hetero(arrays: dict[str, np.ndarray], source: str) -> GraphData:
    counts: dict[str, int] = {}
    edges: dict[CanonicalEtype, dict[str, str]] = {}
    ndata_keys: list[tuple[str, str, str]] = []
    edata_keys: list[tuple[str, str, str]] = []
    for k in sorted(arrays):
        parts = k.split("/")
        if parts[0] == "num_nodes" and len(parts) == 2:
            _check_name(parts[1], k, source)
            counts[parts[1]] = _scalar_count(arrays, k, source)
        elif parts[0] == "edges" and len(parts) == 3 and parts[2] in ("src", "dst"):
            try:
                et = parse_etype(parts[1])
            except ValueError as e:
                raise GraphFormatError(f"{source}: array {k!r}: {e}") from e
            for p in et:
                _check_name(p, k, source)
            edges.setdefault(et, {})[parts[2]] = k
        elif parts[0] == "ndata" and len(parts) == 3 and parts[2]:
            ndata_keys.append((parts[1], parts[2], k))
        elif parts[0] == "edata" and len(parts) == 3 and parts[2]:
            edata_keys.append((parts[1], parts[2], k))
        else:
            raise GraphFormatError(f"{source}: unexpected array {k!r} in a heterogeneous graph")
    ntypes = sorted(counts)
    etypes = sorted(edges)  # DGL's relation order: (src, etype, dst) tuples sorted
    offs = dict(zip(ntypes, np.cumsum([0, *[counts[t] for t in ntypes]]).tolist(), strict=False))
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    ecounts: dict[str, int] = {}
    for et in etypes:
        name = etype_str(et)
        for end in ("src", "dst"):
            if end not in edges[et]:
                raise GraphFormatError(f"{source}: missing array 'edges/{name}/{end}'")
        for t in (et[0], et[2]):
            if t not in counts:
                raise GraphFormatError(
                    f"{source}: edge type {name!r} uses node type {t!r} "
                    f"but there is no 'num_nodes/{t}'"
                )
        s = _id_array(arrays, f"edges/{name}/src", source)
        d = _id_array(arrays, f"edges/{name}/dst", source)
        if s.shape != d.shape:
            raise _err(source, f"edges/{name}/dst", f"length {d.shape[0]} != src {s.shape[0]}")
        _check_range(s, counts[et[0]], f"edges/{name}/src", source)
        _check_range(d, counts[et[2]], f"edges/{name}/dst", source)
        srcs.append(s + offs[et[0]])
        dsts.append(d + offs[et[2]])
        ecounts[name] = int(s.shape[0])
    ndata: dict[str, dict[str, np.ndarray]] = {t: {} for t in ntypes}
    for t, name, k in ndata_keys:
        if t not in counts:
            raise GraphFormatError(f"{source}: array {k!r}: unknown node type {t!r}")
        _check_data(arrays[k], counts[t], k, source, f"one per {t!r} node")
        ndata[t][name] = arrays[k]
    edata: dict[str, dict[str, np.ndarray]] = {etype_str(et): {} for et in etypes}
    for et_name, name, k in edata_keys:
        if et_name not in edata:
            raise GraphFormatError(f"{source}: array {k!r}: unknown edge type {et_name!r}")
        _check_data(arrays[k], ecounts[et_name], k, source, f"one per {et_name!r} edge")
        edata[et_name][name] = arrays[k]
    empty = np.zeros(0, np.int64)
    return GraphData(
        node_types=ntypes,
        edge_types=etypes,
        num_nodes_per_type=counts,
        num_edges_per_type=ecounts,
        src=np.concatenate(srcs) if srcs else empty,
        dst=np.concatenate(dsts) if dsts else empty,
        node_data=ndata,
        edge_data=edata,
        source=source,
    )


def graph_fingerprint(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """The input fingerprint of the graph at ``url`` (what manifests record for reuse)."""
    return load_graph(url, storage_options).fingerprint()
