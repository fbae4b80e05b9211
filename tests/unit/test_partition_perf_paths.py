"""Fast paths of the partitioner give exactly the results of the plain NumPy versions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.graph.data import fingerprint_arrays, release_pages
from distgnn.graph.generate import GenerateOptions, generate_graph, write_graph_dir
from distgnn.graph.io import load_graph, read_arrays
from distgnn.partition import local
from distgnn.partition.assign import symmetric_csr, weighted_symmetric_csr
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


def test_symmetric_csr_int32_and_int64_agree() -> None:
    """The same adjacency as np.unique's, as int64 and as int32."""
    rng = np.random.default_rng(2)
    n = 5_000
    src, dst = rng.integers(0, n, 60_000), rng.integers(0, n, 60_000)
    xadj, adj = symmetric_csr(src, dst, n)
    keep = src != dst
    keys = np.unique(np.concatenate([src[keep] * n + dst[keep], dst[keep] * n + src[keep]]))
    assert np.array_equal(adj, keys % n)
    assert np.array_equal(xadj, np.searchsorted(keys, np.arange(n + 1) * n))
    xadj32, adj32 = symmetric_csr(src, dst, n, np.int32)
    assert xadj32.dtype == np.int32 and adj32.dtype == np.int32
    assert np.array_equal(xadj32, xadj) and np.array_equal(adj32, adj)


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
    ew = np.arange(adj.shape[0], dtype=np.int64) % 2 + 1
    ew = np.minimum(ew, ew[_reverse_entries(xadj, adj)])  # METIS needs symmetric weights
    ours_w = _kway(xadj, adj, 2, vw, 1, None, ew)
    ref_w = pymetis.part_graph(
        2,
        pymetis.CSRAdjacency(xadj, adj),
        vweights=vw,
        eweights=ew,
        options=pymetis.Options(seed=1),
        recursive=False,
    )
    assert np.array_equal(ours_w, np.asarray(ref_w.vertex_part))


def _reverse_entries(xadj: np.ndarray, adj: np.ndarray) -> np.ndarray:
    """Position of the entry (v, u) for every adjacency entry (u, v)."""
    n = xadj.shape[0] - 1
    rows = np.repeat(np.arange(n), np.diff(xadj))
    keys = rows * n + adj
    return np.searchsorted(keys, adj * n + rows)


def test_kway_error_status_is_a_clear_error(capfd: pytest.CaptureFixture[str]) -> None:
    from distgnn.errors import GraphFormatError
    from distgnn.partition.assign import _kway

    with pytest.raises(GraphFormatError, match="rejected the graph"):
        _kway(np.array([0, 1, 2]), np.array([1, 0]), 0, None, seed=0)
    capfd.readouterr()  # METIS prints its own "Input Error" line


def test_weighted_symmetric_csr_counts_input_edges() -> None:
    """Each undirected pair weighs as many input edges as join it (either direction);
    self-loops are dropped; int32 and int64 builds agree."""
    src = np.array([0, 1, 1, 2, 2, 2, 3, 3, 0])
    dst = np.array([1, 0, 2, 1, 1, 2, 0, 0, 3])
    xadj, adj, w = weighted_symmetric_csr(src, dst, 4)
    rows = np.repeat(np.arange(4), np.diff(xadj))
    got = {(int(u), int(v)): int(c) for u, v, c in zip(rows, adj, w, strict=True)}
    # 0-1 both ways, 1-2 three times (one way twice, the other once), 3-0 twice + 0-3 once
    assert got == {(0, 1): 2, (1, 0): 2, (1, 2): 3, (2, 1): 3, (0, 3): 3, (3, 0): 3}
    rng = np.random.default_rng(3)
    s2, d2 = rng.integers(0, 200, 5000), rng.integers(0, 200, 5000)
    x64, a64, w64 = weighted_symmetric_csr(s2, d2, 200)
    x32, a32, w32 = weighted_symmetric_csr(s2, d2, 200, np.int32)
    assert w32 is not None and w64 is not None and w32.dtype == np.int32
    assert np.array_equal(x32, x64) and np.array_equal(a32, a64) and np.array_equal(w32, w64)
    keep = s2 != d2
    keys = np.concatenate([s2[keep] * 200 + d2[keep], d2[keep] * 200 + s2[keep]])
    _, ref_counts = np.unique(keys, return_counts=True)
    assert np.array_equal(w64, ref_counts)
    assert int(w64.sum()) == 2 * int(keep.sum())


