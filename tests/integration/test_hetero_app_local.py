"""The built-in app on a heterogeneous graph as a DistGNNJob in local mode (`distgnn run`):
the typed Cora of examples/dgl/prepare_data.py is partitioned, served by 2 graph servers,
2 DDP trainers train the R-GCN on the ``paper`` nodes (classes, or a float target) or on
the ``author:writes:paper`` edges (link prediction) or the labelled ``paper:cites:paper``
edges (edge classification), then write every node type's embedding (and prediction)
and an edge app's test-edge predictions (``inferAfterTraining``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_local_run import run, write_manifest
from tests.support.hetero import checkpoint_table, typed_cora, without_author_features

from distgnn.train.infer_output import read_edge_output, read_index, read_output

pytestmark = pytest.mark.slow


def hetero_job(tmp_path: Path, arrays: dict[str, np.ndarray], app: dict[str, Any]) -> Path:
    """A job on the typed Cora: 2 partitions, 2 trainers checkpointing to ckpt/, ``app``."""
    np.savez(tmp_path / "cora-hetero.npz", **arrays)  # type: ignore[arg-type]
    return write_manifest(
        tmp_path / "job.yaml",
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "DistGNNJob",
            "metadata": {"name": "hetero-" + app["name"]},
            "spec": {
                "graph": {"source": {"url": "cora-hetero.npz"}},
                "partitioning": {"numParts": 2, "graphName": "cora-hetero"},
                "trainers": {"replicas": 2, "checkpoint": {"url": "ckpt"}, "app": app},
                "runPolicy": {"backoffLimit": 0},
            },
        },
    )


def test_rgcn_job_trains_on_the_target_type_and_writes_every_type(
    tmp_path: Path, cora_path: Path
) -> None:
    arrays = typed_cora(cora_path)
    manifest = hetero_job(
        tmp_path,
        arrays,
        {
            "name": "node-classification",
            "model": "rgcn",
            "targetNtype": "paper",
            "label": "labels",
            "epochs": 6,
            "hidden": 32,
            "fanouts": [10, 10],
            "batchSize": 32,
            "dropout": 0.2,
            "lr": 0.02,
            "inferAfterTraining": True,
            "outputURL": "out",
        },
    )
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-4000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    assert m["model"] == "rgcn" and m["target_ntype"] == "paper" and m["world_size"] == 2
    # 7 classes: an untrained or miswired model is near 1/7 (the majority class: 0.32)
    assert m["test_accuracy"] > 0.5, m
    assert (tmp_path / "ckpt" / "ckpt-epoch-00005.pt").exists()

    out = str(tmp_path / "out")
    assert m["inference_node_types"] == ["author", "paper"]
    assert abs(m["inference_test_accuracy"] - m["final_test_accuracy"]) <= 0.01, m
    idx = read_index(out)
    assert idx["model"] == "rgcn" and idx["num_nodes"] == 2708 + 900
    preds = {}
    for t, n in (("paper", 2708), ("author", 900)):
        got = read_output(out, t)
        assert np.array_equal(np.sort(got["orig_id"]), np.arange(n)), t
        assert got["embedding"].shape == (n, 7) and np.isfinite(got["embedding"]).all()
        preds[t] = np.empty(n, np.int64)
        preds[t][got["orig_id"]] = got["pred"]
    # keyed by the original paper IDs: the test papers' predictions score as reported
    test = arrays["ndata/paper/test_mask"].astype(bool)
    acc = float((preds["paper"][test] == arrays["ndata/paper/labels"][test]).mean())
    assert abs(acc - m["inference_test_accuracy"]) < 1e-6


def test_rgcn_link_prediction_job_beats_random_and_writes_every_type(
    tmp_path: Path, cora_path: Path
) -> None:
    manifest = hetero_job(
        tmp_path,
        typed_cora(cora_path),
        {
            "name": "link-prediction",
            "model": "rgcn",
            "targetEtype": "author:writes:paper",
            "epochs": 2,
            "hidden": 32,
            "fanouts": [5, 5],
            "batchSize": 256,
            "dropout": 0.0,
            "inferAfterTraining": True,
            "outputURL": "out",
        },
    )
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-4000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    assert m["model"] == "rgcn" and m["target_etype"] == "author:writes:paper", m
    assert m["world_size"] == 2 and m["test_edges"] > 100
    # an untrained R-GCN scores about random_mrr (0.174 with 20 negatives), see
    # tests/unit/test_train_hetero_lp.py; this one has learnt who writes what
    assert m["test_mrr"] > m["random_mrr"] + 0.15 and m["test_auc"] > 0.7, m
    assert m["inference_node_types"] == ["author", "paper"]
    out = str(tmp_path / "out")
    idx = read_index(out)
    assert idx["app"] == "link-prediction" and idx["num_nodes"] == 2708 + 900
    for t, n in (("paper", 2708), ("author", 900)):
        got = read_output(out, t)
        assert np.array_equal(np.sort(got["orig_id"]), np.arange(n)), t
        assert got["embedding"].shape == (n, 32) and np.isfinite(got["embedding"]).all()
        assert "pred" not in got


def test_rgcn_job_trains_a_featureless_types_table_on_the_servers(
    tmp_path: Path, cora_path: Path
) -> None:
    """The authors without their feature: 2 trainers train ``node_emb_author`` on the
    servers (SparseAdam, each row by its owning trainer), the checkpoints carry it, and
    the inference after training writes the authors' embeddings from it."""
    import torch

    bare = without_author_features(typed_cora(cora_path))
    app = {
        "name": "node-classification",
        "model": "rgcn",
        "targetNtype": "paper",
        "label": "labels",
        "epochs": 3,
        "hidden": 16,
        "fanouts": [10, 10],
        "batchSize": 64,
        "dropout": 0.0,
        "lr": 0.02,
        "numBases": 2,
        "inferAfterTraining": True,
        "outputURL": "out",
    }
    manifest = hetero_job(tmp_path, bare, app)
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-4000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    assert m["world_size"] == 2 and m["test_accuracy"] > 0.4, m
    assert m["sparse_embedding_types"] == ["author"], m
    assert abs(m["inference_test_accuracy"] - m["final_test_accuracy"]) <= 0.01, m
    first = torch.load(tmp_path / "ckpt" / "ckpt-epoch-00000.pt", weights_only=True)
    last = torch.load(tmp_path / "ckpt" / "ckpt-epoch-00002.pt", weights_only=True)
    assert not any("embed" in k for k in last["model"])
    assert last["extra"]["rgcn"]["num_bases"] == 2
    assert last["sparse"]["world_size"] == 2 and last["sparse"]["optimizer"] == "SparseAdam"
    assert "node_emb_author" not in str(first["model"])
    a0 = checkpoint_table(tmp_path / "ckpt" / "ckpt-epoch-00000.pt", "node_emb_author")
    a2 = checkpoint_table(tmp_path / "ckpt" / "ckpt-epoch-00002.pt", "node_emb_author")
    assert a2.shape == (900, 16) and not np.array_equal(a0, a2)  # trained between epochs
    opt_dir = tmp_path / "ckpt" / "ckpt-epoch-00002.sparse"
    assert {p.name for p in opt_dir.iterdir()} == {
        "tables_0",
        "tables_1",
        "optimizer_0",
        "optimizer_1",
    }  # each trainer its rows
    authors = read_output(str(tmp_path / "out"), "author")
    assert authors["embedding"].shape == (900, 7) and np.isfinite(authors["embedding"]).all()
    # and the learnt table itself, each author's row once (written by both trainers)
    assert np.array_equal(np.unique(authors["input_embedding"], axis=0), np.unique(a2, axis=0))

    # the trainer group started again (a restart, or more epochs): both trainers write
    # back the tables and SparseAdam's state their checkpoint's trainers saved, and go on
    app |= {"epochs": 4, "inferAfterTraining": False}
    again = run(hetero_job(tmp_path, bare, app), "--workdir", str(tmp_path / "wd"),
                out_dir=tmp_path / "logs2")  # fmt: skip
    assert again.rc == 0, again.stderr[-4000:]
    restored = [ln for ln in again.stderr.splitlines() if "embedding tables restored" in ln]
    assert len(restored) == 2 and all("optimizer_state=True" in ln for ln in restored), restored
    a3 = checkpoint_table(tmp_path / "ckpt" / "ckpt-epoch-00003.pt", "node_emb_author")
    assert not np.array_equal(a2, a3)


