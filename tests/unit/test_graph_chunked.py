"""DGL's chunked graph format as an input graph: a real chunked Cora (and the typed Cora)
in csv, numpy and parquet partitions exactly as the same graph given as ``.npz``; bad
chunked input fails in one line naming the file or field."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from tests.support.chunked import write_chunked
from tests.support.hetero import typed_cora

from distgnn.cli import main as cli_main
from distgnn.errors import ConfigError, GraphFormatError, StorageError, StorageNotFound
from distgnn.graph import chunk_readers
from distgnn.graph.io import load_graph
from distgnn.partition.loader import load_partition
from distgnn.partition.manifest import Manifest
from distgnn.partition.partitioner import partition_graph


@pytest.fixture(scope="module")
def cora(cora_path: Path) -> dict[str, np.ndarray]:
    with np.load(cora_path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _partition(graph: str, out: Path, method: str) -> Manifest:
    return partition_graph(graph, 2, str(out), "g", method=method, seed=3, progress=False)


def _same_partitions(a: Manifest, b: Manifest) -> None:
    """Byte-identical partitions: same input fingerprint, assignment and files."""
    assert a.input_fingerprint == b.input_fingerprint
    assert (a.node_offsets, a.edge_offsets) == (b.node_offsets, b.edge_offsets)
    assert (a.ntype_offsets, a.etype_offsets) == (b.ntype_offsets, b.etype_offsets)
    assert a.node_data == b.node_data and a.edge_data == b.edge_data
    for pa, pb in zip(a.parts, b.parts, strict=True):
        assert pa.files == pb.files  # every file's sha256 and size


@pytest.mark.parametrize(
    ("edges", "data", "method"),
    [
        ("csv", "numpy", "metis"),
        ("csv", "numpy", "random"),
        ("numpy", "numpy", "metis"),
        ("parquet", "parquet", "metis"),
    ],
)
def test_chunked_cora_partitions_as_the_npz(
    cora: dict[str, np.ndarray],
    cora_path: Path,
    tmp_path: Path,
    edges: str,
    data: str,
    method: str,
) -> None:
    meta = write_chunked(cora, tmp_path / "in", edge_format=edges, data_format=data, chunks=3)
    g = load_graph(str(meta))
    assert g.is_homogeneous and (g.num_nodes, g.num_edges) == (2708, 10556)
    got = _partition(str(meta), tmp_path / "chunked", method)
    _same_partitions(got, _partition(str(cora_path), tmp_path / "npz", method))
    # and the features of every owned node are its original row
    for p in range(2):
        part = load_partition(str(tmp_path / "chunked" / "g.json"), p)
        feat = part.node_data["_N"]["feat"]
        assert np.array_equal(feat, cora["feat"][part.orig_nid])
        assert np.array_equal(part.node_data["_N"]["label"], cora["label"][part.orig_nid])


def test_chunked_typed_graph_partitions_as_the_npz(cora_path: Path, tmp_path: Path) -> None:
    arrays = typed_cora(cora_path)
    arrays["edata/paper:cites:paper/w"] = np.arange(
        arrays["edges/paper:cites:paper/src"].shape[0], dtype=np.float32
    )
    np.savez(tmp_path / "typed.npz", **arrays)  # type: ignore[arg-type]
    want = _partition(str(tmp_path / "typed.npz"), tmp_path / "npz", "metis")
    for edges, data in (("csv", "numpy"), ("parquet", "parquet")):
        meta = write_chunked(
            arrays, tmp_path / edges, edge_format=edges, data_format=data, vector_rows=True
        )
        obj = json.loads(meta.read_text())
        assert obj["edge_type"] == ["author:writes:paper", "paper:cites:paper",
                                    "paper:written-by:author"]  # fmt: skip
        for key in ("node_type", "num_nodes_per_chunk", "edge_type", "num_edges_per_chunk"):
            obj[key].reverse()  # any order: DistGNN orders types as DGL does
        meta.write_text(json.dumps(obj))
        got = _partition(str(meta), tmp_path / f"out-{edges}", "metis")
        assert got.node_types == ["author", "paper"] and len(got.edge_types) == 3
        _same_partitions(got, want)


def test_totals_data_files_and_folder_input(
    cora: dict[str, np.ndarray], cora_path: Path, tmp_path: Path
) -> None:
    """Totals (num_*_per_type) instead of per-chunk sizes; node data in a number of files
    other than the node chunks (DGL allows it); the folder holding metadata.json as the
    input; a file:// URL."""
    meta = write_chunked(cora, tmp_path / "in", edge_format="numpy", chunks=2)
    obj = json.loads(meta.read_text())
    obj["num_nodes_per_type"] = [2708]
    obj["num_edges_per_type"] = [10556]
    del obj["num_nodes_per_chunk"]
    feat = obj["node_data"]["_N"]["feat"]
    np.save(tmp_path / "in" / "feat-all.npy", cora["feat"])
    feat["data"] = ["feat-all.npy"]
    meta.write_text(json.dumps(obj))
    want = load_graph(str(cora_path)).fingerprint()
    assert load_graph(str(tmp_path / "in")).fingerprint() == want
    assert load_graph("file://" + str(meta)).fingerprint() == want


