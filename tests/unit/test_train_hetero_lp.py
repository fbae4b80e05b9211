"""Link prediction on a heterogeneous graph, in one process: the R-GCN encoder learns the
``author:writes:paper`` edges of the typed Cora (examples/dgl/prepare_data.py) well beyond
random, inference writes every node type's embedding from its checkpoint (the scores
``distgnn score`` computes from them rank held-out edges too), the split and the
exclusion of reverse edges hold per edge type, and mistakes name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.hetero import checkpoint_table, standalone_graph, without_author_features

from distgnn.errors import ConfigError
from distgnn.sampling import LocalGraph
from distgnn.sampling.blocks import EID
from distgnn.sampling.source import LocalSource
from distgnn.train import hetero_link_prediction as hlp
from distgnn.train import infer_output as fmt
from distgnn.train import inference, link_prediction
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph
from distgnn.train.link_prediction import ranking_metrics
from distgnn.train.metrics import roc_auc
from distgnn.train.score import EmbeddingTable, score_pairs

CTX = DDPContext(0, 1, torch.device("cpu"))
WRITES = "author:writes:paper"
MARGIN = 0.15
"""MRR above random (0.174 with 20 negatives) a trained model must beat; an untrained
R-GCN scores about the random MRR (asserted below)"""


def cfg(**kw: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "app": "link-prediction",
        "model": "rgcn",
        "target_etype": WRITES,
        "epochs": 1,
        "hidden": 32,
        "fanouts": [5, 5],
        "batch_size": 256,
        "dropout": 0.0,
    }
    return TrainConfig(**(base | kw)).validate()


def test_rgcn_learns_the_target_edges_and_infers_every_type(
    typed_graph: TrainGraph,
    typed_arrays: dict[str, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISTGNN_MANIFEST", str(typed_graph.owner))
    c = cfg(checkpoint_url=str(tmp_path / "ckpt"), output_url=str(tmp_path / "out"))
    torch.manual_seed(0)
    untrained = hlp.typed_task(c, typed_graph, CTX)
    before = ranking_metrics(*untrained.test_scores(untrained.model))
    m = link_prediction.run(c, typed_graph, CTX)
    assert m["model"] == "rgcn" and m["target_etype"] == WRITES, m
    n_writes = typed_arrays["edges/author:writes:paper/src"].size
    assert m["test_edges"] == int(n_writes * 0.05)
    assert before["test_mrr"] < m["random_mrr"] + MARGIN, before  # the bar is a real one
    assert m["test_mrr"] > m["random_mrr"] + MARGIN and m["test_auc"] > 0.7, m

    s = inference.run(c, typed_graph, CTX)
    assert s["inference_node_types"] == ["author", "paper"]
    idx = fmt.read_index(c.output_url or "")
    assert idx["app"] == "link-prediction" and idx["target_etype"] == WRITES
    tables = {}
    for t, n in (("paper", 2708), ("author", 900)):
        got = fmt.read_output(c.output_url or "", t)
        assert "pred" not in got  # link prediction: embeddings only
        assert np.array_equal(np.sort(got["orig_id"]), np.arange(n)), t
        assert got["embedding"].shape == (n, 32) and np.isfinite(got["embedding"]).all()
        tables[t] = EmbeddingTable.load(c.output_url or "", t)
    # the written embeddings score as the app does: held-out author-paper edges above
    # random author-paper pairs (what `distgnn score --src-type author --dst-type paper` prints)
    _train, test = hlp.split_edges(typed_graph, ("author", "writes", "paper"), c.seed)
    w, p = (
        typed_arrays["edges/author:writes:paper/src"],
        typed_arrays["edges/author:writes:paper/dst"],
    )
    rng = np.random.default_rng(1)
    rand = np.stack([rng.integers(0, 900, 500), rng.integers(0, 2708, 500)], 1)
    pos = score_pairs(tables["author"], np.stack([w[test], p[test]], 1), tables["paper"])
    neg = score_pairs(tables["author"], rand, tables["paper"])
    assert roc_auc(pos, neg) > 0.7


def test_the_split_holds_out_reverse_pairs_of_a_relation_within_one_type(
    typed_graph: TrainGraph,
) -> None:
    cites = ("paper", "cites", "paper")
    train, test = hlp.split_edges(typed_graph, cites, seed=3)
    s, d = (
        x.numpy()
        for x in typed_graph.g.find_edges(torch.arange(typed_graph.g.num_edges(cites)), cites)
    )
    held = set(zip(s[test], d[test], strict=True)) | set(zip(d[test], s[test], strict=True))
    assert test.size == int(s.size * 0.05) and not set(train) & set(test)
    assert not held & set(zip(s[train], d[train], strict=True))
    # Cora's citations go both ways: the reverses of the test edges left the training set
    assert train.size < s.size - test.size
    writes = ("author", "writes", "paper")
    train_w, test_w = hlp.split_edges(typed_graph, writes, seed=3)
    assert train_w.size + test_w.size <= typed_graph.g.num_edges(writes)


@pytest.mark.parametrize(("exclude", "leaks"), [("reverse", False), ("self", True)])
def test_reverse_exclusion_drops_the_reverse_edge_type(
    typed_graph: TrainGraph, exclude: str, leaks: bool
) -> None:
    """exclude reverse: no sampled edge joins a seed's author and paper, either way (the
    paper:written-by:author edge included); exclude self lets those reverse edges in."""
    c = cfg(exclude=exclude, batch_size=128, fanouts=[-1, -1])
    task = hlp.typed_task(c, typed_graph, CTX)
    checked = hlp.check_graph(c, typed_graph)
    assert checked is not None
    typing, cet = checked
    found_reverse = False
    with task.loader as loader:
        for b, (_inp, pos, _neg, blocks) in enumerate(loader):
            seeds = typing.homo_eids({cet: pos.edata[EID][cet]})
            u, v = typed_graph.source.find_edges(seeds)
            pairs = set(zip(u, v, strict=True)) | set(zip(v, u, strict=True))
            eids = np.concatenate([blk.eid for blk in blocks])
            s, d = typed_graph.source.find_edges(eids)
            found = pairs & set(zip(s, d, strict=True))
            assert leaks or not found, found
            found_reverse |= bool(found)
            if b == 3:
                break
    assert found_reverse == leaks


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"target_etype": "author:reviews:paper"},
            r"--target-etype \(trainers.app.targetEtype\): 'author:reviews:paper' is not an "
            r"edge type of the graph \['author:writes:paper', 'paper:cites:paper', "
            r"'paper:written-by:author'\]",
        ),
        (
            {"model": "sage", "target_etype": None},
            r"--model \(trainers.app.model\): sage is homogeneous.*--target-etype",
        ),
        ({"feat": "x"}, "--feat: no node type has the field 'x'"),
    ],
)
def test_typed_graph_mistakes_name_the_field(typed_graph: TrainGraph, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        link_prediction.run(cfg(**kw), typed_graph, CTX)


def test_rgcn_link_prediction_on_a_homogeneous_graph_is_refused() -> None:
    n = 20
    src = np.arange(n)
    g = LocalGraph(src, (src + 1) % n, n, {"feat": np.ones((n, 2), np.float32)})
    with pytest.raises(ConfigError, match=r"rgcn needs a graph with node types.*\(sage\)"):
        link_prediction.run(cfg(), TrainGraph(g, LocalSource(g)), CTX)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"target_etype": None}, r"--target-etype \(trainers.app.targetEtype\): required"),
        ({"target_etype": "writes"}, "'writes' is not a canonical edge type"),
        ({"target_etype": "a:b:c:d"}, "is not a canonical edge type"),
        (
            {"app": "node-classification"},
            "needs link-prediction, edge-classification, edge-regression with --model rgcn",
        ),
        ({"model": "sage"}, r"with --model rgcn, not link-prediction with sage"),
        ({"target_ntype": "paper"}, r"--target-ntype.*link-prediction takes --target-etype"),
    ],
)
def test_target_edge_type_options_are_checked(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg(**kw)


def test_featureless_authors_learn_sparse_embeddings_for_the_target_edges(
    typed_arrays: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authors without their feature: their table ``node_emb_author`` (SparseAdam,
    ``--sparse-lr``) is what the link predictor learns for them; the checkpoint carries
    it and inference writes the authors' embeddings from it, and the table itself."""
    with standalone_graph(without_author_features(typed_arrays), tmp_path) as tg:
        monkeypatch.setenv("DISTGNN_MANIFEST", str(tg.owner))
        c = cfg(epochs=2, sparse_lr=0.05, checkpoint_url=str(tmp_path / "ck"),
                output_url=str(tmp_path / "o"))  # fmt: skip
        m = link_prediction.run(c, tg, CTX)
        assert m["test_mrr"] > m["random_mrr"] + MARGIN and m["test_auc"] > 0.7, m
        inference.run(c, tg, CTX)
    ck = torch.load(tmp_path / "ck" / "ckpt-epoch-00001.pt", weights_only=True)
    table = checkpoint_table(tmp_path / "ck" / "ckpt-epoch-00001.pt", "node_emb_author")
    assert table.shape == (900, 32)
    assert not any("embed" in k for k in ck["model"])
    authors = fmt.read_output(str(tmp_path / "o"), "author")
    assert authors["embedding"].shape == (900, 32) and np.isfinite(authors["embedding"]).all()
    # GraphStorm-like: the learnt table itself is written beside the authors' embeddings,
    # each author's row once (the checkpoint's table, in the output's orig_id order)
    got = authors["input_embedding"]
    assert got.shape == (900, 32) and np.isfinite(got).all()
    assert np.array_equal(np.unique(got, axis=0), np.unique(table, axis=0))
    assert "input_embedding" not in fmt.read_output(str(tmp_path / "o"), "paper")
    assert fmt.read_index(str(tmp_path / "o"))["node_types"]["author"]["arrays"] == {
        "input_embedding": {"dtype": "float32", "shape": [32]}
    }
