"""trainer_command / partition_command / contract environments built from a job."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distgnn import contract
from distgnn.api import (
    manifest_url,
    parse_job,
    partition_command,
    server_env,
    trainer_command,
    trainer_env,
)
from distgnn.api.commands import SCRIPT_RUNNER as RUNNER
from distgnn.api.commands import balance_mask, user_command
from distgnn.errors import ConfigError

BASE: dict[str, Any] = {
    "apiVersion": "distgnn.dev/v1alpha1",
    "kind": "DistGNNJob",
    "metadata": {"name": "cora"},
    "spec": {
        "graph": {"source": {"url": "s3://g/cora.npz"}},
        "partitioning": {"numParts": 3, "method": "random", "seed": 7, "balanceEdges": True},
        "storage": {"endpoint": "http://s3:8333", "region": "eu-1"},
        "trainers": {
            "replicas": 4,
            "numSamplers": 2,
            "checkpoint": {"url": "s3://g/ckpt"},
            "app": {
                "name": "link-prediction",
                "epochs": 5,
                "numLayers": 3,
                "fanouts": [5, 10, 15],
                "lr": 0.003,
                "weightDecay": 0.0005,
                "numNegs": 4,
                "exclude": "self",
                "hidden": 64,
            },
        },
    },
}


def _job(**trainers: Any) -> Any:
    obj = copy.deepcopy(BASE)
    obj["spec"]["trainers"].update(trainers)
    return parse_job(obj)


def _flags(cmd: list[str]) -> dict[str, str]:
    out = {}
    for i, tok in enumerate(cmd):
        if tok.startswith("--") and "=" in tok:
            key, _, value = tok[2:].partition("=")
            out[key] = value
        elif tok.startswith("--"):
            nxt = cmd[i + 1] if i + 1 < len(cmd) and not cmd[i + 1].startswith("--") else ""
            out[tok[2:]] = nxt
    return out


def test_trainer_command_maps_every_app_field() -> None:
    job = _job()
    app = job.spec.trainers.app
    cmd = trainer_command(job)
    assert cmd[:3] == ["distgnn", "train", "link-prediction"]
    flags = _flags(cmd)
    assert flags["fanouts"] == ",".join(map(str, app.fanouts))
    for name in (
        "model",
        "epochs",
        "hidden",
        "batch_size",
        "num_layers",
        "feat",
        "label",
        "train_mask",
        "val_mask",
        "test_mask",
        "seed",
        "num_negs",
        "exclude",
        "precision",
    ):
        assert flags[name.replace("_", "-")] == str(getattr(app, name)), name
    for name in ("lr", "dropout", "weight_decay"):
        assert float(flags[name.replace("_", "-")]) == getattr(app, name), name
    assert trainer_command(job.spec) == cmd


def test_node_classification_omits_link_prediction_flags() -> None:
    obj = copy.deepcopy(BASE)
    obj["spec"]["trainers"]["app"] = {"name": "node-classification"}
    flags = _flags(trainer_command(parse_job(obj)))
    assert "num-negs" not in flags and "exclude" not in flags
    assert flags["fanouts"] == "10,25"


def test_user_command_and_args() -> None:
    obj = copy.deepcopy(BASE)
    obj["spec"]["trainers"].pop("app")
    obj["spec"]["trainers"].update(command=["python", "-m", "mytrain"], args=["--x", "1"])
    assert trainer_command(parse_job(obj)) == [
        "python", "-m", "distgnn.train.script", "-m", "mytrain", "--x", "1"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        # a script or a module: through the runner (a missing module exits 2)
        (["python", "train.py", "--x"], ["python", "-m", RUNNER, "train.py", "--x"]),
        (["python3", "sub/t.py"], ["python3", "-m", RUNNER, "sub/t.py"]),
        (["python", "-m", "pkg.train"], ["python", "-m", RUNNER, "-m", "pkg.train"]),
        # anything else as written
        (["python", "-c", "print(1)"], ["python", "-c", "print(1)"]),
        (["python", "-u", "train.py"], ["python", "-u", "train.py"]),
        (["python"], ["python"]),
        (["/opt/venv/bin/python", "t.py"], ["/opt/venv/bin/python", "t.py"]),
        (["torchrun", "t.py"], ["torchrun", "t.py"]),
    ],
)
def test_a_user_script_runs_through_the_script_runner(command: list[str], runs: list[str]) -> None:
    assert user_command(command) == runs


def test_trainer_env() -> None:
    job = _job()
    env = trainer_env(
        job,
        servers=[("a", 1), ("b", 2)],
        manifest="s3://g/p/cora.json",
        world_size=4,
        master_addr="cora-trainers-0.cora-trainers",
        rank=1,
        token="t0k",
        metrics_file="/tmp/m.json",
    )
    assert contract.parse_servers(env[contract.ENV_SERVERS]) == [("a", 1), ("b", 2)]
    assert env[contract.ENV_RANK] == "1" and env[contract.ENV_WORLD_SIZE] == "4"
    assert env[contract.ENV_NUM_SAMPLERS] == "2"
    assert env[contract.ENV_CHECKPOINT_URL] == "s3://g/ckpt"
    assert env[contract.ENV_S3_ENDPOINT] == "http://s3:8333"
    assert env[contract.ENV_S3_REGION] == "eu-1"
    assert env[contract.ENV_TOKEN] == "t0k" and contract.ENV_TOKEN_FILE not in env
    assert env[contract.ENV_MASTER_PORT] == str(contract.RENDEZVOUS_PORT)
    k8s = trainer_env(
        job, servers="a:1", manifest="m", world_size=4, master_addr="x", token_file="/var/run/t"
    )
    assert contract.ENV_RANK not in k8s and contract.ENV_TOKEN not in k8s
    assert k8s[contract.ENV_TOKEN_FILE] == "/var/run/t"


def test_server_env() -> None:
    job = _job()
    env = server_env(
        job.spec.servers,
        job.spec.storage,
        manifest="m.json",
        part_id=2,
        port=1234,
        token="x",
        ready_file="/tmp/r",
    )
    assert env[contract.ENV_PART_ID] == "2" and env[contract.ENV_SERVER_PORT] == "1234"
    assert env[contract.ENV_SERVER_WORKERS] == "1" and env[contract.ENV_READY_FILE] == "/tmp/r"
    assert contract.ENV_PART_ID not in server_env(job.spec.servers, job.spec.storage, manifest="m")


def test_partition_command_and_manifest_url() -> None:
    job = _job()
    sp = job.spec
    with pytest.raises(ConfigError, match=r"spec\.partitioning\.outputURL"):
        partition_command("cora", sp.graph, sp.partitioning)
    cmd = partition_command("cora", sp.graph, sp.partitioning, "s3://out")
    assert cmd[:3] == ["distgnn", "partition", "s3://g/cora.npz"]
    flags = _flags(cmd)
    assert flags["out"] == "s3://out" and flags["num-parts"] == "3" and "reuse" in flags
    assert flags["name"] == "cora"
    assert flags["method"] == "random" and flags["seed"] == "7"
    assert "balance-edges" in flags and "balance-train" in flags
    assert flags["train-mask"] == "train_mask"
    assert manifest_url("cora", sp.graph, sp.partitioning, "s3://out") == "s3://out/cora.json"


def test_balance_train_uses_the_apps_train_mask() -> None:
    app = copy.deepcopy(BASE["spec"]["trainers"]["app"])
    job = _job(app={**app, "trainMask": "labelled"})
    assert balance_mask(job.spec) == "labelled"
    cmd = partition_command(
        "cora", job.spec.graph, job.spec.partitioning, "s3://out", balance_mask(job.spec)
    )
    assert _flags(cmd)["train-mask"] == "labelled"
    own = _job(app=None, command=["python", "train.py"])  # a user's command: the default name
    assert balance_mask(own.spec) == "train_mask"


def _app_job(app: dict[str, Any], checkpoint: bool = True) -> Any:
    obj = copy.deepcopy(BASE)
    obj["spec"]["trainers"]["app"] = app
    if not checkpoint:
        obj["spec"]["trainers"].pop("checkpoint")
    return parse_job(obj)


def test_inference_app_command() -> None:
    job = _app_job(
        {
            "name": "inference",
            "checkpointURL": "s3://g/ckpt/ckpt-epoch-00004.pt",
            "outputURL": "s3://g/emb",
            "embeddingLayer": "hidden",
            "inferBatchSize": 1000,
        },
        checkpoint=False,
    )
    cmd = trainer_command(job)
    assert cmd[:3] == ["distgnn", "train", "inference"]
    flags = _flags(cmd)
    assert flags["checkpoint-url"] == "s3://g/ckpt/ckpt-epoch-00004.pt"
    assert flags["output-url"] == "s3://g/emb" and flags["embedding-layer"] == "hidden"
    assert flags["infer-batch-size"] == "1000" and "infer-after-training" not in flags
    # the checkpoint folder of the job is the default (DISTGNN_CHECKPOINT_URL)
    job = _app_job({"name": "inference", "outputURL": "s3://g/emb"})
    assert "checkpoint-url" not in _flags(trainer_command(job))


def test_infer_after_training_flags() -> None:
    job = _app_job({"name": "node-classification", "inferAfterTraining": True, "outputURL": "o"})
    flags = _flags(trainer_command(job))
    assert "infer-after-training" in flags and flags["output-url"] == "o"
    assert "output-url" not in _flags(trainer_command(_job()))  # no inference: no flags


@pytest.mark.parametrize(
    ("app", "checkpoint", "field"),
    [
        ({"name": "inference"}, True, "outputURL"),
        ({"name": "inference", "outputURL": "o"}, False, "spec.trainers.app"),
        ({"name": "link-prediction", "inferAfterTraining": True}, True, "outputURL"),
        (
            {"name": "link-prediction", "inferAfterTraining": True, "outputURL": "o"},
            False,
            "spec.trainers.checkpoint",
        ),
        (
            {"name": "inference", "inferAfterTraining": True, "outputURL": "o"},
            True,
            "inferAfterTraining",
        ),
        ({"name": "inference", "outputURL": "o", "embeddingLayer": "first"}, True, "embedding"),
    ],
)
def test_inference_fields_are_validated(app: dict[str, Any], checkpoint: bool, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        _app_job(app, checkpoint)


def test_rgcn_app_passes_its_target_node_type() -> None:
    app = {"name": "node-classification", "model": "rgcn", "targetNtype": "paper"}
    flags = _flags(trainer_command(_app_job(app, True)))
    assert flags["model"] == "rgcn" and flags["target-ntype"] == "paper"
    plain = _flags(trainer_command(_app_job({"name": "node-classification"}, True)))
    assert "target-ntype" not in plain


def test_rgcn_app_passes_its_embedding_and_basis_options() -> None:
    app = {"name": "node-classification", "model": "rgcn", "targetNtype": "paper"}
    cmd = trainer_command(_app_job(app, True))
    assert "--sparse-embedding" in cmd and "--num-bases" not in cmd and "--sparse-lr" not in cmd
    more = {**app, "sparseEmbedding": False, "sparseLr": 0.05, "numBases": 2}
    flags = _flags(trainer_command(_app_job(more, True)))
    assert "no-sparse-embedding" in flags and flags["sparse-lr"] == "0.05"
    assert flags["num-bases"] == "2"
    assert "sparse-embedding" not in _flags(trainer_command(_app_job({"name": "link-prediction"})))


@pytest.mark.parametrize(
    ("app", "field"),
    [
        ({"numBases": 0}, "numBases"),
        ({"sparseLr": 0}, "sparseLr"),
        ({"model": "sage", "targetNtype": None, "numBases": 2}, "numBases"),
        ({"model": "sage", "targetNtype": None, "sparseLr": 0.1}, "sparseLr"),
    ],
)
def test_rgcn_options_are_validated_naming_the_field(app: dict[str, Any], field: str) -> None:
    base = {"name": "node-classification", "model": "rgcn", "targetNtype": "paper"}
    with pytest.raises(ConfigError, match=field):
        _app_job({k: v for k, v in (base | app).items() if v is not None})


def test_rgcn_link_prediction_passes_its_target_edge_type() -> None:
    app = {"name": "link-prediction", "model": "rgcn", "targetEtype": "author:writes:paper"}
    flags = _flags(trainer_command(_app_job(app, True)))
    assert flags["model"] == "rgcn" and flags["target-etype"] == "author:writes:paper"
    assert "target-ntype" not in flags
    plain = _flags(trainer_command(_app_job({"name": "link-prediction"}, True)))
    assert "target-etype" not in plain


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ({"name": "node-classification", "model": "rgcn"}, "rgcn needs targetNtype"),
        ({"name": "node-classification", "targetNtype": "paper"}, "targetNtype is for model"),
        (
            {"name": "node-classification", "model": "gat", "targetNtype": "paper"},
            "targetNtype is for model",
        ),
        (
            {"name": "link-prediction", "model": "rgcn"},
            "rgcn for link-prediction, edge-classification and edge-regression needs targetEtype",
        ),
        ({"name": "node-classification", "model": "rgcn", "targetNtype": ""}, "targetNtype"),
        (
            {"name": "link-prediction", "model": "rgcn", "targetEtype": "writes"},
            "targetEtype",
        ),
        (
            {
                "name": "node-classification",
                "model": "rgcn",
                "targetNtype": "p",
                "targetEtype": "a:w:p",
            },
            "targetEtype is for link-prediction, edge-classification and edge-regression with",
        ),
        (
            {
                "name": "link-prediction",
                "model": "rgcn",
                "targetEtype": "a:w:p",
                "targetNtype": "p",
            },
            "targetNtype is for model rgcn",
        ),
    ],
)
def test_rgcn_fields_are_validated(app: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _app_job(app, True)


def test_feature_cache_field_sets_the_trainers_environment() -> None:
    kw: dict[str, Any] = {"servers": "a:1", "manifest": "m", "world_size": 2, "master_addr": "x"}
    assert contract.ENV_FEATURE_CACHE_MB not in trainer_env(_job(), **kw)  # off by default
    env = trainer_env(_job(featureCacheMB=128), **kw)
    assert env[contract.ENV_FEATURE_CACHE_MB] == "128"
    with pytest.raises(ConfigError, match="featureCacheMB"):
        _job(featureCacheMB=-1)
