"""The benchmark generator: deterministic, heavy-tailed degrees, visible communities."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgnn.cli import main as cli_main
from distgnn.graph.generate import GenerateOptions, generate_graph
from distgnn.graph.io import load_graph
from distgnn.partition.assign import symmetric_csr


def test_deterministic_and_seeded() -> None:
    o = GenerateOptions(nodes=2000, avg_degree=8, feat_dim=4, communities=4, seed=3)
    a, b = generate_graph(o), generate_graph(o)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = generate_graph(GenerateOptions(nodes=2000, avg_degree=8, feat_dim=4, seed=4))
    assert not np.array_equal(a["src"], c["src"])


def test_heavy_tail_and_communities() -> None:
    g = generate_graph(GenerateOptions(nodes=5000, avg_degree=10, feat_dim=8, communities=5))
    assert g["src"].shape[0] == 50000 and g["feat"].dtype == np.float32
    deg = np.bincount(np.concatenate([g["src"], g["dst"]]), minlength=5000)
    assert deg.max() > 10 * np.median(deg)  # heavy tail
    same = np.mean(g["label"][g["src"]] == g["label"][g["dst"]])
    assert same > 0.6  # planted communities (random graph: ~0.2)
    assert np.count_nonzero(g["src"] == g["dst"]) == 0
    keys = g["src"] * 5000 + g["dst"]
    assert np.unique(keys).size == keys.size  # no repeated edges


def test_local_structure_coarsens() -> None:
    """Nested groups give local clustering: METIS cuts far fewer edges than on a
    graph with the same degrees and communities but no locality below them."""
    import pymetis

    from distgnn.partition.assign import symmetric_csr

    def cut(locality: tuple[float, ...]) -> float:
        o = GenerateOptions(nodes=4000, avg_degree=8, feat_dim=1, communities=2,
                            group_sizes=(64, 512), locality=locality)  # fmt: skip
        g = generate_graph(o)
        xadj, adj = symmetric_csr(g["src"], g["dst"], 4000)
        p = np.asarray(pymetis.part_graph(8, pymetis.CSRAdjacency(xadj, adj)).vertex_part)
        return float(np.mean(p[g["src"]] != p[g["dst"]]))

    assert cut((0.55, 0.25, 0.12)) < 0.5 * cut((0.0, 0.0, 0.92))


def test_symmetric_csr_dedups() -> None:
    xadj, adj = symmetric_csr(np.array([0, 0, 1, 2, 2]), np.array([1, 1, 0, 2, 0]), 3)
    assert xadj.tolist() == [0, 2, 3, 4] and adj.tolist() == [1, 2, 0, 0]


def test_cli_generate(tmp_path: Path) -> None:
    out = tmp_path / "g"
    args = ["generate", "--nodes", "500", "--avg-degree", "4", "--feat-dim", "3", "--out"]
    assert cli_main([*args, str(out)]) == 0
    g = load_graph(str(out))
    assert g.num_nodes == 500 and g.num_edges == 2000
    assert g.node_data["_N"]["feat"].shape == (500, 3)


def test_cli_generate_flat_model_and_bad_locality(tmp_path: Path) -> None:
    out = tmp_path / "flat"
    base = ["generate", "--nodes", "400", "--avg-degree", "3", "--feat-dim", "2"]
    assert cli_main([*base, "--group-sizes", "", "--locality", "0.8", "--out", str(out)]) == 0
    assert load_graph(str(out)).num_edges == 1200
    assert cli_main([*base, "--locality", "0.5", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


def test_drop_repeats() -> None:
    from distgnn.graph.data import drop_repeats

    assert drop_repeats(np.array([1, 1, 2, 5, 5, 5, 9])).tolist() == [1, 2, 5, 9]
    a = np.array([1, 2, 3])
    assert drop_repeats(a) is a and drop_repeats(np.zeros(0, np.int64)).size == 0


def test_options_reject_bad_values() -> None:
    import pytest

    from distgnn.errors import ConfigError

    for bad in (
        {"nodes": 1},
        {"locality": (0.5,)},
        {"group_sizes": (0, 8)},
        {"locality": (0.6, 0.3, 0.2)},
    ):
        with pytest.raises(ConfigError):
            GenerateOptions(**bad)  # type: ignore[arg-type]