def test_chunks_at_an_fsspec_url(
    cora: dict[str, np.ndarray], cora_path: Path, tmp_path: Path
) -> None:
    """Chunks relative to a metadata.json in object storage (fsspec's memory file system)."""
    meta = write_chunked(cora, tmp_path / "in", edge_format="csv", data_format="parquet")
    fs = fsspec.filesystem("memory")
    for root, _, files in os.walk(tmp_path / "in"):
        for f in files:
            local = Path(root) / f
            fs.pipe(f"/chunked/{local.relative_to(tmp_path / 'in')}", local.read_bytes())
    try:
        g = load_graph("memory://chunked/metadata.json")
        assert g.fingerprint() == load_graph(str(cora_path)).fingerprint()
        # absolute local paths (what DGL's chunk_graph writes) cannot be resolved there
        obj = json.loads(meta.read_text())
        obj["edges"]["_N:_E:_N"]["data"][0] = "/home/me/edges-0.csv"
        fs.pipe("/chunked/metadata.json", json.dumps(obj).encode())
        with pytest.raises(GraphFormatError, match=r"edges\['_N:_E:_N'\]\.data\[0\]: absolute"):
            load_graph("memory://chunked/metadata.json")
    finally:
        fs.rm("/chunked", recursive=True)


def test_cli_partitions_a_chunked_graph(
    cora: dict[str, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = write_chunked(cora, tmp_path / "in", edge_format="csv")
    rc = cli_main(["partition", str(meta), "--num-parts", "2", "--out", str(tmp_path / "o"),
                   "--name", "cora", "--method", "random"])  # fmt: skip
    assert rc == 0 and "wrote" in capsys.readouterr().out
    m = Manifest.from_json((tmp_path / "o" / "cora.json").read_bytes())
    assert m.num_nodes == 2708 and m.num_edges == 10556


# -- bad input: one clear error naming the file or field --------------------------------

E = np.array([[0, 1], [1, 2], [2, 0], [3, 1]])


def _small(tmp_path: Path, edges: str = "csv", data: str = "numpy") -> tuple[Path, dict[str, Any]]:
    arrays = {"src": E[:, 0].copy(), "dst": E[:, 1].copy(), "x": np.ones((4, 2), np.float32)}
    meta = write_chunked(arrays, tmp_path / "g", edge_format=edges, data_format=data, chunks=2)
    return meta, json.loads(meta.read_text())


def _rewrite(meta: Path, obj: dict[str, Any]) -> Path:
    meta.write_text(json.dumps(obj))
    return meta


def test_small_graph_reads(tmp_path: Path) -> None:
    g = load_graph(str(_small(tmp_path)[0]))
    assert g.src.tolist() == [0, 1, 2, 3] and g.dst.tolist() == [1, 2, 0, 1]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda o: o.update(num_edges_per_chunk=[[2, 1, 1]]), GraphFormatError,
         r"edges\['_N:_E:_N'\]\.data: 2 files but num_edges_per_chunk\[0\] has 3 chunks"),
        (lambda o: o.update(num_edges_per_chunk=[[3, 1]]), GraphFormatError,
         r"data\[0\] \(.*_N-_E-_N-0\.csv\): 2 edges, num_edges_per_chunk says 3"),
        (lambda o: o.update(num_nodes_per_chunk=[[2, 3]]), GraphFormatError,
         r"node_data\['_N'\]\['x'\] \('_N' nodes\): 4 rows, 5 declared"),
        (lambda o: o["edges"]["_N:_E:_N"]["format"].update(name="hdf5"), GraphFormatError,
         r"edges\['_N:_E:_N'\]\.format\.name: unknown format 'hdf5'"),
        (lambda o: o["edges"]["_N:_E:_N"]["format"].update(delimiter=","), GraphFormatError,
         r"_N-_E-_N-0\.csv\): line 1: .0 1. is not an integer.*delimiter is ','"),
        (lambda o: o["edges"]["_N:_E:_N"]["data"].__setitem__(1, "nope.csv"), StorageNotFound,
         r"edges\['_N:_E:_N'\]\.data\[1\]: .*nope\.csv: not found"),
        (lambda o: o.update(edge_type=["cites"], edges={"cites": {}}), GraphFormatError,
         r"edge_type\[0\]: 'cites' is not SRC:REL:DST"),
        (lambda o: o.update(edge_type=["_N:_E:paper"]), GraphFormatError,
         r"edge_type\[0\]: node type 'paper' is not in node_type"),
        (lambda o: o.pop("num_nodes_per_chunk"), GraphFormatError,
         r"num_nodes_per_chunk: missing \(nor is there a num_nodes_per_type\)"),
        (lambda o: o.update(num_nodes_per_type=[5]), GraphFormatError,
         r"num_nodes_per_type\[0\]: is 5 but num_nodes_per_chunk\[0\] sums to 4"),
        (lambda o: o["node_data"].update(paper={}), GraphFormatError,
         r"node_data\['paper'\]: unknown type"),
        (lambda o: o["node_data"]["_N"].update(src=o["node_data"]["_N"]["x"]), GraphFormatError,
         r"node_data\['_N'\]\['src'\]: the name is reserved"),
        (lambda o: o["edges"].pop("_N:_E:_N"), GraphFormatError,
         r"edges\['_N:_E:_N'\]: missing"),
        (lambda o: o.update(num_edges_per_chunk=[[2**61, 2]]), GraphFormatError,
         r"edges\['_N:_E:_N'\]: cannot allocate 2305843009213693954 rows of int64"),
    ],
)  # fmt: skip
def test_bad_metadata_names_the_field(
    tmp_path: Path, change: Any, error: type[Exception], match: str
) -> None:
    meta, obj = _small(tmp_path)
    change(obj)
    with pytest.raises(error, match=match):
        load_graph(str(_rewrite(meta, obj)))


