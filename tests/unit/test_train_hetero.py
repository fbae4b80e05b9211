"""The built-in app on a heterogeneous graph, in one process: the R-GCN trains on the
target node type of the typed Cora (examples/dgl/prepare_data.py), checkpoints, and the
inference app writes every node type's output from the checkpoint; mistakes in the
model / target type / graph combination are ConfigErrors naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.hetero import (
    checkpoint_table,
    rgcn_config,
    standalone_graph,
    without_author_features,
)

import distgnn.distributed as dd
from distgnn.errors import ConfigError
from distgnn.nn import RGCN
from distgnn.sampling import LocalGraph
from distgnn.sampling.source import LocalSource
from distgnn.train import infer_output as fmt
from distgnn.train import inference, node_classification
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph
from distgnn.train.hetero_node_classification import check_graph

CTX = DDPContext(0, 1, torch.device("cpu"))


def cfg(**kw: Any) -> TrainConfig:
    return rgcn_config(**({"epochs": 3} | kw))


def test_rgcn_trains_on_the_target_type_and_infers_every_type(
    typed_graph: TrainGraph,
    typed_arrays: dict[str, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISTGNN_MANIFEST", str(typed_graph.owner))
    c = cfg(checkpoint_url=str(tmp_path / "ckpt"), output_url=str(tmp_path / "out"))
    m = node_classification.run(c, typed_graph, CTX)
    assert m["model"] == "rgcn" and m["target_ntype"] == "paper"
    # 7 classes: an untrained or miswired model is near 1/7 (or the majority class, 0.32)
    assert m["test_accuracy"] > 0.5, m
    y = typed_arrays["ndata/paper/labels"]
    train, test = (
        typed_arrays[f"ndata/paper/{k}"].astype(bool) for k in ("train_mask", "test_mask")
    )
    majority = float((y[test] == np.bincount(y[train]).argmax()).mean())
    assert m["majority_test_accuracy"] == pytest.approx(majority, abs=1e-4), m
    ck = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert ck[-1] == "ckpt-epoch-00002.pt"

    s = inference.run(c, typed_graph, CTX)
    assert s["inference_node_types"] == ["author", "paper"]
    # the layer-wise pass over all neighbours is the final model's full-neighbour evaluation
    assert abs(s["inference_test_accuracy"] - m["final_test_accuracy"]) <= 0.01, (s, m)
    idx = fmt.read_index(c.output_url or "")
    assert idx["model"] == "rgcn" and idx["target_ntype"] == "paper"
    for t, n in (("paper", 2708), ("author", 900)):
        got = fmt.read_output(c.output_url or "", t)
        assert np.array_equal(np.sort(got["orig_id"]), np.arange(n)), t
        assert got["embedding"].shape == (n, 7) and got["pred"].shape == (n,)
    # predictions keyed by the original paper IDs: right on the test papers
    paper = fmt.read_output(c.output_url or "", "paper")
    pred = np.empty(2708, np.int64)
    pred[paper["orig_id"]] = paper["pred"]
    test = typed_arrays["ndata/paper/test_mask"].astype(bool)
    acc = float((pred[test] == typed_arrays["ndata/paper/labels"][test]).mean())
    assert abs(acc - s["inference_test_accuracy"]) < 1e-6


def test_rgcn_layer_wise_steps_equal_its_forward(typed_graph: TrainGraph) -> None:
    """The steps inference runs are the model's layers (the input layer inside the first)."""
    c = cfg()
    from distgnn.train.hetero_node_classification import build_rgcn

    typing = check_graph(c, typed_graph)
    assert typing is not None
    torch.manual_seed(0)
    model = build_rgcn(c, typed_graph, typing, 7)[0].eval()
    again = RGCN.from_config(model.config())
    again.load_state_dict(model.state_dict())
    loader = dd.DistNodeDataLoader(
        typed_graph.g,
        {"paper": torch.arange(50)},
        dd_sampler([-1, -1]),
        batch_size=50,
        num_samplers=0,
    )
    with loader:
        inp, _out, blocks = next(iter(loader))
    x = {t: typed_graph.g.nodes[t].data["feat"][inp[t]].float() for t in ("author", "paper")}
    with torch.no_grad():
        want = model(blocks, x)
        h: Any = x
        for step, b in zip(again.layerwise().steps, blocks, strict=True):
            h = step(b, h)
    assert set(want) == {"author", "paper"} and want["paper"].shape == (50, 7)
    torch.testing.assert_close(h["paper"], want["paper"])


