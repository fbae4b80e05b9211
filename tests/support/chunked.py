"""Write a graph (arrays of DistGNN's input layout) in DGL's chunked graph format, as
DGL's docs describe it: metadata.json with node_type / num_nodes_per_chunk / edge_type /
num_edges_per_chunk / edges / node_data / edge_data, chunk files in csv, numpy or parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from distgnn.graph.data import etype_str
from distgnn.graph.io import graph_from_arrays

EXT = {"csv": "csv", "numpy": "npy", "parquet": "parquet"}


def split_sizes(n: int, k: int) -> list[int]:
    """DGL's chunk_graph split: ``n // k`` each, the first ``n % k`` one more."""
    return [n // k + (i < n % k) for i in range(k)]


def _write(path: Path, arr: np.ndarray, fmt: str, delimiter: str, vector_rows: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "numpy":
        np.save(path, arr)
    elif fmt == "csv":
        two = arr.reshape(arr.shape[0], -1)
        spec = "%d" if arr.dtype.kind in "biu" else "%.9g"
        np.savetxt(path, two, fmt=spec, delimiter=delimiter)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        two = arr.reshape(arr.shape[0], -1)
        if vector_rows and two.shape[1] > 1:  # Spark's one-list-per-row layout
            table = pa.table({"vector": pa.array(list(two))})
        else:
            cols = {str(j): pa.array(two[:, j]) for j in range(two.shape[1])}
            table = pa.table(cols).replace_schema_metadata({"shape": str(arr.shape)})
        pq.write_table(table, path)


def write_chunked(
    arrays: dict[str, np.ndarray],
    out: Path,
    *,
    edge_format: str = "csv",
    data_format: str = "numpy",
    chunks: int = 3,
    delimiter: str = " ",
    vector_rows: bool = False,
) -> Path:
    """``arrays`` (homogeneous or heterogeneous layout) as a chunked graph under ``out``;
    the metadata.json path. Paths in it are relative to ``out``."""
    g = graph_from_arrays(dict(arrays), "chunked-source")
    meta: dict[str, Any] = {
        "graph_name": "g",
        "node_type": list(g.node_types),
        "num_nodes_per_chunk": [],
        "edge_type": [etype_str(e) for e in g.edge_types],
        "num_edges_per_chunk": [],
        "edges": {},
        "node_data": {},
        "edge_data": {},
    }
    ofs = g.ntype_offsets
    for ntype in g.node_types:
        sizes = split_sizes(g.num_nodes_per_type[ntype], chunks)
        meta["num_nodes_per_chunk"].append(sizes)
        for name, a in sorted(g.node_data[ntype].items()):
            meta["node_data"].setdefault(ntype, {})[name] = _chunks(
                out, f"node_data/{ntype}-{name}", a, sizes, data_format, delimiter, vector_rows
            )
    eofs = g.etype_offsets
    for t, et in enumerate(g.edge_types):
        name = etype_str(et)
        n = g.num_edges_per_type[name]
        sizes = split_sizes(n, chunks)
        meta["num_edges_per_chunk"].append(sizes)
        sl = slice(int(eofs[t]), int(eofs[t + 1]))
        src = np.asarray(g.src[sl]) - ofs[g.node_types.index(et[0])]
        dst = np.asarray(g.dst[sl]) - ofs[g.node_types.index(et[2])]
        pairs = np.stack([src, dst], axis=1)
        rel = name.replace(":", "-")
        meta["edges"][name] = _chunks(
            out, f"edges/{rel}", pairs, sizes, edge_format, delimiter, vector_rows=False
        )
        for dname, a in sorted(g.edge_data[name].items()):
            meta["edge_data"].setdefault(name, {})[dname] = _chunks(
                out, f"edge_data/{rel}-{dname}", a, sizes, data_format, delimiter, vector_rows
            )
    path = out / "metadata.json"
    path.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return path


def _chunks(
    out: Path,
    stem: str,
    arr: np.ndarray,
    sizes: list[int],
    fmt: str,
    delimiter: str,
    vector_rows: bool,
) -> dict[str, Any]:
    paths, start = [], 0
    for i, n in enumerate(sizes):
        rel = f"{stem}-{i}.{EXT[fmt]}"
        _write(out / rel, np.asarray(arr[start : start + n]), fmt, delimiter, vector_rows)
        paths.append(rel)
        start += n
    spec: dict[str, Any] = {"name": fmt}
    if fmt == "csv":
        spec["delimiter"] = delimiter
    return {"format": spec, "data": paths}