def test_bad_chunk_files_name_the_file(tmp_path: Path) -> None:
    meta, _ = _small(tmp_path)
    g = tmp_path / "g"
    (g / "edges/_N-_E-_N-1.csv").write_text("2 0 7\n3 1 7\n")
    with pytest.raises(GraphFormatError, match=r"data\[1\] .*: rows of \(3,\) int64; edges are"):
        load_graph(str(meta))
    (g / "edges/_N-_E-_N-1.csv").write_text("2 0\n3 1 7\n")
    with pytest.raises(
        GraphFormatError, match=r"data\[1\] .*: line 2: 3 fields, the lines before have 2"
    ):
        load_graph(str(meta))
    (g / "edges/_N-_E-_N-1.csv").write_text("2 0\n3 9\n")
    with pytest.raises(GraphFormatError, match=r"data\[1\] .*: dst ID 9 out of range \[0, 4\)"):
        load_graph(str(meta))
    (g / "edges/_N-_E-_N-1.csv").write_bytes(b"1" * (chunk_readers.MAX_LINE_BYTES + 10))
    with pytest.raises(GraphFormatError, match=r"line 1 is longer than"):
        load_graph(str(meta))
    (g / "edges/_N-_E-_N-1.csv").write_text("2 0\n3 1\n")
    load_graph(str(meta))
    # numpy data chunks: truncated, object (pickled) arrays, another row shape
    x0 = g / "node_data/_N-x-0.npy"
    good = x0.read_bytes()
    x0.write_bytes(good[:-3])
    with pytest.raises(GraphFormatError, match=r"\['x'\]\.data\[0\] .*: truncated"):
        load_graph(str(meta))
    np.save(x0, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(GraphFormatError, match=r"dtype object is not numeric"):
        load_graph(str(meta))
    np.save(x0, np.ones((2, 3), np.float32))
    with pytest.raises(GraphFormatError, match=r"data\[1\] .*: rows of shape \(2,\), the first"):
        load_graph(str(meta))
    x0.write_bytes(b"not an npy file at all")
    with pytest.raises(GraphFormatError, match=r"data\[0\] .*not a readable \.npy file"):
        load_graph(str(meta))
    x0.write_bytes(good)
    assert load_graph(str(meta)).num_nodes == 4


def test_a_fifo_chunk_is_refused_without_waiting(tmp_path: Path) -> None:
    meta, obj = _small(tmp_path)
    fifo = tmp_path / "g" / "fifo.csv"
    os.mkfifo(fifo)
    obj["edges"]["_N:_E:_N"]["data"][0] = str(fifo)  # absolute: local metadata allows it
    with pytest.raises(StorageError, match=r"data\[0\]: .*fifo\.csv: not a regular file"):
        load_graph(str(_rewrite(meta, obj)))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tabular_data_chunks(tmp_path: Path, fmt: str) -> None:
    """One column reads as a 1-D field; several as rows; parquet keeps its dtypes."""
    meta, _ = _small(tmp_path, edges=fmt, data=fmt)
    g = load_graph(str(meta))
    x = g.node_data["_N"]["x"]
    assert x.shape == (4, 2) and (x == 1).all()
    assert x.dtype == (np.float32 if fmt == "parquet" else np.int64)


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, _ = _small(tmp_path, edges="parquet")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match=r"needs pyarrow.*pip install 'distgnn\[parquet\]'"):
        load_graph(str(meta))


