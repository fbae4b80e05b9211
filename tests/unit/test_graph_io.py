"""Reading and validating input graphs: every bad input fails clearly before any output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.errors import GraphFormatError, StorageError
from distgnn.graph.io import graph_from_arrays, load_graph
from distgnn.partition.partitioner import partition_graph


def _save_dir(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    for k, v in arrays.items():
        f = path / f"{k}.npy"
        f.parent.mkdir(parents=True, exist_ok=True)
        np.save(f, v)
    return path


def test_cora_npz_and_directory_agree(cora_path: Path, tmp_path: Path) -> None:
    g = load_graph(str(cora_path))
    assert (g.num_nodes, g.num_edges) == (2708, 10556) and g.is_homogeneous
    with np.load(cora_path) as z:
        d = _save_dir(tmp_path / "cora", {k: z[k] for k in z.files})
    g2 = load_graph(str(d))
    assert isinstance(g2.node_data["_N"]["feat"], np.memmap)  # mmapped, not copied
    assert isinstance(g2.src, np.memmap)
    assert g2.fingerprint() == g.fingerprint()
    assert load_graph("file://" + str(d)).num_edges == 10556


def test_csr_form_equals_coo() -> None:
    indptr = np.array([0, 2, 2, 3])
    indices = np.array([1, 2, 0])
    g = graph_from_arrays({"indptr": indptr, "indices": indices, "edata/w": np.ones(3)})
    assert g.src.tolist() == [0, 0, 2] and g.dst.tolist() == [1, 2, 0] and g.num_nodes == 3


def test_fingerprint_changes_with_bytes() -> None:
    a = {"src": np.array([0, 1]), "dst": np.array([1, 0])}
    b = {"src": np.array([0, 1]), "dst": np.array([1, 1])}
    assert graph_from_arrays(a).fingerprint() != graph_from_arrays(b).fingerprint()


E = np.array([0, 1, 2])
BAD: list[tuple[dict[str, np.ndarray], str]] = [
    ({"dst": E}, "missing array 'src'"),
    ({"feat": np.ones(3)}, "missing arrays 'src' and 'dst'"),
    ({"src": E.astype(np.int32), "dst": E}, "'src': IDs must be int64"),
    ({"src": E, "dst": E[:2]}, "'dst': length 2"),
    ({"src": E, "dst": np.array([0, 1, 9]), "num_nodes": np.int64(3)}, "'dst': ID 9 out of range"),
    ({"src": np.array([-1, 0, 1]), "dst": E}, "'src': ID -1 out of range"),
    ({"src": E, "dst": E, "num_nodes": np.int64(3), "x": np.ones((2, 4))}, "'x': expected 3 rows"),
    ({"src": E, "dst": E, "edata/w": np.ones(4)}, "'edata/w': expected 3 rows"),
    ({"src": E, "dst": E, "num_nodes": np.array([3])}, "'num_nodes': must be an integer scalar"),
    ({"indptr": np.array([0, 1, 2]), "indices": np.array([0])}, "'indptr': must start at 0"),
    ({"indptr": np.array([0, 2, 1, 3]), "indices": E}, "'indptr': must be non-decreasing"),
    ({"src": E, "dst": E, "indptr": E}, "either src/dst or indptr/indices"),
    ({"src": E, "dst": E, "foo/bar": E}, "unexpected array 'foo/bar'"),
    ({"num_nodes/a": np.int64(2), "edges/a:r:b/src": E, "edges/a:r:b/dst": E}, "no 'num_nodes/b'"),
    ({"num_nodes/a": np.int64(3), "edges/a:r:a/src": E}, "missing array 'edges/a:r:a/dst'"),
    ({"num_nodes/a": np.int64(2), "edges/a:r:a/src": E, "edges/a:r:a/dst": E}, "ID 2 out of range"),
    ({"num_nodes/a": np.int64(3), "ndata/a/x": np.ones(2)}, "'ndata/a/x': expected 3 rows"),
    ({"num_nodes/a": np.int64(3), "ndata/z/x": np.ones(3)}, "unknown node type 'z'"),
    ({"num_nodes/a": np.int64(3), "edges/a:a/src": E}, "not SRC:ETYPE:DST"),
    ({"num_nodes/a": np.int64(3), "edata/a:r:a/w": E}, "unknown edge type"),
]


@pytest.mark.parametrize(("arrays", "message"), BAD)
def test_bad_graph_rejected_before_writing(
    tmp_path: Path, arrays: dict[str, np.ndarray], message: str
) -> None:
    d = _save_dir(tmp_path / "in", arrays)
    out = tmp_path / "out"
    with pytest.raises(GraphFormatError, match=message.replace("(", r"\(").replace("[", r"\[")):
        partition_graph(str(d), 2, str(out), "g", progress=False)
    assert not out.exists()


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not found"):
        load_graph(str(tmp_path / "missing.npz"))
    (tmp_path / "x.npz").write_bytes(b"garbage")
    with pytest.raises(GraphFormatError, match=r"x\.npz"):
        load_graph(str(tmp_path / "x.npz"))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(GraphFormatError, match=r"expected a \.npz"):
        load_graph(str(tmp_path / "x.txt"))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    d = tmp_path / "objdir"
    d.mkdir()
    (tmp_path / "obj.npy").rename(d / "src.npy")
    with pytest.raises(GraphFormatError, match=r"src\.npy"):
        load_graph(str(d))
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphFormatError, match=r"no \.npy files"):
        load_graph(str(tmp_path / "empty"))