def dd_sampler(fanouts: list[int]) -> Any:
    from distgnn.dataloading import MultiLayerNeighborSampler

    return MultiLayerNeighborSampler(fanouts)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"target_ntype": None}, r"--target-ntype \(trainers.app.targetNtype\): required"),
        ({"target_ntype": "venue"}, "'venue' is not a node type"),
        ({"model": "sage", "target_ntype": None}, r"--model \(trainers.app.model\): sage is"),
        ({"label": "label"}, "--label: node type 'paper' has no field 'label'"),
        ({"train_mask": "nope"}, "--train-mask: node type 'paper' has no field 'nope'"),
        ({"feat": "x"}, "--feat: no node type has the field 'x'"),
    ],
)
def test_typed_graph_mistakes_name_the_field(typed_graph: TrainGraph, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        node_classification.run(cfg(**kw), typed_graph, CTX)


def test_rgcn_on_a_homogeneous_graph_is_refused() -> None:
    n = 20
    src = np.arange(n)
    g = LocalGraph(src, (src + 1) % n, n, {"feat": np.ones((n, 2), np.float32),
                                          "labels": np.zeros(n, np.int64)})  # fmt: skip
    with pytest.raises(ConfigError, match="rgcn needs a graph with node types"):
        check_graph(cfg(), TrainGraph(g, LocalSource(g)))


def test_target_type_needs_the_typed_model() -> None:
    with pytest.raises(ConfigError, match=r"--target-ntype.*needs --model rgcn"):
        cfg(model="gat")
    with pytest.raises(ConfigError, match=r"--target-ntype.*link-prediction takes --target-etype"):
        cfg(app="link-prediction")


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_a_type_without_the_feature_gets_a_learnt_embedding(
    typed_arrays: dict[str, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sparse: bool,
) -> None:
    """Sparse (default): a DistEmbedding table per featureless type, in the checkpoint's
    ``sparse`` part and not among the model's weights; dense: an nn.Embedding weight."""
    with standalone_graph(without_author_features(typed_arrays), tmp_path) as tg:
        monkeypatch.setenv("DISTGNN_MANIFEST", str(tg.owner))
        c = cfg(epochs=2, checkpoint_url=str(tmp_path / "ck"), output_url=str(tmp_path / "o"),
                sparse_embedding=sparse)  # fmt: skip
        m = node_classification.run(c, tg, CTX)
        assert m["test_accuracy"] > 0.4, m
        assert m.get("sparse_embedding_types") == (["author"] if sparse else None), m
        s = inference.run(c, tg, CTX)
        assert abs(s["inference_test_accuracy"] - m["final_test_accuracy"]) <= 0.01, (s, m)
    assert s["inference_node_types"] == ["author", "paper"]
    authors = fmt.read_output(str(tmp_path / "o"), "author")
    assert authors["embedding"].shape == (900, 7) and np.isfinite(authors["embedding"]).all()
    ck = torch.load(tmp_path / "ck" / "ckpt-epoch-00001.pt", weights_only=True)
    assert ck["extra"]["rgcn"]["num_nodes"] == {"author": 900}
    assert ck["extra"]["rgcn"]["sparse_embedding"] is sparse
    if sparse:
        assert "inputs.embed.author.weight" not in ck["model"]
        table = checkpoint_table(tmp_path / "ck" / "ckpt-epoch-00001.pt", "node_emb_author")
        assert table.shape == (900, 16)
    else:
        assert ck["model"]["inputs.embed.author.weight"].shape == (900, 16)
        assert ck["sparse"] == {}


def test_inference_reads_the_checkpoints_tables(
    typed_arrays: dict[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inference app writes the checkpoint's rows back to the servers before its pass
    (a new job's servers have none; here the live table is scrambled first)."""
    with standalone_graph(without_author_features(typed_arrays), tmp_path) as tg:
        monkeypatch.setenv("DISTGNN_MANIFEST", str(tg.owner))
        c = cfg(epochs=1, checkpoint_url=str(tmp_path / "ck"), output_url=str(tmp_path / "o"))
        node_classification.run(c, tg, CTX)
        first = inference.run(c, tg, CTX)
        policy = tg.g.get_node_partition_policy("author")
        emb = dd.DistTensor(
            (900, 16), torch.float32, "node_emb_author", part_policy=policy, ctx=tg.g
        )
        emb[torch.arange(900)] = torch.rand(900, 16) * 100
        again = inference.run(c, tg, CTX)
        rows = emb[torch.arange(900)]
    assert again["inference_test_accuracy"] == first["inference_test_accuracy"]
    saved = checkpoint_table(tmp_path / "ck" / "ckpt-epoch-00000.pt", "node_emb_author")
    torch.testing.assert_close(rows, torch.from_numpy(saved))


def test_num_bases_shares_bases_across_relations(typed_graph: TrainGraph) -> None:
    from distgnn.train.hetero_node_classification import build_rgcn

    typing = check_graph(cfg(), typed_graph)
    assert typing is not None  # 3 relations: cites, writes, written-by
    model, _ = build_rgcn(cfg(num_bases=2), typed_graph, typing, 7)
    conv = model.layers[0].conv
    assert conv.weight.shape == (2, 16, 16) and conv.coeff.shape == (3, 2)
    assert model.config()["num_bases"] == 2
    again = RGCN.from_config(model.config())
    again.load_state_dict(model.state_dict())  # a checkpoint rebuilds the same shapes
    full, _ = build_rgcn(cfg(num_bases=3), typed_graph, typing, 7)  # = relations: DGL's full
    assert full.layers[0].conv.coeff is None
    with pytest.raises(ConfigError, match=r"--num-bases \(trainers.app.numBases\): 4 is more"):
        build_rgcn(cfg(num_bases=4), typed_graph, typing, 7)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"num_bases": 0}, r"--num-bases \(trainers.app.numBases\): 0 must be >= 1"),
        ({"num_bases": 2, "model": "sage", "target_ntype": None}, r"trainers.app.numBases"),
        ({"sparse_lr": 0.0}, r"--sparse-lr \(trainers.app.sparseLr\)"),
        ({"sparse_lr": 0.1, "model": "gat", "target_ntype": None}, r"trainers.app.sparseLr"),
    ],
)
def test_rgcn_options_name_the_field(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cfg(**kw)
