"""Training pieces: metrics, checkpoints, config validation, padded steps, the CLI parser."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from distgnn.errors import ConfigError, StorageError
from distgnn.train import checkpoint, cli
from distgnn.train.config import TrainConfig, parse_fanouts
from distgnn.train.loop import padded
from distgnn.train.metrics import accuracy, mrr, publish, random_mrr, roc_auc


def test_roc_auc_matches_pairwise_count() -> None:
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 5, 40).astype(float)
    neg = rng.integers(0, 5, 60).astype(float)
    brute = np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg])
    assert roc_auc(pos, neg) == pytest.approx(brute)
    assert roc_auc(np.array([2.0]), np.array([1.0])) == 1.0


def test_mrr_and_random_baseline() -> None:
    pos = np.array([3.0, 0.0])
    neg = np.array([[1.0, 2.0], [1.0, 2.0]])
    assert mrr(pos, neg) == pytest.approx((1.0 + 1 / 3) / 2)
    rng = np.random.default_rng(1)
    sim = mrr(rng.random(20000), rng.random((20000, 4)))
    assert sim == pytest.approx(random_mrr(4), abs=0.01)
    assert accuracy(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([1, 1])) == 0.5


def test_checkpoint_roundtrip_and_latest(tmp_path: Path) -> None:
    base = f"file://{tmp_path}/ck"
    assert checkpoint.latest(base) is None
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    for epoch in (0, 2, 1):
        checkpoint.save(
            base,
            checkpoint.Checkpoint(
                epoch, model.state_dict(), opt.state_dict(), {"emb": torch.ones(2)}
            ),
        )
    url = checkpoint.latest(base)
    assert url is not None and url.endswith("ckpt-epoch-00002.pt")
    ck = checkpoint.load(url)
    assert ck.epoch == 2 and torch.equal(ck.model["weight"], model.state_dict()["weight"])
    assert torch.equal(ck.sparse["emb"], torch.ones(2))
    opt2 = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    opt2.load_state_dict(ck.optimizer)
    (tmp_path / "ck" / "ckpt-epoch-00009.pt").write_bytes(b"garbage")
    with pytest.raises(StorageError, match="ckpt-epoch-00009"):
        checkpoint.load(checkpoint.latest(base) or "")


def test_padded_repeats_last_batch_with_zero_weight() -> None:
    out = list(padded(iter(["a", "b"]), 4))
    assert out == [("a", 1.0), ("b", 1.0), ("b", 0.0), ("b", 0.0)]
    assert list(padded(iter(range(10)), 3)) == [(0, 1.0), (1, 1.0), (2, 1.0)]
    with pytest.raises(ConfigError, match="no training seeds"):
        list(padded(iter([]), 1))


def test_config_validation_names_the_option() -> None:
    TrainConfig().validate()
    with pytest.raises(ConfigError, match="--fanouts"):
        TrainConfig(num_layers=3).validate()
    with pytest.raises(ConfigError, match="--model"):
        TrainConfig(model="gcn").validate()
    with pytest.raises(ConfigError, match="--dropout"):
        TrainConfig(dropout=1.5).validate()
    with pytest.raises(ConfigError, match="--precision"):
        TrainConfig(precision="fp8").validate()
    with pytest.raises(ConfigError, match="--fanouts"):
        parse_fanouts("10,x")


def test_cli_defaults_follow_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTGNN_NUM_SAMPLERS", "2")
    monkeypatch.setenv("DISTGNN_CHECKPOINT_URL", "file:///tmp/x")
    monkeypatch.setenv("DISTGNN_METRICS_FILE", "/tmp/m.json")
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    cfg = cli._config(p.parse_args(["node-classification"]))
    assert isinstance(cfg, TrainConfig)
    assert (cfg.epochs, cfg.num_layers, cfg.hidden, cfg.fanouts) == (10, 2, 128, [10, 25])
    assert (cfg.batch_size, cfg.lr, cfg.dropout, cfg.exclude) == (1024, 0.01, 0.5, "reverse")
    assert (cfg.num_samplers, cfg.checkpoint_url, cfg.metrics_file) == (
        2,
        "file:///tmp/x",
        "/tmp/m.json",
    )
    with pytest.raises(SystemExit):
        p.parse_args(["graph-classification"])


def test_publish_writes_metrics_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DISTGNN_TERMINATION_LOG", str(tmp_path / "term"))
    publish({"test_accuracy": 0.8}, str(tmp_path / "m.json"))
    assert json.loads((tmp_path / "m.json").read_text()) == {"test_accuracy": 0.8}
    assert json.loads((tmp_path / "term").read_text()) == {"test_accuracy": 0.8}
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"test_accuracy": 0.8}


def test_single_trainer_context_needs_no_process_group() -> None:
    from distgnn.contract import TrainerEnv
    from distgnn.train.ddp import agree_steps, all_reduce, init_ddp

    ctx = init_ddp(TrainerEnv(0, 1, "127.0.0.1", 1))
    assert not ctx.joined and ctx.is_main
    assert agree_steps(ctx, 7) == 7 and all_reduce(ctx, [1.0, 2.0]) == [1.0, 2.0]
    with pytest.raises(ConfigError, match="RANK"):
        init_ddp(TrainerEnv(3, 2, "127.0.0.1", 1))
    assert list(itertools.islice(padded(iter([1]), 2), 2)) == [(1, 1.0), (1, 0.0)]


def test_embedding_state_roundtrip(cora_path: Path, tmp_path: Path) -> None:
    from distgnn.distributed import DistEmbedding, DistGraph
    from distgnn.partition.partitioner import partition_graph

    partition_graph(str(cora_path), 2, str(tmp_path / "p"), "cora", method="random", progress=False)
    with DistGraph.standalone(str(tmp_path / "p" / "cora.json")) as g:
        emb = DistEmbedding(g.num_nodes(), 4, "node_emb", ctx=g.ctx)
        saved = checkpoint.embedding_state([emb], chunk=1000)
        assert saved["node_emb"].shape == (2708, 4)
        emb.tensor[torch.arange(10)] = torch.zeros(10, 4)
        assert torch.count_nonzero(emb.tensor[torch.arange(10)]) == 0
        checkpoint.restore_embeddings([emb], saved, chunk=1000)
        assert torch.equal(checkpoint.embedding_state([emb])["node_emb"], saved["node_emb"])
        with pytest.raises(StorageError, match="node_emb"):
            checkpoint.restore_embeddings([emb], {})
