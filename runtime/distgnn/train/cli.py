"""``distgnn train``: the built-in training apps, run as one DDP trainer process."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback

from distgnn import contract
from distgnn.api.types import APPS, MODELS, PRECISIONS

HELP = (
    "train a GNN (node classification or regression, link prediction, edge classification or "
    "regression) or run inference, as one DDP trainer"
)
END_PROCESS = True
"""As the process's entry, a trainer ends with :func:`distgnn.train.finish.end_process`."""

log = logging.getLogger("distgnn.train")


def error_status(e: BaseException) -> int:
    """The exit status of a DistGNN error: :data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2)
    for a mistake in the job's configuration (an option, the manifest, the graph, an output
    location that cannot be written) or a storage failure that trying again cannot cure (an
    object, folder or bucket that does not exist, a file that is not a regular file or
    is larger than the limit, no storage credentials at all), which the
    operator and ``distgnn run`` do not retry; :data:`~distgnn.contract.EXIT_FAILURE` (1)
    for the rest (a server lost, a timeout, a rotated token, storage unreachable or
    refusing the credentials), which a restart of the trainer group can cure."""
    from distgnn import storage
    from distgnn.errors import ConfigError, GraphFormatError, ManifestError

    return storage.exit_status(e, (ConfigError, ManifestError, GraphFormatError))


def check_outputs(cfg: object) -> None:
    """Fail at start, before any training, when a local folder the run writes cannot be
    written: the checkpoint folder (training), the inference output folder, the metrics
    file's folder (:func:`distgnn.storage.check_writable_folder`: a
    :class:`~distgnn.errors.ConfigError`, exit 2; remote URLs name their failure at their
    first write)."""
    from distgnn import storage
    from distgnn.train.config import TrainConfig

    assert isinstance(cfg, TrainConfig)
    folders = []
    if cfg.checkpoint_url and cfg.app != "inference":  # inference only reads it
        folders.append(cfg.checkpoint_url)
    if cfg.output_url and (cfg.app == "inference" or cfg.infer_after_training):
        folders.append(cfg.output_url)
    if cfg.metrics_file and storage.is_local(cfg.metrics_file):
        folders.append(storage.dirname(cfg.metrics_file) or ".")
    for url in folders:
        storage.check_writable_folder(url)


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("app", choices=APPS, help="the built-in app")
    p.add_argument(
        "--model",
        choices=list(MODELS),
        default="sage",
        help="GNN (default sage; link prediction: sage or rgcn; rgcn: a graph with node types)",
    )
    p.add_argument(
        "--target-ntype",
        default=None,
        help="the node type to classify or regress (--model rgcn: required on a graph with node "
        "types)",
    )
    p.add_argument(
        "--target-etype",
        default=None,
        help="the edge type to predict, SRC_TYPE:RELATION:DST_TYPE (link prediction and the "
        "edge apps, --model rgcn: required)",
    )
    p.add_argument(
        "--sparse-embedding",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--model rgcn: a node type without --feat gets a DistEmbedding on the servers "
        "trained by a sparse optimizer (default); --no-sparse-embedding: a dense "
        "nn.Embedding in every trainer",
    )
    p.add_argument(
        "--sparse-lr",
        type=float,
        default=None,
        help="--model rgcn: the sparse embeddings' learning rate (SparseAdam; default --lr)",
    )
    p.add_argument(
        "--num-bases",
        type=int,
        default=None,
        help="--model rgcn: basis decomposition of the relation weights, 1..relations "
        "(default: one weight per relation)",
    )
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--num-layers", type=int, default=2, help="GNN layers (default 2)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size (default 128)")
    p.add_argument(
        "--fanouts", default="10,25", help="CSV, one per layer, first = input layer (default 10,25)"
    )
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch (default 1024)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument(
        "--weight-decay", type=float, default=5e-4, help="Adam weight decay (default 5e-4)"
    )
    p.add_argument("--dropout", type=float, default=0.5, help="dropout (default 0.5)")
    p.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="32",
        help="32 (float32) or bf16-mixed (bfloat16 autocast forward; default 32)",
    )
    p.add_argument("--feat", default="feat", help="node feature field (default feat)")
    p.add_argument(
        "--label",
        default="label",
        help="label field: node data (edge data for the edge apps; default label)",
    )
    p.add_argument(
        "--train-mask",
        default="train_mask",
        help="node field of training nodes (edge apps: edge field of training edges; default "
        "train_mask)",
    )
    p.add_argument(
        "--val-mask", default="val_mask", help="node field of validation nodes (default val_mask)"
    )
    p.add_argument(
        "--test-mask", default="test_mask", help="node field of test nodes (default test_mask)"
    )
    p.add_argument(
        "--num-negs",
        type=int,
        default=1,
        help="negatives per positive edge (link prediction, default 1)",
    )
    p.add_argument(
        "--exclude",
        choices=["none", "self", "reverse"],
        default="reverse",
        help="drop seed edges / and reverses from the sampled graph (default reverse)",
    )
    p.add_argument(
        "--num-samplers",
        type=int,
        default=None,
        help=f"sampler processes per trainer (default ${contract.ENV_NUM_SAMPLERS} or 0)",
    )
    p.add_argument(
        "--checkpoint-url",
        default=None,
        help="save/resume checkpoints here; inference: the checkpoint to load, a file or a "
        f"folder's latest (default ${contract.ENV_CHECKPOINT_URL})",
    )
    p.add_argument(
        "--output-url",
        default=None,
        help="inference output folder (any fsspec URL; see docs/inference.md)",
    )
    p.add_argument(
        "--infer-after-training",
        action="store_true",
        help="after training, run inference with the last checkpoint and write --output-url",
    )
    p.add_argument(
        "--embedding-layer",
        choices=["last", "hidden"],
        default="last",
        help="embeddings written: the last layer's output (default) or the last hidden layer's",
    )
    p.add_argument(
        "--infer-batch-size",
        type=int,
        default=4096,
        help="nodes per inference batch (default 4096)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--metrics-file",
        default=None,
        help=f"final metrics JSON (default ${contract.ENV_METRICS_FILE})",
    )
    del env


