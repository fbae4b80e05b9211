"""Partition quality: METIS beats random, balance flags balance, CLI partition + inspect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from distgnn.cli import main as cli_main
from distgnn.errors import ConfigError, GraphFormatError
from distgnn.graph.io import graph_from_arrays, load_graph
from distgnn.partition.partitioner import partition_graph


def test_metis_cut_below_random(cora_path: Path, tmp_path: Path) -> None:
    g = load_graph(str(cora_path))
    metis = partition_graph(g, 4, str(tmp_path / "m"), "c", progress=False)
    rand = partition_graph(g, 4, str(tmp_path / "r"), "c", method="random", progress=False)
    assert metis.edge_cut < rand.edge_cut / 3
    sizes = [p.owned_nodes for p in rand.parts]
    assert max(sizes) - min(sizes) <= 1


def _spread(values: list[int]) -> float:
    return (max(values) - min(values)) / (sum(values) / len(values))


def test_balance_train(cora_path: Path, tmp_path: Path) -> None:
    g = load_graph(str(cora_path))
    plain = partition_graph(g, 4, str(tmp_path / "a"), "c", progress=False)
    bal = partition_graph(g, 4, str(tmp_path / "b"), "c", balance_train=True, progress=False)
    before = _spread([p.train_nodes for p in plain.parts])
    after = _spread([p.train_nodes for p in bal.parts])
    assert after < before and after <= 0.1
    assert sum(p.train_nodes for p in bal.parts) == int(g.node_data["_N"]["train_mask"].sum())


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_balance_edges(tmp_path: Path, seed: int) -> None:
    # a graph whose in-degree is concentrated on a third of the nodes
    rng = np.random.default_rng(seed)
    n = 3000
    src = rng.integers(0, n, 30000)
    dst = np.where(rng.random(30000) < 0.8, rng.integers(0, n // 3, 30000), src // 2 + 7) % n
    g = graph_from_arrays({"src": src, "dst": dst, "num_nodes": np.int64(n)})
    plain = partition_graph(g, 4, str(tmp_path / "a"), "g", progress=False)
    bal = partition_graph(g, 4, str(tmp_path / "b"), "g", balance_edges=True, progress=False)
    # METIS keeps each part within 3 % of its share of the weight (1 + in-degree)
    assert _spread([p.edges for p in bal.parts]) <= 0.07
    assert _spread([p.edges for p in bal.parts]) < _spread([p.edges for p in plain.parts])


def test_balance_train_without_the_mask_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # balanceTrain is on by default: a graph without the mask still partitions
    g = graph_from_arrays({"src": np.array([0, 1]), "dst": np.array([1, 2])})
    with caplog.at_level("WARNING", logger="distgnn.partition"):
        m = partition_graph(g, 2, str(tmp_path / "a"), "g", balance_train=True, progress=False)
    assert m.num_parts == 2 and sum(p.train_nodes for p in m.parts) == 0
    assert any("train mask" in r.getMessage() for r in caplog.records)
    bad = graph_from_arrays({"src": np.array([0]), "dst": np.array([1]), "m": np.ones((2, 2))})
    with pytest.raises(GraphFormatError, match="1-D"):
        partition_graph(bad, 2, str(tmp_path / "b"), "g", balance_train=True, train_mask="m")


def test_balance_train_on_a_named_mask(cora_path: Path, tmp_path: Path) -> None:
    g = load_graph(str(cora_path))
    nd = g.node_data["_N"]
    nd["labelled"] = nd.pop("train_mask")
    m = partition_graph(
        g, 4, str(tmp_path), "c", balance_train=True, train_mask="labelled", progress=False
    )
    counts = [p.train_nodes for p in m.parts]
    assert sum(counts) == int(nd["labelled"].sum()) and _spread(counts) <= 0.1
    assert m.options.train_mask == "labelled"


def test_bad_partition_options(tmp_path: Path) -> None:
    g = graph_from_arrays({"src": np.array([0, 1]), "dst": np.array([1, 2])})
    with pytest.raises(ConfigError, match="halo_hops"):
        partition_graph(g, 2, str(tmp_path), "g", halo_hops=0, progress=False)
    with pytest.raises(ConfigError, match="num_parts"):
        partition_graph(g, 0, str(tmp_path), "g", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_partition_and_inspect(
    cora_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = cli_main(
        [
            "--log-format",
            "json",
            "partition",
            str(cora_path),
            "--num-parts",
            "2",
            "--out",
            str(out),
            "--name",
            "cora",
            "--balance-train",
        ]
    )
    assert rc == 0
    capsys.readouterr()
    assert cli_main(["inspect", str(out / "cora.json"), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["num_nodes"] == 2708 and obj["num_edges"] == 10556 and obj["num_parts"] == 2
    assert sum(p["owned_nodes"] for p in obj["parts"]) == 2708
    assert sum(p["edges"] for p in obj["parts"]) == 10556
    assert sum(p["train_nodes"] for p in obj["parts"]) == 140
    assert 0 < obj["edge_cut"] < 0.2 and all(p["halo_nodes"] > 0 for p in obj["parts"])
    assert cli_main(["inspect", str(out / "cora.json")]) == 0
    assert "edge cut" in capsys.readouterr().out
    # a user mistake is one clear line and exit code 2
    assert cli_main(["inspect", str(out / "nope.json")]) == 2
    assert "not found" in capsys.readouterr().err
