"""Fast paths of the partitioner give exactly the results of the plain NumPy versions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.graph.data import fingerprint_arrays, release_pages
from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir
from distgnn.graph.io import load_graph, read_arrays
from distgnn.partition import local
from distgnn.partition.assign import symmetric_csr
from distgnn.partition.loader import load_partition
from distgnn.partition.partitioner import partition_graph, stable_order


def test_stable_order_matches_argsort() -> None:
    rng = np.random.default_rng(0)
    key = rng.integers(0, 50, 10_000)
    assert np.array_equal(stable_order(key, 50), np.argsort(key, kind="stable"))
    assert stable_order(np.zeros(0, np.int64), 1).shape == (0,)
    big = np.array([3, 1, 3, 0])  # bound * m overflows int64: argsort fallback
    assert np.array_equal(stable_order(big, 2**61), np.argsort(big, kind="stable"))


def test_symmetric_csr_matches_reference() -> None:
    rng = np.random.default_rng(1)
    n = 300
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    xadj, adj = symmetric_csr(src, dst, n)
    pairs = {(int(u), int(v)) for u, v in zip(src, dst, strict=True) if u != v}
    pairs |= {(v, u) for u, v in pairs}
    ref = sorted(pairs)
    rows = np.repeat(np.arange(n), np.diff(xadj))
    assert list(zip(rows.tolist(), adj.tolist(), strict=True)) == ref
    assert xadj.dtype == np.int64 and adj.dtype == np.int64


def test_fingerprint_memmap_equals_in_memory(tmp_path: Path) -> None:
    write_graph_dir(generate_graph(GenerateOptions(nodes=300, feat_dim=5)), str(tmp_path))
    mapped = read_arrays(str(tmp_path))
    assert isinstance(mapped["feat"], np.memmap)
    in_memory = {k: np.array(v) for k, v in mapped.items()}
    assert fingerprint_arrays(mapped, chunk=1000) == fingerprint_arrays(in_memory)
    # a view of a memmap is hashed from memory, not from its file offset
    view = {"feat": mapped["feat"][10:20]}
    assert fingerprint_arrays(view) == fingerprint_arrays({"feat": in_memory["feat"][10:20]})
    release_pages(*mapped.values(), view["feat"], in_memory["feat"])
    assert np.array_equal(mapped["feat"], in_memory["feat"])  # still readable


@pytest.mark.parametrize("hops", [1, 2])
def test_dense_and_sparse_local_ids_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hops: int
) -> None:
    d = tmp_path / "in"
    write_graph_dir(generate_graph(GenerateOptions(nodes=400, avg_degree=5, feat_dim=3)), str(d))
    g = load_graph(str(d))
    dense = partition_graph(g, 3, str(tmp_path / "dense"), "g", halo_hops=hops, progress=False)
    monkeypatch.setattr(local, "_DENSE_MAX_NODES", 0)  # np.unique + binary search
    sparse = partition_graph(g, 3, str(tmp_path / "sparse"), "g", halo_hops=hops, progress=False)
    assert [p.files for p in dense.parts] == [p.files for p in sparse.parts]
    part = load_partition(str(tmp_path / "dense" / "g.json"), 0)
    assert part.halo_nid.shape[0] > 0 and part.indptr[-1] == part.indices.shape[0]


def test_symmetric_csr_parallel_sort_path() -> None:
    """Above 1M keys the sort splits at a pivot and runs in two threads."""
    rng = np.random.default_rng(2)
    n = 50_000
    src, dst = rng.integers(0, n, 600_000), rng.integers(0, n, 600_000)
    xadj, adj = symmetric_csr(src, dst, n)
    keep = src != dst
    keys = np.unique(np.concatenate([src[keep] * n + dst[keep], dst[keep] * n + src[keep]]))
    assert np.array_equal(adj, keys % n)
    assert np.array_equal(xadj, np.searchsorted(keys, np.arange(n + 1) * n))


def test_kway_through_ctypes_matches_pymetis(cora_path: Path) -> None:
    """The GIL-releasing ctypes call gives pymetis' own k-way result."""
    import pymetis

    from distgnn.partition.assign import _kway

    g = load_graph(str(cora_path))
    xadj, adj = symmetric_csr(np.asarray(g.src), np.asarray(g.dst), g.num_nodes)
    ours = _kway(xadj, adj, 4, None, seed=7)
    ref = pymetis.part_graph(
        4, pymetis.CSRAdjacency(xadj, adj), options=pymetis.Options(seed=7), recursive=False
    )
    assert np.array_equal(ours, np.asarray(ref.vertex_part))
    vw = np.arange(1, g.num_nodes + 1, dtype=np.int64) % 3 + 1
    ours_w = _kway(xadj, adj, 2, vw, seed=1)
    ref_w = pymetis.part_graph(
        2,
        pymetis.CSRAdjacency(xadj, adj),
        vweights=vw,
        options=pymetis.Options(seed=1),
        recursive=False,
    )
    assert np.array_equal(ours_w, np.asarray(ref_w.vertex_part))


def test_kway_error_status_is_a_clear_error(capfd: pytest.CaptureFixture[str]) -> None:
    from distgnn.errors import GraphFormatError
    from distgnn.partition.assign import _kway

    with pytest.raises(GraphFormatError, match="rejected the graph"):
        _kway(np.array([0, 1, 2]), np.array([1, 0]), 0, None, seed=0)
    capfd.readouterr()  # METIS prints its own "Input Error" line
