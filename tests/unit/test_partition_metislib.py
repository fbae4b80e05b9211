"""The METIS library choice (``DISTGNN_METIS_LIBRARY``): index width probe, fallbacks, errors."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import numpy as np
import pytest

from distgnn.cli import main as cli_main
from distgnn.errors import ConfigError
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.assign import _kway, weighted_symmetric_csr
from distgnn.partition.metislib import ENV, find_metis, probe_idx_bits
from distgnn.partition.partitioner import partition_graph

SYSTEM = ctypes.util.find_library("metis")


def _graph(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    # two dense halves, few edges between them: any sane 2-way cut finds them
    half = rng.integers(0, 2, 30000)
    src = rng.integers(0, n // 2, 30000) + half * (n // 2)
    dst = rng.integers(0, n // 2, 30000) + half * (n // 2)
    cross = rng.random(30000) < 0.02
    dst[cross] = rng.integers(0, n, int(cross.sum()))
    return src, dst, n


def test_pymetis_library_has_64_bit_indices() -> None:
    lib = find_metis({ENV: "pymetis"})
    assert lib is not None and lib.idx_bits == 64 and lib.dtype == np.int64
    assert probe_idx_bits(lib.lib) == 64
    assert lib.fits(2**40)


@pytest.mark.skipif(SYSTEM is None, reason="no system libmetis (e.g. Debian's libmetis5)")
def test_auto_prefers_a_32_bit_system_library() -> None:
    lib = find_metis({})
    assert lib is not None and lib.idx_bits == 32 and lib.dtype == np.int32
    assert lib.fits(2**31 - 2) and not lib.fits(2**31)
    same = find_metis({ENV: str(lib.path)})
    assert same is not None and same.idx_bits == 32


@pytest.mark.skipif(SYSTEM is None, reason="no system libmetis (e.g. Debian's libmetis5)")
def test_32_bit_library_partitions_like_the_64_bit_one() -> None:
    """Same graph through both builds: valid, balanced, and cuts of the same quality."""
    src, dst, n = _graph()
    cuts = {}
    for env in ("auto", "pymetis"):
        lib = find_metis({ENV: env})
        assert lib is not None
        xadj, adj, w = weighted_symmetric_csr(src, dst, n, lib.dtype)
        assert xadj.dtype == lib.dtype and adj.dtype == lib.dtype
        parts = _kway(xadj, adj, 2, None, 0, lib, w)
        assert parts.dtype == np.int64 and set(np.unique(parts)) == {0, 1}
        assert abs(int(np.count_nonzero(parts == 0)) - n // 2) <= 0.03 * n
        cuts[lib.idx_bits] = int(np.count_nonzero(parts[src] != parts[dst]))
    assert cuts[32] <= 1.1 * cuts[64] + 10 and cuts[64] <= 1.1 * cuts[32] + 10


def test_a_bad_library_setting_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "libnotmetis.so"
    bogus.write_bytes(b"not a library")
    with pytest.raises(ConfigError, match=ENV):
        find_metis({ENV: str(bogus)})
    src, dst, n = _graph(300)
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n)})
    monkeypatch.setenv(ENV, str(tmp_path / "missing.so"))
    with pytest.raises(ConfigError, match=ENV):
        partition_graph(g, 2, str(tmp_path / "out"), "g", progress=False)
    np.savez(tmp_path / "g.npz", src=src, dst=dst, num_nodes=np.int64(n))
    args = ["partition", str(tmp_path / "g.npz"), "--num-parts", "2", "--out", str(tmp_path)]
    assert cli_main([*args, "--name", "g", "--no-balance-train"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"distgnn partition: error: {ENV}="), last


def test_partition_with_either_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole pipeline with each available build: same edges per partition total,
    an edge cut far below a random assignment's 0.5."""
    src, dst, n = _graph(2000, seed=1)
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n)})
    for env in ("auto", "pymetis"):
        monkeypatch.setenv(ENV, env)
        m = partition_graph(g, 2, str(tmp_path / env), "g", progress=False)
        assert sum(p.edges for p in m.parts) == src.shape[0]
        assert m.edge_cut < 0.1
