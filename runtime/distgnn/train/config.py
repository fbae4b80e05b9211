"""The training configuration: one dataclass, filled from ``distgnn train`` options."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from distgnn import contract
from distgnn.api.fields import CANONICAL_ETYPE
from distgnn.api.types import EDGE_APPS, MODELS, PRECISIONS
from distgnn.errors import ConfigError

TARGET_NTYPE = "--target-ntype (trainers.app.targetNtype)"
TARGET_ETYPE = "--target-etype (trainers.app.targetEtype)"
NUM_BASES = "--num-bases (trainers.app.numBases)"
SPARSE_EMBEDDING = "--sparse-embedding (trainers.app.sparseEmbedding)"
SPARSE_LR = "--sparse-lr (trainers.app.sparseLr)"
FEAT = "--feat (trainers.app.feat)"
LABEL = "--label (trainers.app.label)"
TRAIN_MASK = "--train-mask (trainers.app.trainMask)"
VAL_MASK = "--val-mask (trainers.app.valMask)"
TEST_MASK = "--test-mask (trainers.app.testMask)"


def node_fields(cfg: TrainConfig) -> dict[str, str]:
    """Option (and manifest field) -> the node field node classification reads."""
    return {
        FEAT: cfg.feat,
        LABEL: cfg.label,
        TRAIN_MASK: cfg.train_mask,
        VAL_MASK: cfg.val_mask,
        TEST_MASK: cfg.test_mask,
    }


@dataclass
class TrainConfig:
    app: str = "node-classification"
    model: str = "sage"
    epochs: int = 10
    num_layers: int = 2
    hidden: int = 128
    fanouts: list[int] = field(default_factory=lambda: [10, 25])
    batch_size: int = 1024
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.5
    precision: str = "32"
    feat: str = "feat"
    label: str = "label"
    train_mask: str = "train_mask"
    val_mask: str = "val_mask"
    test_mask: str = "test_mask"
    num_negs: int = 1
    exclude: str = "reverse"
    num_samplers: int = 0
    checkpoint_url: str | None = None
    seed: int = 0
    metrics_file: str | None = None
    eval_every: int = 1
    output_url: str | None = None
    infer_after_training: bool = False
    embedding_layer: str = "last"
    infer_batch_size: int = 4096
    target_ntype: str | None = None
    target_etype: str | None = None
    sparse_embedding: bool = True
    sparse_lr: float | None = None
    num_bases: int | None = None

    @property
    def embedding_lr(self) -> float:
        """The sparse optimizer's learning rate (``--sparse-lr``, default ``--lr``)."""
        return self.lr if self.sparse_lr is None else self.sparse_lr

    def validate(self) -> TrainConfig:
        if self.model not in MODELS:
            raise ConfigError(f"--model: {self.model!r} is not one of {', '.join(MODELS)}")
        self._check_targets()
        self._check_rgcn()
        if len(self.fanouts) != self.num_layers:
            raise ConfigError(
                f"--fanouts: {len(self.fanouts)} values for --num-layers {self.num_layers}"
            )
        for name in ("epochs", "num_layers", "hidden", "batch_size", "num_negs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')}: must be >= 1")
        if any(f < 1 and f != -1 for f in self.fanouts):
            raise ConfigError("--fanouts: each must be >= 1 or -1 (all neighbours)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"--dropout: {self.dropout} is not in [0, 1)")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision: {self.precision!r} is not one of {PRECISIONS}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ConfigError("--lr must be > 0 and --weight-decay >= 0")
        if self.num_samplers < 0:
            raise ConfigError("--num-samplers: must be >= 0")
        if self.infer_batch_size < 1:
            raise ConfigError("--infer-batch-size: must be >= 1")
        if self.embedding_layer not in ("last", "hidden"):
            raise ConfigError(f"--embedding-layer: {self.embedding_layer!r} is not last or hidden")
        if self.app == "inference" or self.infer_after_training:
            what = "inference" if self.app == "inference" else "--infer-after-training"
            if not self.output_url:
                raise ConfigError(f"--output-url: {what} needs an output URL")
            if not self.checkpoint_url:
                raise ConfigError(
                    f"--checkpoint-url: {what} needs a checkpoint (file or folder; "
                    f"default ${contract.ENV_CHECKPOINT_URL})"
                )
        if self.exclude not in ("none", "self", "reverse"):
            raise ConfigError(f"--exclude: {self.exclude!r} is not none, self or reverse")
        return self

    def _check_targets(self) -> None:
        """``--target-ntype`` (the node apps, inference) and ``--target-etype`` (link
        prediction, the edge apps) go with the typed model; the manifest's CEL rules say
        the same."""
        if self.target_ntype and self.model != "rgcn":
            raise ConfigError(
                f"{TARGET_NTYPE}: the node type of the typed model; "
                f"needs --model rgcn, not {self.model}"
            )
        edges = self.app in EDGE_APPS
        if self.target_ntype and edges:
            raise ConfigError(
                f"{TARGET_NTYPE}: the node type to classify or regress; {self.app} takes "
                f"{TARGET_ETYPE}"
            )
        if self.target_etype is not None:
            if not (edges and self.model == "rgcn"):
                raise ConfigError(
                    f"{TARGET_ETYPE}: the edge type to predict; needs {', '.join(EDGE_APPS)} "
                    f"with --model rgcn, not {self.app} with {self.model}"
                )
            if not re.fullmatch(CANONICAL_ETYPE, self.target_etype):
                raise ConfigError(
                    f"{TARGET_ETYPE}: {self.target_etype!r} is not a canonical edge type "
                    "SRC_TYPE:RELATION:DST_TYPE"
                )
        elif edges and self.model == "rgcn":
            raise ConfigError(
                f"{TARGET_ETYPE}: required for {self.app} with --model rgcn "
                "(SRC_TYPE:RELATION:DST_TYPE)"
            )

    def _check_rgcn(self) -> None:
        """``--num-bases`` and ``--sparse-lr`` go with the typed model (CEL rules too); the
        bases are checked against the graph's relations when the model is built."""
        for name, value in ((NUM_BASES, self.num_bases), (SPARSE_LR, self.sparse_lr)):
            if value is not None and self.model != "rgcn":
                raise ConfigError(f"{name}: an option of --model rgcn, not {self.model}")
        if self.num_bases is not None and self.num_bases < 1:
            raise ConfigError(f"{NUM_BASES}: {self.num_bases} must be >= 1")
        if self.sparse_lr is not None and self.sparse_lr <= 0:
            raise ConfigError(f"{SPARSE_LR}: {self.sparse_lr} must be > 0")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def log_fields(self) -> dict[str, Any]:
        """The options worth one log line each (short scalars; no URLs, no dicts)."""
        return {
            "model": self.model,
            "epochs": self.epochs,
            "layers": self.num_layers,
            "hidden": self.hidden,
            "fanouts": ",".join(map(str, self.fanouts)),
            "batch_size": self.batch_size,
            "lr": self.lr,
            "precision": self.precision,
            "samplers": self.num_samplers,
        } | self._rgcn_fields()

    def _rgcn_fields(self) -> dict[str, Any]:
        if self.model != "rgcn":
            return {}
        return {
            "sparse_embedding": self.sparse_embedding,
            "sparse_lr": self.embedding_lr,
            "num_bases": self.num_bases,
        }


def parse_fanouts(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError(f"--fanouts: {text!r} is not a comma-separated list of ints") from e


def env_default(name: str) -> str | None:
    return os.environ.get(name) or None


def default_num_samplers() -> int:
    v = os.environ.get(contract.ENV_NUM_SAMPLERS, "0") or "0"
    if not v.isdigit():
        raise ConfigError(f"{contract.ENV_NUM_SAMPLERS}: {v!r} is not a non-negative int")
    return int(v)