def _config(args: argparse.Namespace) -> object:
    from distgnn.train.config import TrainConfig, default_num_samplers, env_default, parse_fanouts

    return TrainConfig(
        app=args.app,
        model="sage" if args.app == "link-prediction" and args.model != "rgcn" else args.model,
        target_ntype=args.target_ntype,
        target_etype=args.target_etype,
        sparse_embedding=args.sparse_embedding,
        sparse_lr=args.sparse_lr,
        num_bases=args.num_bases,
        epochs=args.epochs,
        num_layers=args.num_layers,
        hidden=args.hidden,
        fanouts=parse_fanouts(args.fanouts),
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        precision=args.precision,
        feat=args.feat,
        label=args.label,
        train_mask=args.train_mask,
        val_mask=args.val_mask,
        test_mask=args.test_mask,
        num_negs=args.num_negs,
        exclude=args.exclude,
        num_samplers=default_num_samplers() if args.num_samplers is None else args.num_samplers,
        checkpoint_url=args.checkpoint_url or env_default(contract.ENV_CHECKPOINT_URL),
        seed=args.seed,
        metrics_file=args.metrics_file or env_default(contract.ENV_METRICS_FILE),
        output_url=args.output_url,
        infer_after_training=args.infer_after_training,
        embedding_layer=args.embedding_layer,
        infer_batch_size=args.infer_batch_size,
    ).validate()


def main(args: argparse.Namespace) -> int:
    from distgnn.train.finish import write_termination_log

    rank = contract.trainer_rank(os.environ) or "0"
    try:
        return _run(args)
    except BaseException as e:
        term = os.environ.get(contract.ENV_TERMINATION_LOG)
        if term and not isinstance(e, SystemExit):
            root = {
                "error": type(e).__name__,
                "message": str(e),
                "rank": rank,
                "traceback": traceback.format_exc(limit=8)[-2000:],
            }
            write_termination_log(term, json.dumps(root))
        if isinstance(e, ModuleNotFoundError):  # not installed: no restart installs it
            log.debug("error", exc_info=True)
            print(f"distgnn train: error: {missing_module_line(e)}", file=sys.stderr)
            return contract.EXIT_CONFIG_ERROR
        raise


def missing_module_line(e: ModuleNotFoundError) -> str:
    """A missing module in one line, with the interpreter that lacks it. Exit status 2:
    the image or environment lacks it for good, so the operator and ``distgnn run`` do
    not retry (an :class:`ImportError` of another kind, a shared library a node lacks,
    stays 1: another node may have it). A user command's runner says the same
    (:mod:`distgnn.train.script`)."""
    from distgnn.train import script

    return script.missing_module_line(e)


def _run(args: argparse.Namespace) -> int:
    from distgnn.train import edge_classification, inference, link_prediction, node_classification
    from distgnn.train.config import TrainConfig
    from distgnn.train.ddp import init_ddp, shutdown
    from distgnn.train.graph import open_train_graph
    from distgnn.train.layerwise import check_shared_rows
    from distgnn.train.metrics import publish
    from distgnn.train.proc import configure_trainer_process
    from distgnn.train.telemetry import Telemetry

    cfg = _config(args)
    assert isinstance(cfg, TrainConfig)
    check_outputs(cfg)  # before training: not an hour in, at the first checkpoint
    configure_trainer_process()
    ctx = init_ddp()
    tel = Telemetry.start(ctx.rank)
    try:
        tg = open_train_graph()
        if cfg.infer_after_training:  # refused now, not after training
            check_shared_rows(tg, ctx.world_size)
        tel.attach(tg.client_stats(), tg.local_stats(), tg.local_sample_stats(), tg.cache_stats())
        try:
            if cfg.app == "inference":
                metrics = inference.run(cfg, tg, ctx, telemetry=tel)
            else:
                app = {
                    "node-classification": node_classification,
                    "node-regression": node_classification,
                    "link-prediction": link_prediction,
                    "edge-classification": edge_classification,
                    "edge-regression": edge_classification,
                }[cfg.app]
                metrics = app.run(cfg, tg, ctx, telemetry=tel)
                if cfg.infer_after_training:
                    metrics = inference.run(cfg, tg, ctx, telemetry=tel) | metrics
        finally:
            tg.close()
        if ctx.is_main:
            publish(metrics, cfg.metrics_file)
        shutdown(ctx)
        tel.finish()
    finally:
        shutdown(ctx)
        tel.close()
    return 0