def test_edge_weights_minimise_the_reported_edge_cut() -> None:
    """Weighting a pair by its input edges makes METIS minimise cut input edges (the
    manifest's edge_cut): where many pairs are linked both ways, the weighted partition
    cuts fewer input edges than the unweighted one."""
    from distgnn.partition.assign import _kway

    rng = np.random.default_rng(4)
    n = 4000
    u, v = rng.integers(0, n, 20000), rng.integers(0, n, 20000)
    both = rng.random(20000) < 0.5  # half the pairs also appear reversed
    src = np.concatenate([u, v[both]])
    dst = np.concatenate([v, u[both]])

    def cut(weighted: bool) -> int:
        xadj, adj, w = weighted_symmetric_csr(src, dst, n)
        parts = _kway(xadj, adj, 2, None, 0, None, w if weighted else None)
        return int(np.count_nonzero(parts[src] != parts[dst]))

    assert cut(True) < cut(False)


@pytest.mark.parametrize("block_bytes", [64, 1 << 20])
def test_write_rows_writes_the_bytes_of_write(tmp_path: Path, block_bytes: int) -> None:
    """Streaming a gather in blocks gives byte for byte the file (and sha256) of writing
    the whole gather, and both that of ``np.save``: 2-D float, 1-D int and bool,
    memory-mapped or not, empty rows."""
    from distgnn.partition.writer import PartWriter

    rng = np.random.default_rng(5)
    arrays = {
        "feat": rng.random((3000, 7), dtype=np.float32),
        "label": rng.integers(0, 9, 3000),
        "mask": rng.random(3000) < 0.3,
    }
    for k, a in arrays.items():
        np.save(tmp_path / f"{k}.npy", a)
    mapped = {k: np.load(tmp_path / f"{k}.npy", mmap_mode="r") for k in arrays}
    rows = np.sort(rng.choice(3000, 1700, replace=False))
    for name, src in [*arrays.items(), *((f"m-{k}", v) for k, v in mapped.items())]:
        for r in (rows, rows[:0], rng.permutation(rows)):
            whole = PartWriter(str(tmp_path / "out"), "whole")
            streamed = PartWriter(str(tmp_path / "out"), "streamed")
            a = whole.write(f"{name}.npy", np.take(src, r, axis=0), block_bytes=block_bytes)
            b = streamed.write_rows(f"{name}.npy", src, r, block_bytes=block_bytes)
            assert a == b
            np.save(tmp_path / "ref.npy", np.take(src, r, axis=0))
            ref = (tmp_path / "ref.npy").read_bytes()
            assert (tmp_path / "out/whole" / f"{name}.npy").read_bytes() == ref
            assert (tmp_path / "out/streamed" / f"{name}.npy").read_bytes() == ref


