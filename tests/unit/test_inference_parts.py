"""Inference in one process: layer-wise pass, models from checkpoints, the output format,
partial runs, scoring pairs and the CLI's one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.unit.test_train_inprocess import planted_graph

from distgnn.errors import ConfigError, StorageError
from distgnn.nn import GAT, GraphSAGE
from distgnn.npy import ShardWriter
from distgnn.sampling.blocks import to_block
from distgnn.train import infer_output as fmt
from distgnn.train.config import TrainConfig
from distgnn.train.ddp import DDPContext
from distgnn.train.graph import TrainGraph
from distgnn.train.inference import (
    InferOptions,
    infer_to_storage,
    model_from_state,
    write_shards,
)
from distgnn.train.layerwise import infer, rows_factory
from distgnn.train.score import EmbeddingTable, score_pairs

CTX = DDPContext(0, 1, torch.device("cpu"))


def full_forward(tg: TrainGraph, model: torch.nn.Module) -> torch.Tensor:
    """The whole graph as one full-neighbour block per layer."""
    g = tg.g
    n = g.num_nodes()
    block = to_block(np.arange(n), g.src, g.dst, np.arange(g.src.size))
    with torch.no_grad():
        out: torch.Tensor = model([block] * len(model.layers), g.ndata["feat"].float())
    return out


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_layer_wise_equals_full_forward_and_checkpoint_roundtrip(kind: str) -> None:
    torch.manual_seed(0)
    tg = planted_graph(n=200)
    model = GraphSAGE(2, 8, 3, 3, 0.5) if kind == "sage" else GAT(2, 8, 3, 2, heads=2)
    model.eval()
    rebuilt = model_from_state(model.state_dict())
    assert type(rebuilt) is type(model)
    layers = infer(tg, rebuilt, "feat", batch_size=37, ctx=CTX)  # uneven batches
    final = layers[-1]
    assert final is not None and all(x is None for x in layers[:-1])  # hidden ones released
    got = final.read(np.arange(200))
    torch.testing.assert_close(got, full_forward(tg, model), atol=1e-5, rtol=0)


def test_checkpoint_with_pre_dgl_parameter_names_loads() -> None:
    model = GraphSAGE(2, 8, 3, 2)
    old = {k.replace(".bias", ".fc_self.bias"): v for k, v in model.state_dict().items()}
    assert "layers.0.fc_self.bias" in old
    rebuilt = model_from_state(old)
    for k, v in model.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[k], v), k


def test_checkpoint_of_another_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a built-in model"):
        model_from_state({"fc.weight": torch.zeros(2, 2)})
    state = GraphSAGE(2, 8, 3, 2).state_dict()
    state["layers.1.fc_neigh.weight"] = torch.zeros(3, 5)
    with pytest.raises(ConfigError, match="do not fit"):
        model_from_state(state)


def test_output_written_read_and_hidden_layer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tg = planted_graph(n=150)
    model = GraphSAGE(2, 6, 2, 2, 0.0).eval()
    out = str(tmp_path / "out")
    s = infer_to_storage(tg, model, CTX, InferOptions(out, batch_size=40))
    got = fmt.read_output(out)
    ref = full_forward(tg, model)
    assert np.array_equal(got["orig_id"], np.arange(150))
    np.testing.assert_allclose(got["embedding"], ref.numpy(), atol=1e-5)
    assert np.array_equal(got["pred"], ref.argmax(1).numpy())
    test = tg.g.ndata["test_mask"].numpy().astype(bool)
    acc = (got["pred"][test] == tg.g.ndata["label"].numpy()[test]).mean()
    assert s["inference_test_accuracy"] == pytest.approx(acc, abs=1e-6)
    # readable without DistGNN: the index and plain np.load
    idx = json.loads((tmp_path / "out" / "index.json").read_text())
    f = idx["node_types"]["_N"]["shards"][0]["files"]["prob"]
    prob = np.load(tmp_path / "out" / f["path"], allow_pickle=False)
    assert prob.shape == (150,) and np.all((prob > 0.49) & (prob <= 1.0))
    # a node app's output has no per-edge part (the edge apps': tests/integration)
    assert "edge_types" not in idx
    with pytest.raises(StorageError, match="the output has no per-edge predictions"):
        fmt.read_edge_output(out)
    # the last hidden layer instead (ReLU output of layer 0), LP-style (no predictions)
    hid = str(tmp_path / "hid")
    infer_to_storage(tg, model, CTX, InferOptions(hid, embedding_layer="hidden", classify=False))
    h = fmt.read_output(hid)
    assert set(h) == {"orig_id", "embedding"} and h["embedding"].shape == (150, 6)
    g = tg.g
    block = to_block(np.arange(150), g.src, g.dst, np.arange(g.src.size))
    with torch.no_grad():
        h0 = torch.relu(model.layers[0](block, g.ndata["feat"].float()))
    np.testing.assert_allclose(h["embedding"], h0.numpy(), atol=1e-5)


def test_half_written_run_is_never_taken_and_is_cleaned_by_the_next(tmp_path: Path) -> None:
    tg = planted_graph(n=120)
    model = GraphSAGE(2, 4, 2, 2, 0.0).eval()
    out = str(tmp_path / "out")
    with pytest.raises(StorageError, match="not found"):
        fmt.read_index(out)  # nothing written yet: no output
    infer_to_storage(tg, model, CTX, InferOptions(out))
    first = fmt.read_index(out)
    before = fmt.read_output(out)
    # a run that wrote its shards and died before its index
    opts = InferOptions(out)
    layers = infer(tg, model, "feat", ctx=CTX)
    final = layers[-1]
    assert final is not None
    write_shards(tg, CTX, opts, "deadbeef00", final, final, None)
    assert (tmp_path / "out" / "run-deadbeef00" / "_N" / "part-00000" / "embedding.npy").exists()
    assert fmt.read_index(out)["run"] == first["run"]  # still the complete run
    for k, v in fmt.read_output(out).items():
        assert np.array_equal(v, before[k])
    # a corrupted shard is detected, not read
    shard = first["node_types"]["_N"]["shards"][0]["files"]["embedding"]["path"]
    p = tmp_path / "out" / shard
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="sha256"):
        fmt.read_output(out)
    # the next complete run replaces both and removes their folders
    infer_to_storage(tg, model, CTX, InferOptions(out))
    runs = sorted(x.name for x in (tmp_path / "out").iterdir() if x.name.startswith("run-"))
    assert runs == [f"run-{fmt.read_index(out)['run']}"]
    np.testing.assert_allclose(fmt.read_output(out)["embedding"], before["embedding"], atol=1e-6)


def test_shard_writer_refuses_wrong_row_counts(tmp_path: Path) -> None:
    w = ShardWriter(str(tmp_path), "a.npy", np.dtype(np.float32), (3, 2))
    w.write(np.zeros((2, 2)))
    with pytest.raises(StorageError, match="do not fit"):
        w.write(np.zeros((2, 2)))
    with pytest.raises(StorageError, match="2 rows written, 3 expected"):
        w.close()


def test_score_pairs_is_the_dot_product(tmp_path: Path) -> None:
    orig = np.array([10, 3, 7])
    emb = np.array([[1, 0], [0, 2], [1, 1]], dtype=np.float32)
    t = EmbeddingTable(np.sort(orig), emb[np.argsort(orig)])
    s = score_pairs(t, np.array([[10, 7], [3, 3], [7, 3]]))
    np.testing.assert_allclose(s, [1.0, 4.0, 2.0])
    with pytest.raises(ConfigError, match="node 5 has no embedding"):
        score_pairs(t, np.array([[10, 5]]))
    with pytest.raises(ConfigError, match="shape"):
        score_pairs(t, np.array([1, 2, 3]))


def test_score_cli(tmp_path: Path) -> None:
    tg = planted_graph(n=60)
    model = GraphSAGE(2, 4, 4, 2, 0.0).eval()
    out = str(tmp_path / "emb")
    infer_to_storage(tg, model, CTX, InferOptions(out, classify=False))
    pairs = np.array([[0, 1], [5, 59]], dtype=np.int64)
    np.save(tmp_path / "pairs.npy", pairs)
    cmd = [sys.executable, "-m", "distgnn.cli", "score", "--embeddings", out]
    res = subprocess.run(
        [*cmd, "--pairs", str(tmp_path / "pairs.npy"), "--out", str(tmp_path / "s.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    e = fmt.read_output(out)["embedding"]
    np.testing.assert_allclose(
        np.load(tmp_path / "s.npy"), (e[[0, 5]] * e[[1, 59]]).sum(1), rtol=1e-6
    )
    np.save(tmp_path / "bad.npy", np.array([[0, 999]]))
    res = subprocess.run(
        [*cmd, "--pairs", str(tmp_path / "bad.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2 and "node 999 has no embedding" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_inference_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="--output-url"):
        TrainConfig(app="inference", checkpoint_url="c").validate()
    with pytest.raises(ConfigError, match="--checkpoint-url"):
        TrainConfig(infer_after_training=True, output_url="o").validate()
    with pytest.raises(ConfigError, match="--embedding-layer"):
        InferOptions("o", embedding_layer="first").validate()
    tg = planted_graph(n=30)
    with pytest.raises(ConfigError, match="no hidden layer"):
        infer_to_storage(
            tg, GraphSAGE(2, 4, 2, 1), CTX, InferOptions("/nonexistent", embedding_layer="hidden")
        )
    with pytest.raises(ConfigError, match="'feat' has 2 columns but the model takes 5"):
        infer_to_storage(tg, GraphSAGE(5, 4, 2, 2), CTX, InferOptions("/nonexistent"))
    assert rows_factory(tg, "r")(0, 3).read(np.arange(2)).shape == (2, 3)


def test_link_prediction_checkpoint_gives_embeddings_to_score(tmp_path: Path) -> None:
    from distgnn.contract import TrainerEnv
    from distgnn.train import inference, link_prediction
    from distgnn.train.ddp import init_ddp

    tg = planted_graph(n=120)
    ck = str(tmp_path / "ck")
    cfg = TrainConfig(
        app="link-prediction", epochs=1, hidden=8, batch_size=256, fanouts=[3, 3],
        checkpoint_url=ck,
    ).validate()  # fmt: skip
    link_prediction.run(cfg, tg, init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1)))
    out = str(tmp_path / "emb")
    icfg = TrainConfig(app="inference", checkpoint_url=ck, output_url=out).validate()
    m = inference.run(icfg, tg, CTX)
    assert m["app"] == "inference" and "inference_test_accuracy" not in m
    idx = fmt.read_index(out)
    assert idx["app"] == "link-prediction" and set(idx["arrays"]) == {"orig_id", "embedding"}
    table = EmbeddingTable.load(out)
    model = model_from_state(torch.load(ck + "/ckpt-epoch-00000.pt", weights_only=True)["model"])
    h = full_forward(tg, model).numpy()
    np.testing.assert_allclose(
        score_pairs(table, np.array([[0, 1], [7, 3]])),
        [h[0] @ h[1], h[7] @ h[3]],
        rtol=1e-5,
        atol=1e-5,
    )


def test_progress_endpoint_shows_the_layers(tmp_path: Path) -> None:
    import urllib.request

    from distgnn import contract
    from distgnn.train.telemetry import ProgressServer, Telemetry

    tel = Telemetry(0, ProgressServer("127.0.0.1", 0))
    try:
        tg = planted_graph(n=50)
        model = GraphSAGE(2, 4, 2, 3, 0.0).eval()
        infer_to_storage(tg, model, CTX, InferOptions(str(tmp_path / "o")), telemetry=tel)
        assert tel.progress is not None
        url = f"http://127.0.0.1:{tel.progress.port}{contract.PROGRESS_PATH}"
        with urllib.request.urlopen(url, timeout=10) as r:
            snap = json.loads(r.read())
        assert snap["state"] == "inference" and snap["inferenceLayers"] == "3/3"
    finally:
        tel.close()