def test_bad_parquet_chunks(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta, _ = _small(tmp_path, edges="parquet")
    f = tmp_path / "g" / "edges/_N-_E-_N-0.parquet"
    pq.write_table(pa.table({"a": ["x", "y"], "b": [1, 2]}), f)
    with pytest.raises(GraphFormatError, match=r"data\[0\] .*column 'a' is string"):
        load_graph(str(meta))
    pq.write_table(pa.table({"a": [0, None], "b": [1, 2]}), f)
    with pytest.raises(GraphFormatError, match=r"column 'a' has 1 null values"):
        load_graph(str(meta))
    f.write_bytes(b"PAR1 not really")
    with pytest.raises(GraphFormatError, match=r"data\[0\] .*not a readable parquet file"):
        load_graph(str(meta))
    t = pa.table({"0": [0, 1], "1": [1, 2]}).replace_schema_metadata({"shape": "__import__"})
    pq.write_table(t, f)
    with pytest.raises(GraphFormatError, match=r"metadata 'shape' .* is not a tuple"):
        load_graph(str(meta))


@pytest.mark.parametrize("vector", [True, False])
def test_parquet_blocks_stay_near_the_block_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vector: bool
) -> None:
    """Wide rows (Spark's one-list-per-row vectors, or many columns) are read a few
    blocks' bytes at a time, not a fixed number of rows however wide they are."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.arange(4096 * 64, dtype=np.float64).reshape(4096, 64)
    f = tmp_path / "x.parquet"
    cols = {"v": pa.array(list(x))} if vector else {str(j): x[:, j] for j in range(64)}
    pq.write_table(pa.table(cols), f)
    monkeypatch.setattr(chunk_readers, "BLOCK_BYTES", 64 << 10)
    fmt = chunk_readers.ChunkFormat("parquet")
    blocks = list(chunk_readers.read_blocks(str(f), fmt, "x", ids=False))
    assert np.array_equal(np.concatenate(blocks), x)
    assert max(b.nbytes for b in blocks) <= 2 * (64 << 10), [b.shape for b in blocks]