def test_write_is_np_save_byte_for_byte(tmp_path: Path) -> None:
    """Whole arrays go out from their own memory: the bytes of ``np.save`` for C- and
    Fortran-ordered, strided, 0-d and empty arrays."""
    from distgnn.partition.writer import PartWriter

    rng = np.random.default_rng(2)
    cases = {
        "c2d": rng.random((50, 3)),
        "f2d": np.asfortranarray(rng.random((50, 3)).astype(np.float32)),
        "strided": np.arange(100, dtype=np.int64)[::3],
        "scalar": np.array(7, dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "bool": rng.random(33) < 0.5,
    }
    w = PartWriter(str(tmp_path / "out"), "p")
    for name, a in cases.items():
        w.write(f"{name}.npy", a, block_bytes=16)
        np.save(tmp_path / "ref.npy", a)
        assert (tmp_path / "out/p" / f"{name}.npy").read_bytes() == (
            tmp_path / "ref.npy"
        ).read_bytes(), name


def test_write_rows_gathers_into_one_reused_block(tmp_path: Path) -> None:
    """Every block of every file a writer thread gathers lands in its one GatherBuffer
    (no fresh block per gather): the buffer is one block big and never moves."""
    from distgnn.partition.writer import GatherBuffer, PartWriter

    rng = np.random.default_rng(3)
    feat = rng.random((5000, 8), dtype=np.float32)
    label = rng.integers(0, 5, 5000)
    gather = GatherBuffer()
    block = 1024 * 8 * 4  # write_rows's smallest block: 1024 rows
    address = None
    for p in range(3):  # three partitions written by the same thread
        w = PartWriter(str(tmp_path / "out"), f"p{p}", gather=gather)
        rows = np.sort(rng.choice(5000, 3000, replace=False))
        w.write_rows("feat.npy", feat, rows, block_bytes=block)
        w.write_rows("label.npy", label, rows, block_bytes=block)
        assert np.array_equal(np.load(tmp_path / "out" / f"p{p}" / "feat.npy"), feat[rows])
        assert gather._buf.nbytes == block
        address = address or gather._buf.ctypes.data
        assert gather._buf.ctypes.data == address
    with pytest.raises(IndexError, match="rows outside"):
        PartWriter(str(tmp_path / "out"), "bad").write_rows("x.npy", feat, np.array([5000]))


def _mapped_rss_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps")
def test_write_rows_does_not_keep_the_mapped_input_resident(tmp_path: Path) -> None:
    """Writing a partition's rows of a memory-mapped feature file releases the file's
    pages block by block: the mapping ends with far fewer resident pages than the rows
    it read (a whole gather leaves the whole 32 MiB resident)."""
    from distgnn.partition.writer import PartWriter

    path = tmp_path / "feat.npy"
    np.save(path, np.ones((32768, 256), dtype=np.float32))  # 32 MiB
    feat = np.load(path, mmap_mode="r")
    rows = np.arange(0, 32768, 2)
    w = PartWriter(str(tmp_path / "out"), "p")
    w.write_rows("feat.npy", feat, rows, block_bytes=1 << 20)
    assert _mapped_rss_kib(path) <= 4096
    np.take(feat, rows, axis=0)  # the whole gather, for contrast: every page resident
    assert _mapped_rss_kib(path) >= 30000


def test_gather_twice_matches_fancy_indexing() -> None:
    from distgnn.partition.partitioner import gather_twice

    rng = np.random.default_rng(6)
    table = rng.integers(0, 1 << 40, 5000)
    values = rng.integers(0, 5000, 300_000)
    for m in (0, 1000, 300_000):  # below and above the two-thread threshold
        index = rng.integers(0, values.shape[0], m)
        assert np.array_equal(gather_twice(table, values, index), table[values[index]])


def test_metis_start_hook_runs_once_before_metis() -> None:
    """partition_graph starts the input fingerprint when METIS starts (the hook); with
    nothing to partition METIS never starts and the hook is not called."""
    from distgnn.partition.assign import metis_assign

    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 500, 4000), rng.integers(0, 500, 4000)
    calls: list[int] = []
    parts = metis_assign(src, dst, 500, 2, on_start=lambda: calls.append(1))
    assert calls == [1] and set(np.unique(parts)) == {0, 1}
    metis_assign(src, dst, 500, 1, on_start=lambda: calls.append(2))
    assert calls == [1]


@pytest.mark.parametrize(("method", "parts"), [("metis", 2), ("metis", 1), ("random", 2)])
def test_fingerprint_recorded_whatever_the_path(tmp_path: Path, method: str, parts: int) -> None:
    write_graph_dir(generate_graph(GenerateOptions(nodes=300, feat_dim=4)), str(tmp_path / "in"))
    g = load_graph(str(tmp_path / "in"))
    m = partition_graph(g, parts, str(tmp_path / "out"), "g", method=method, progress=False)
    assert m.input_fingerprint == load_graph(str(tmp_path / "in")).fingerprint()