def example_app(repo_root: Path, name: str) -> dict[str, Any]:
    """The app of ``examples/NAME`` (its output folder here: ``out``)."""
    import yaml

    obj = yaml.safe_load((repo_root / "examples" / name).read_text(encoding="utf-8"))
    app: dict[str, Any] = obj["spec"]["trainers"]["app"]
    return app | {"outputURL": "out"}


def test_rgcn_node_regression_example_beats_the_mean_and_writes_float_predictions(
    tmp_path: Path, cora_path: Path, repo_root: Path
) -> None:
    """examples/cora-hetero-node-regression.yaml: 2 servers, 2 trainers."""
    arrays = typed_cora(cora_path)
    app = example_app(repo_root, "cora-hetero-node-regression.yaml")
    res = run(hetero_job(tmp_path, arrays, app), "--workdir", str(tmp_path / "wd"),
              out_dir=tmp_path / "logs")  # fmt: skip
    assert res.rc == 0, res.stderr[-4000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    assert m["app"] == "node-regression" and m["target_ntype"] == "paper", m
    assert m["world_size"] == 2, m
    y = arrays["ndata/paper/target"]
    train, test = (arrays[f"ndata/paper/{k}"].astype(bool) for k in ("train_mask", "test_mask"))
    mean = float(np.sqrt(((y[test] - y[train].mean(0)) ** 2).mean()))
    print("figure node-regression", m["test_rmse"], m["test_mae"], "mean", round(mean, 4))
    assert m["test_rmse"] < 0.75 * mean, (m, mean)
    assert abs(m["inference_test_rmse"] - m["final_test_rmse"]) <= 0.01, m
    paper = read_output(str(tmp_path / "out"), "paper")
    assert paper["pred"].dtype == np.float32 and paper["pred"].shape == (2708, 7)
    pred = np.empty_like(y)
    pred[paper["orig_id"]] = paper["pred"]
    rmse = float(np.sqrt(((pred[test] - y[test]) ** 2).mean()))
    assert rmse == pytest.approx(m["inference_test_rmse"], abs=1e-5)


def test_rgcn_edge_classification_example_beats_the_majority_and_writes_test_edges(
    tmp_path: Path, cora_path: Path, repo_root: Path
) -> None:
    """examples/cora-hetero-edge-classification.yaml: 2 servers, 2 trainers, each on its
    ``edge_split`` share of the target edge type's training edges."""
    arrays = typed_cora(cora_path)
    app = example_app(repo_root, "cora-hetero-edge-classification.yaml")
    cites = app["targetEtype"]
    res = run(hetero_job(tmp_path, arrays, app), "--workdir", str(tmp_path / "wd"),
              out_dir=tmp_path / "logs")  # fmt: skip
    assert res.rc == 0, res.stderr[-4000:]
    m = json.loads(res.stdout.strip().splitlines()[-1])
    assert m["app"] == "edge-classification" and m["target_etype"] == cites, m
    e = f"edata/{cites}"
    y, test = arrays[f"{e}/label"], arrays[f"{e}/test_mask"].astype(bool)
    print("figure edge-classification", m["test_accuracy"], "majority", m["majority_test_accuracy"])
    assert m["world_size"] == 2 and m["test_edges"] == int(test.sum()), m
    assert m["test_accuracy"] > m["majority_test_accuracy"] + 0.04, m
    assert abs(m["inference_test_accuracy"] - m["final_test_accuracy"]) <= 0.01, m
    got = read_edge_output(str(tmp_path / "out"), etype=cites)
    eid = got["edge_id"]
    assert np.array_equal(np.sort(eid), np.flatnonzero(test))
    assert np.array_equal(got["src_id"], arrays[f"edges/{cites}/src"][eid])
    assert np.array_equal(got["dst_id"], arrays[f"edges/{cites}/dst"][eid])
    acc = float((got["pred"] == y[eid]).mean())
    assert acc == pytest.approx(m["inference_test_accuracy"], abs=1e-5)
