"""DistGNNJob and GraphServer types: the single source of the CRD schemas.

Python names are snake_case; the manifest uses camelCase (see :func:`fields.json_name`).
Defaults, bounds, enums and rules declared here become the CRD's OpenAPI schema
(``distgnn.api.schema``) and are enforced by ``parse_job`` / ``parse_graphserver``.
"""

# Fields are declared with `fld` (dataclasses.field plus schema metadata), hence RUF009.
# ruff: noqa: RUF009

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from distgnn import contract
from distgnn.api.fields import (
    ANNOTATION_KEY,
    CANONICAL_ETYPE,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DOMAIN_PREFIXED_PATH,
    ENV_NAME,
    HTTP_URL,
    IMAGE_REF,
    LABEL_VALUE,
    QUALIFIED_NAME,
    STORAGE_SCHEMES,
    URL_MAX,
    Quantity,
    Rule,
    fld,
    quantity_value,
)

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
APPS = (
    "node-classification",
    "node-regression",
    "link-prediction",
    "edge-classification",
    "edge-regression",
    "inference",
)
"""The built-in apps of ``distgnn train``."""
NODE_APPS = ("node-classification", "node-regression")
"""Apps whose rgcn learns ``targetNtype``'s nodes."""
EDGE_APPS = ("link-prediction", "edge-classification", "edge-regression")
"""Apps whose rgcn learns ``targetEtype``'s edges."""
TYPED_APPS = (*NODE_APPS, *EDGE_APPS)
"""Apps that train rgcn on a graph with node and edge types (every training app)."""
MODELS = ("sage", "gat", "rgcn")
"""The built-in models: GraphSAGE and GAT (homogeneous graphs), R-GCN (graphs with node
and edge types: classifying ``targetNtype`` or predicting ``targetEtype``'s edges)."""
PRECISIONS = ("32", "bf16-mixed")
"""``32``: float32 throughout. ``bf16-mixed``: the forward pass under bfloat16 autocast
(matrix products in bfloat16, sparse aggregation in float32); parameters, gradients
and optimizer state stay float32."""
IMMUTABLE = "self == oldSelf"


def _count(*xs: object) -> int:
    return sum(x is not None for x in xs)


STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _resource_names(r: Any) -> set[str]:
    return set(r.limits or {}) | set(r.requests or {})


def _resource_values(r: Any) -> list[str]:
    return [*(r.limits or {}).values(), *(r.requests or {}).values()]


def _q(v: str) -> Fraction:
    """A quantity's value (0 for one the field pattern refuses anyway)."""
    return quantity_value(v) or Fraction(0)


def _resource_name_ok(k: str) -> bool:
    """A container resource name the API server takes: a standard one, or a qualified
    name with a domain prefix (an extended resource)."""
    if "/" not in k:
        return k in STANDARD_RESOURCES or k.startswith("hugepages-")
    return re.match(QUALIFIED_NAME, k) is not None


def _gpu_values(r: Any) -> list[str]:
    """The quantities of GPU resources (``nvidia.com/gpu``, ``amd.com/gpu``, ...)."""
    both = [*(r.limits or {}).items(), *(r.requests or {}).items()]
    return [v for k, v in both if k.endswith("/gpu")]


def _extended(k: str) -> bool:
    return "/" in k and "kubernetes.io/" not in k


def _extended_ok(r: Any, k: str) -> bool:
    lim, req = (r.limits or {}).get(k), (r.requests or {}).get(k)
    whole = all(_q(v).denominator == 1 for v in (lim, req) if v is not None)
    return whole and (req is None or (lim is not None and _q(req) == _q(lim)))


# --- graph sources ------------------------------------------------------------------


@dataclass
class UrlSource:
    """A raw graph to partition (``.npz``, folder of ``.npy``, chunked graph's metadata.json)."""

    url: str = fld(
        doc="URL of the input graph: a .npz file, a folder of .npy files or a chunked "
        "graph's metadata.json (s3://bucket/cora.npz, s3://bucket/mag/metadata.json).",
        max_length=URL_MAX,
        min_length=1,
        schemes=STORAGE_SCHEMES,
    )


@dataclass
class PartitionsSource:
    """Existing partitions, given by their manifest."""

    manifest_url: str = fld(
        doc="URL of the partition manifest NAME.json.",
        name="manifestURL",
        max_length=URL_MAX,
        min_length=1,
        schemes=STORAGE_SCHEMES,
    )


@dataclass
class GraphServerRef:
    """A GraphServer in the same namespace serving the graph."""

    name: str = fld(doc="Name of the GraphServer.", max_length=40, pattern=DNS_LABEL)


@dataclass
class JobGraph:
    """Where the graph comes from: exactly one of source, partitions, graphServer."""

    source: UrlSource | None = fld(None, doc="Raw graph to partition before training.")
    partitions: PartitionsSource | None = fld(None, doc="Already partitioned graph.")
    graph_server: GraphServerRef | None = fld(None, doc="Attach to a running GraphServer.")

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "(has(self.source) ? 1 : 0) + (has(self.partitions) ? 1 : 0)"
            " + (has(self.graphServer) ? 1 : 0) == 1",
            "exactly one of source, partitions, graphServer must be set",
            lambda g: _count(g.source, g.partitions, g.graph_server) == 1,
        ),
        Rule(IMMUTABLE, "spec.graph is immutable"),
    )


@dataclass
class ServerGraph:
    """Where a GraphServer's graph comes from: exactly one of source, partitions."""

    source: UrlSource | None = fld(None, doc="Raw graph to partition before serving.")
    partitions: PartitionsSource | None = fld(None, doc="Already partitioned graph.")

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.source) != has(self.partitions)",
            "exactly one of source, partitions must be set",
            lambda g: _count(g.source, g.partitions) == 1,
        ),
        Rule(IMMUTABLE, "spec.graph is immutable"),
    )


@dataclass
class Partitioning:
    """How the raw graph is split (ignored for existing partitions except numParts)."""

    num_parts: int = fld(
        2, doc="Number of partitions, one graph server each.", minimum=1, maximum=1024
    )
    method: str = fld(
        "metis",
        doc=(
            "Node assignment: METIS (min edge cut; on dense graphs on an edge sample, then "
            "refined on the full graph), metis-full (METIS on every edge) or random."
        ),
        enum=("metis", "metis-full", "random"),
    )
    balance_train: bool = fld(
        True, doc="Balance training nodes (the job app's trainMask, else train_mask) across parts."
    )
    balance_edges: bool = fld(False, doc="Balance edges across partitions (METIS).")
    halo_hops: int = fld(
        1, doc="Hops of halo structure kept around each partition.", minimum=1, maximum=4
    )
    seed: int = fld(0, doc="Random seed of the partitioner.", minimum=0, maximum=2**31 - 1)
    graph_name: str | None = fld(
        None,
        doc="Graph name (manifest NAME.json); default: the resource's name.",
        max_length=63,
        pattern=r"^[A-Za-z0-9_.-]+$",
    )
    output_url: str | None = fld(
        None,
        doc="Where partitions are written; default: the "
        "operator's partitions URL, or a local folder in local mode.",
        name="outputURL",
        max_length=URL_MAX,
        min_length=1,
        schemes=STORAGE_SCHEMES,
    )

    RULES: ClassVar[tuple[Rule, ...]] = (Rule(IMMUTABLE, "spec.partitioning is immutable"),)


# --- storage ------------------------------------------------------------------------


@dataclass
class CredentialsSecret:
    """A Secret holding S3 credentials; read only through secretKeyRef environment."""

    name: str = fld(doc="Secret name in the resource's namespace.", pattern=DNS_SUBDOMAIN)
    access_key_id_key: str = fld(
        "AWS_ACCESS_KEY_ID", doc="Key holding the access key id.", max_length=253, pattern=ENV_NAME
    )
    secret_access_key_key: str = fld(
        "AWS_SECRET_ACCESS_KEY", doc="Key holding the secret key.", max_length=253, pattern=ENV_NAME
    )


@dataclass
class Storage:
    """Object storage settings shared by partitioner, servers and trainers."""

    endpoint: str | None = fld(
        None,
        doc="S3 endpoint URL, http:// or https:// (AWS_ENDPOINT_URL_S3).",
        max_length=URL_MAX,
        pattern=HTTP_URL,
    )
    region: str | None = fld(None, doc="S3 region (AWS_DEFAULT_REGION).", max_length=64)
    credentials_secret: CredentialsSecret | None = fld(None, doc="S3 credentials Secret.")


# --- pods ---------------------------------------------------------------------------


@dataclass
class Resources:
    """Container resource requests and limits (cpu, memory, nvidia.com/gpu, ...)."""

    limits: dict[str, Quantity] | None = fld(
        None, doc="Resource limits.", max_items=16, max_length=64
    )
    requests: dict[str, Quantity] | None = fld(
        None, doc="Resource requests.", max_items=16, max_length=64
    )

    # the API server's ValidateResourceRequirements, which the pods' StatefulSet or Job
    # must pass; not CEL (map keys, quantity arithmetic): checked when parsed (InvalidSpec)
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "",
            "resource names are cpu, memory, ephemeral-storage, hugepages-SIZE or a "
            "domain-prefixed extended resource (nvidia.com/gpu)",
            lambda r: all(_resource_name_ok(k) for k in _resource_names(r)),
        ),
        Rule(
            "",
            "quantities must not be negative",
            lambda r: all(_q(v) >= 0 for v in _resource_values(r)),
        ),
        Rule(
            "",
            "each request must be at most its limit",
            lambda r: all(
                _q(v) <= _q((r.limits or {})[k])
                for k, v in (r.requests or {}).items()
                if k in (r.limits or {})
            ),
        ),
        Rule(
            "",
            "an extended resource (nvidia.com/gpu) takes whole numbers, and a request of one "
            "needs the same limit",
            lambda r: all(_extended_ok(r, k) for k in _resource_names(r) if _extended(k)),
        ),
    )


@dataclass
class Toleration:
    """A pod toleration."""

    key: str | None = fld(
        None, doc="Taint key (empty: every taint).", max_length=316, pattern="^$|" + QUALIFIED_NAME
    )
    operator: str | None = fld(None, doc="Exists or Equal.", enum=("Exists", "Equal"))
    value: str | None = fld(None, doc="Taint value.", max_length=63, pattern=LABEL_VALUE)
    effect: str | None = fld(
        None, doc="Taint effect.", enum=("NoSchedule", "PreferNoSchedule", "NoExecute")
    )
    toleration_seconds: int | None = fld(
        None, doc="For NoExecute: seconds to stay bound.", minimum=0, maximum=2**31 - 1
    )

    # the API server's ValidateTolerations: a pod template breaking one is refused, so the
    # servers' StatefulSet or the trainer Job could never be created
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "(has(self.key) && self.key != '') "
            "|| (has(self.operator) && self.operator == 'Exists')",
            "operator must be Exists when key is empty (a toleration of every taint)",
            lambda x: bool(x.key) or x.operator == "Exists",
            "operator",
        ),
        Rule(
            "!(has(self.operator) && self.operator == 'Exists') || !has(self.value) "
            "|| self.value == ''",
            "value must be empty when operator is Exists",
            lambda x: x.operator != "Exists" or not x.value,
            "value",
        ),
        Rule(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "effect must be NoExecute when tolerationSeconds is set",
            lambda x: x.toleration_seconds is None or x.effect == "NoExecute",
            "effect",
        ),
    )


@dataclass
class EnvVar:
    """A literal environment variable added to the containers."""

    name: str = fld(doc="Variable name.", max_length=253, pattern=ENV_NAME)
    value: str = fld("", doc="Variable value.", max_length=4096)


@dataclass
class ImagePullSecret:
    """A Secret of type kubernetes.io/dockerconfigjson, by name (a LocalObjectReference)."""

    name: str = fld(doc="Secret name in the resource's namespace.", pattern=DNS_SUBDOMAIN)


@dataclass
class PodTemplate:
    """Bounded overrides for the generated pods."""

    labels: dict[str, str] | None = fld(
        None,
        doc="Extra pod labels (keys and values as Kubernetes labels).",
        max_length=63,
        pattern=LABEL_VALUE,
        keys=QUALIFIED_NAME,
    )
    annotations: dict[str, str] | None = fld(
        None,
        doc="Extra pod annotations (keys as Kubernetes annotation keys).",
        max_length=4096,
        keys=ANNOTATION_KEY,
    )
    node_selector: dict[str, str] | None = fld(
        None,
        doc="Pod nodeSelector (node label keys and values).",
        max_length=63,
        pattern=LABEL_VALUE,
        keys=QUALIFIED_NAME,
    )
    tolerations: list[Toleration] | None = fld(None, doc="Pod tolerations.", max_items=32)
    affinity: dict[str, Any] | None = fld(
        None,
        doc="Pod affinity (Kubernetes Affinity; fields it does not have are refused).",
        preserve_unknown=True,
        shape="Affinity",
    )
    priority_class_name: str | None = fld(None, doc="Pod priorityClassName.", pattern=DNS_SUBDOMAIN)
    service_account_name: str | None = fld(
        None, doc="Pod serviceAccountName.", pattern=DNS_SUBDOMAIN
    )
    env: list[EnvVar] | None = fld(None, doc="Extra literal environment variables.")
    image_pull_secrets: list[ImagePullSecret] | None = fld(
        None,
        doc="Pod imagePullSecrets (private registries); replaces the operator's default "
        "(the chart's runtimeImage.pullSecrets); [] for none.",
        max_items=16,
    )


@dataclass
class Servers:
    """Graph servers: one pod per partition."""

    workers: int = fld(1, doc="Worker processes per server pod.", minimum=1, maximum=64)
    image: str | None = fld(
        None,
        doc="Image reference ([registry/]repository[:tag][@digest]); default: the operator's "
        "runtime image.",
        max_length=512,
        pattern=IMAGE_REF,
    )
    image_pull_policy: str | None = fld(None, doc="Image pull policy.", enum=PULL_POLICIES)
    resources: Resources | None = fld(None, doc="Server container resources.")
    pod_template: PodTemplate | None = fld(None, doc="Server pod overrides.")


@dataclass
class App:
    """A built-in training app and its options (``distgnn train APP ...``)."""

    name: str = fld(
        doc="Built-in app: node-classification (integer label, cross-entropy, accuracy), "
        "node-regression (float label [N] or [N, k], MSE, RMSE and MAE), link-prediction, "
        "edge-classification (integer edge data label, edges split by the edge masks, an MLP "
        "on the two endpoints' embeddings, accuracy), edge-regression (the same with a float "
        "edge data label [E] or [E, k], MSE, RMSE and MAE), or inference (every node's "
        "output, and an edge app's test-edge predictions, from a checkpoint).",
        enum=APPS,
    )
    model: str = fld(
        "sage",
        doc="GNN model: sage or gat (homogeneous graphs; link-prediction trains sage), rgcn "
        "(a graph with node and edge types: classifies targetNtype's nodes, or predicts "
        "targetEtype's edges).",
        enum=MODELS,
    )
    target_ntype: str | None = fld(
        None,
        doc="The node type to classify or regress (model rgcn, node-classification and "
        "node-regression: required): its feat, label and masks; every type's feat is an "
        "input (a type without it gets a learnt embedding).",
        min_length=1,
        max_length=128,
    )
    target_etype: str | None = fld(
        None,
        doc="The canonical edge type to predict, SRC_TYPE:RELATION:DST_TYPE (model rgcn, "
        "link-prediction, edge-classification and edge-regression: required). "
        "link-prediction: its edges are the positives (5% held out for the test metrics), "
        "each scored against numNegs random nodes of DST_TYPE; the edge apps: its edge "
        "data label and edge masks. Every node type gets an embedding.",
        min_length=5,
        max_length=386,
        pattern=CANONICAL_ETYPE,
    )
    sparse_embedding: bool = fld(
        True,
        doc="Model rgcn: a node type without feat gets a learnt embedding table on the graph "
        "servers (a DistEmbedding per type, node_emb_NTYPE): each step pulls only the rows "
        "its batch touches and a sparse optimizer (SparseAdam, sparseLr) updates only "
        "those (DGL's --sparse-embedding --dgl-sparse, GraphStorm's default). false: a "
        "dense nn.Embedding that every trainer holds whole and all-reduces every step.",
    )
    sparse_lr: float | None = fld(
        None,
        doc="Model rgcn: the learning rate of the sparse embeddings (GraphStorm's "
        "sparse_optimizer_lr); default: lr.",
        minimum=0,
        exclusive_minimum=True,
        maximum=10,
    )
    num_bases: int | None = fld(
        None,
        doc="Model rgcn: basis decomposition of each layer's relation weights (that many "
        "shared bases, at most the graph's relations: checked at start); default: one "
        "weight per relation (DGL's -1).",
        minimum=1,
        maximum=65536,
    )
    epochs: int = fld(10, doc="Training epochs.", minimum=1, maximum=100000)
    num_layers: int = fld(2, doc="GNN layers (one fanout each).", minimum=1, maximum=8)
    hidden: int = fld(128, doc="Hidden size.", minimum=1, maximum=65536)
    fanouts: list[int] = fld(
        factory=lambda: [10, 25],
        doc="Neighbours sampled per layer, input layer first (-1: all).",
        min_items=1,
        max_items=8,
        item_minimum=-1,
        item_maximum=100000,
    )
    batch_size: int = fld(1024, doc="Seeds per mini-batch.", minimum=1, maximum=1048576)
    lr: float = fld(0.01, doc="Learning rate.", minimum=0, exclusive_minimum=True, maximum=10)
    dropout: float = fld(
        0.5, doc="Dropout probability (below 1).", minimum=0, maximum=1, exclusive_maximum=True
    )
    precision: str = fld(
        "32",
        doc="Training precision: 32 (float32) or bf16-mixed (bfloat16 autocast for the "
        "forward pass; weights, gradients and optimizer state stay float32).",
        enum=PRECISIONS,
    )
    weight_decay: float = fld(0.0005, doc="Weight decay.", minimum=0, maximum=1)
    num_negs: int = fld(
        1, doc="Negative samples per edge (link prediction).", minimum=1, maximum=1000
    )
    exclude: str = fld(
        "reverse",
        doc="Edges excluded from the sampled neighbourhoods of a batch (link prediction): "
        "none, self (its seed edges) or reverse (also every edge between a seed's two nodes "
        "in either direction, of any edge type: on a typed graph the reverse edge type's).",
        enum=("none", "self", "reverse"),
    )
    feat: str = fld("feat", doc="Node feature name.", max_length=128)
    label: str = fld(
        "label",
        doc="Label name: node data, class IDs (integer) for node-classification, a float "
        "target for node-regression; edge data for edge-classification (integer) and "
        "edge-regression (float).",
        max_length=128,
    )
    train_mask: str = fld(
        "train_mask",
        doc="Training mask name (node data; edge data for the edge apps).",
        max_length=128,
    )
    val_mask: str = fld(
        "val_mask",
        doc="Validation mask name (node data; edge data for the edge apps).",
        max_length=128,
    )
    test_mask: str = fld(
        "test_mask",
        doc="Test mask name (node data; edge data for the edge apps).",
        max_length=128,
    )
    seed: int = fld(0, doc="Training random seed.", minimum=0, maximum=2**31 - 1)
    checkpoint_url: str | None = fld(
        None,
        doc="Inference: the checkpoint to load (a ckpt-epoch-N.pt file, or a folder: its "
        "latest); default: trainers.checkpoint.url.",
        name="checkpointURL",
        max_length=URL_MAX,
        min_length=1,
    )
    output_url: str | None = fld(
        None,
        doc="Inference output folder (embeddings, predictions; see docs/inference.md).",
        name="outputURL",
        max_length=URL_MAX,
        min_length=1,
    )
    infer_after_training: bool = fld(
        False,
        doc="After training, compute every node's output with the trained model (the last "
        "checkpoint, all neighbours) and write it to outputURL.",
    )
    embedding_layer: str = fld(
        "last",
        doc="Inference: embeddings of the last layer, or of the last hidden layer.",
        enum=("last", "hidden"),
    )
    infer_batch_size: int = fld(4096, doc="Inference: nodes per batch.", minimum=1, maximum=1048576)

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "size(self.fanouts) == self.numLayers",
            "fanouts must have numLayers entries",
            lambda a: len(a.fanouts) == a.num_layers,
            field="fanouts",
        ),
        Rule(
            "(self.name != 'inference' && !(has(self.inferAfterTraining) && "
            "self.inferAfterTraining)) || has(self.outputURL)",
            "inference (app inference or inferAfterTraining) needs outputURL",
            lambda a: (
                (a.name != "inference" and not a.infer_after_training) or a.output_url is not None
            ),
            field="outputURL",
        ),
        Rule(
            "!(self.name in " + str(list(NODE_APPS)) + ") || !has(self.model) "
            "|| self.model != 'rgcn' || has(self.targetNtype)",
            "model rgcn needs targetNtype (the node type to classify or regress)",
            lambda a: a.name not in NODE_APPS or a.model != "rgcn" or bool(a.target_ntype),
            field="targetNtype",
        ),
        Rule(
            "!has(self.targetNtype) || (has(self.model) && self.model == 'rgcn' "
            "&& !(self.name in " + str(list(EDGE_APPS)) + "))",
            "targetNtype is for model rgcn (sage and gat are homogeneous) in "
            "node-classification, node-regression or inference (the edge apps take "
            "targetEtype)",
            lambda a: a.target_ntype is None or (a.model == "rgcn" and a.name not in EDGE_APPS),
            field="targetNtype",
        ),
        Rule(
            "!(self.name in " + str(list(EDGE_APPS)) + ") || !has(self.model) "
            "|| self.model != 'rgcn' || has(self.targetEtype)",
            "model rgcn for link-prediction, edge-classification and edge-regression needs "
            "targetEtype (the edge type to predict)",
            lambda a: a.name not in EDGE_APPS or a.model != "rgcn" or bool(a.target_etype),
            field="targetEtype",
        ),
        Rule(
            "!has(self.targetEtype) || (self.name in " + str(list(EDGE_APPS)) + " "
            "&& has(self.model) && self.model == 'rgcn')",
            "targetEtype is for link-prediction, edge-classification and edge-regression "
            "with model rgcn",
            lambda a: a.target_etype is None or (a.name in EDGE_APPS and a.model == "rgcn"),
            field="targetEtype",
        ),
        Rule(
            "!has(self.numBases) || (has(self.model) && self.model == 'rgcn')",
            "numBases is for model rgcn",
            lambda a: a.num_bases is None or a.model == "rgcn",
            field="numBases",
        ),
        Rule(
            "!has(self.sparseLr) || (has(self.model) && self.model == 'rgcn')",
            "sparseLr is for model rgcn (its sparse embeddings)",
            lambda a: a.sparse_lr is None or a.model == "rgcn",
            field="sparseLr",
        ),
        Rule(
            "self.name != 'inference' || !has(self.inferAfterTraining) || !self.inferAfterTraining",
            "inferAfterTraining is for the training apps",
            lambda a: a.name != "inference" or not a.infer_after_training,
            field="inferAfterTraining",
        ),
    )


@dataclass
class Checkpoint:
    """Where trainers save checkpoints and resume from."""

    url: str = fld(
        doc="Checkpoint folder URL.", max_length=URL_MAX, min_length=1, schemes=STORAGE_SCHEMES
    )


ONE_GPU = (
    "a trainer process trains on one GPU, DDP's one device per rank as in DGL; for more "
    "GPUs raise trainers.replicas (each trainer gets its own)"
)


@dataclass
class Trainers:
    """The trainer group (PyTorch DDP): exactly one of app, command."""

    replicas: int = fld(2, doc="Trainer processes (world size).", minimum=1, maximum=1024)
    num_samplers: int = fld(0, doc="Sampler processes per trainer.", minimum=0, maximum=64)
    gpus: int = fld(
        0,
        doc=f"GPUs per trainer (its container's nvidia.com/gpu limit): 0 or 1; {ONE_GPU}.",
        minimum=0,
        maximum=1,
        hint=ONE_GPU,
    )
    image: str | None = fld(
        None,
        doc="Image reference ([registry/]repository[:tag][@digest]); default: the operator's "
        "runtime image.",
        max_length=512,
        pattern=IMAGE_REF,
    )
    image_pull_policy: str | None = fld(None, doc="Image pull policy.", enum=PULL_POLICIES)
    resources: Resources | None = fld(None, doc="Trainer container resources.")
    pod_template: PodTemplate | None = fld(None, doc="Trainer pod overrides.")
    app: App | None = fld(None, doc="A built-in app.")
    command: list[str] | None = fld(
        None, doc="A user command instead of an app.", min_items=1, max_items=64, max_length=4096
    )
    args: list[str] | None = fld(
        None, doc="Arguments of the user command.", max_items=256, max_length=4096
    )
    checkpoint: Checkpoint | None = fld(None, doc="Checkpointing.")
    colocate: bool = fld(
        False,
        doc="Run each partition's trainers beside its graph server (same pod; local mode: "
        "same machine), reading that partition's rows from the server's shared memory and "
        "the others over TCP. replicas must be a multiple of partitioning.numParts; not "
        "with graph.graphServer. Kubernetes >= 1.29 (native sidecar; on an older API "
        "server the job fails with reason SidecarsUnsupported, creating nothing).",
    )
    feature_cache_mb: int = fld(
        0,
        name="featureCacheMB",
        doc="Megabytes of hot feature rows each trainer process caches (0: none): rows "
        "every batch reads again are not pulled; any trainer's write is still seen by "
        "every later read. Adds up to this much memory to every trainer (opt-in for that "
        "reason). Fewer bytes on the network and less server CPU for a little more "
        "trainer CPU (128 on the benchmark's 1M-node graph over TCP: 56 % fewer bytes, "
        "39 % less server CPU; docs/servers.md). Sets DISTGNN_FEATURE_CACHE_MB.",
        minimum=0,
        maximum=1 << 20,
    )

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.app) != has(self.command)",
            "exactly one of app, command must be set",
            lambda t: _count(t.app, t.command) == 1,
        ),
        Rule(
            "!has(self.app) || self.app.name != 'inference' || has(self.app.checkpointURL) "
            "|| has(self.checkpoint)",
            "app inference needs app.checkpointURL or checkpoint",
            lambda t: (
                t.app is None
                or t.app.name != "inference"
                or t.app.checkpoint_url is not None
                or t.checkpoint is not None
            ),
            field="app",
        ),
        Rule(
            "!has(self.app) || !has(self.app.inferAfterTraining) || "
            "!self.app.inferAfterTraining || has(self.checkpoint)",
            "app.inferAfterTraining needs checkpoint (inference loads the last checkpoint)",
            lambda t: t.app is None or not t.app.infer_after_training or t.checkpoint is not None,
            field="checkpoint",
        ),
        Rule(
            "!has(self.gpus) || self.gpus <= 1",
            f"gpus must be 0 or 1: {ONE_GPU}",
            lambda t: t.gpus <= 1,
            field="gpus",
        ),
        Rule(
            "",  # quantities in a map: checked when parsed (InvalidSpec)
            f"at most one GPU (a */gpu resource) per trainer: {ONE_GPU}",
            lambda t: t.resources is None or all(_q(v) <= 1 for v in _gpu_values(t.resources)),
            field="resources",
        ),
        Rule(
            "!has(self.args) || has(self.command)",
            "args needs command",
            lambda t: t.args is None or t.command is not None,
            field="args",
        ),
        Rule(
            "self.replicas == oldSelf.replicas",
            "spec.trainers.replicas is immutable (the world size of the trainer group): "
            "delete the job and create it again to change it",
            field="replicas",
        ),
    )


@dataclass
class Gang:
    """Gang scheduling: all pods start together or not at all."""

    enabled: bool = fld(False, doc="Create a PodGroup (scheduler-plugins coscheduling).")
    min_available: int | None = fld(
        None, doc="Pods that must start together; default: all.", minimum=1, maximum=2048
    )
    scheduler: str | None = fld(None, doc="schedulerName of the pods.", pattern=DNS_SUBDOMAIN)


@dataclass
class SchedulingPolicy:
    """Scheduling of the job's pods."""

    gang: Gang | None = fld(None, doc="Gang scheduling.")
    priority_class_name: str | None = fld(
        None, doc="PriorityClass of every pod.", pattern=DNS_SUBDOMAIN
    )
    queue: str | None = fld(
        None,
        doc="Queue name (label kueue.x-k8s.io/queue-name).",
        max_length=63,
        pattern=DNS_SUBDOMAIN,
    )


@dataclass
class RunPolicy:
    """Lifecycle policy, as in Kubeflow training jobs."""

    backoff_limit: int = fld(
        3,
        doc=(
            "Restarts of the trainer group before Failed. A trainer's exit code 2 "
            "(a configuration error) is never retried."
        ),
        minimum=0,
        maximum=100,
    )
    active_deadline_seconds: int | None = fld(
        None, doc="Fail the job after this many seconds.", minimum=1, maximum=2**31 - 1
    )
    ttl_seconds_after_finished: int | None = fld(
        None, doc="Delete the job this long after it finished.", minimum=0, maximum=2**31 - 1
    )
    clean_pod_policy: str = fld(
        "Running",
        doc="Pods deleted when the job finishes: All, the Running ones (servers), or None.",
        enum=("All", "Running", "None"),
    )
    suspend: bool = fld(False, doc="Suspend: delete the pods, keep the job.")
    scheduling_policy: SchedulingPolicy | None = fld(None, doc="Scheduling.")


@dataclass
class Monitoring:
    """Prometheus metrics of the pods (docs/observability.md)."""

    metrics: bool = fld(
        False,
        doc="Serve Prometheus /metrics from graph servers and trainers, with scrape "
        "annotations and named metrics ports on their pods.",
    )


@dataclass
class DistGNNJobSpec:
    """A distributed GNN training job."""

    graph: JobGraph = fld(doc="The graph to train on.")
    trainers: Trainers = fld(doc="The trainer group.")
    partitioning: Partitioning = fld(factory=Partitioning, doc="Partitioning options.")
    storage: Storage = fld(factory=Storage, doc="Object storage.")
    servers: Servers = fld(factory=Servers, doc="Graph servers.")
    run_policy: RunPolicy = fld(factory=RunPolicy, doc="Run policy.")
    monitoring: Monitoring = fld(factory=Monitoring, doc="Metrics.")
    managed_by: str | None = fld(
        None,
        doc=f"The controller that runs the job, as a batch Job's spec.managedBy: absent or "
        f"{contract.CONTROLLER_NAME} is the DistGNN operator; any other (Kueue's MultiKueue: "
        "kueue.x-k8s.io/multikueue, which runs the job on a worker cluster) and the operator "
        "creates nothing and writes nothing to the job, and distgnn run refuses it. Immutable.",
        max_length=63,
        pattern=DOMAIN_PREFIXED_PATH,
    )

    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.managedBy) == has(oldSelf.managedBy) "
            "&& (!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
            "spec.managedBy is immutable: it cannot be set, changed or removed once the job "
            "exists (delete the job and create it again)",
            field="managedBy",
        ),
        Rule(
            "!has(self.trainers.colocate) || !self.trainers.colocate "
            "|| !has(self.graph.graphServer)",
            "trainers.colocate needs the job's own graph servers, not graph.graphServer "
            "(a GraphServer's pods are shared: its jobs read over the network)",
            lambda s: not s.trainers.colocate or s.graph.graph_server is None,
            field="trainers",
        ),
        Rule(
            "!has(self.trainers.colocate) || !self.trainers.colocate "
            "|| (has(self.trainers.replicas) ? self.trainers.replicas : 2) % "
            "(has(self.partitioning) && has(self.partitioning.numParts) "
            "? self.partitioning.numParts : 2) == 0",
            "trainers.colocate needs trainers.replicas to be a multiple of "
            "partitioning.numParts (the same number of trainers beside every server)",
            lambda s: (
                not s.trainers.colocate or s.trainers.replicas % s.partitioning.num_parts == 0
            ),
            field="trainers",
        ),
    )


@dataclass
class GraphServerSpec:
    """A long-lived set of graph servers that several jobs can attach to."""

    graph: ServerGraph = fld(doc="The graph to serve.")
    partitioning: Partitioning = fld(factory=Partitioning, doc="Partitioning options.")
    storage: Storage = fld(factory=Storage, doc="Object storage.")
    servers: Servers = fld(factory=Servers, doc="Graph servers.")
    monitoring: Monitoring = fld(factory=Monitoring, doc="Metrics.")


# --- status -------------------------------------------------------------------------

JOB_PHASES = ("Pending", "Partitioning", "Starting", "Running", "Succeeded", "Failed", "Suspended")
GRAPHSERVER_PHASES = ("Pending", "Partitioning", "Starting", "Ready", "Failed", "Terminating")
MAX_ATTACHED_JOBS = 256
"""Bound of a GraphServer's ``status.attachedJobs`` (the operator lists the first ones)."""


@dataclass
class Condition:
    """A standard Kubernetes condition."""

    type: str = fld(
        doc="Condition type (Created, Partitioned, ServersReady, Running, ...).", max_length=64
    )
    status: str = fld(doc="True, False or Unknown.", enum=("True", "False", "Unknown"))
    reason: str | None = fld(None, doc="CamelCase machine-readable reason.", max_length=128)
    message: str | None = fld(None, doc="Human-readable detail.", max_length=1024)
    last_transition_time: str | None = fld(
        None, doc="When status last changed.", max_length=64, fmt="date-time"
    )
    observed_generation: int | None = fld(None, doc="Generation the condition is about.", minimum=0)


MAX_TAKEN_NAMES = 16
"""Bound of ``status.takenNames`` (a resource has fewer children than this)."""
TAKEN_NAMES_DOC = (
    "Children whose names are held by objects this resource does not control "
    "(reason ResourceExists); the operator reads who holds each before it sends "
    "their create again."
)


@dataclass
class TakenName:
    """A child whose name is held by an object the resource does not control."""

    kind: str = fld(doc="Kind of the child (Service, StatefulSet, Job, ...).", max_length=64)
    name: str = fld(doc="Name of the child.", max_length=253)


@dataclass
class TrainerCounts:
    """Trainer pods by state."""

    active: int | None = fld(None, doc="Running or pending trainer pods.", minimum=0)
    ready: int | None = fld(None, doc="Running (ready) trainer pods.", minimum=0)
    succeeded: int | None = fld(None, doc="Succeeded trainer pods.", minimum=0)
    failed: int | None = fld(None, doc="Failed trainer pods.", minimum=0)


@dataclass
class TrainingProgress:
    """Live progress of rank 0, read by the operator from its /progress endpoint."""

    epoch: str | None = fld(None, doc="Completed epochs of total, e.g. 7/25.", max_length=32)
    completed_epochs: int | None = fld(None, doc="Epochs completed.", minimum=0)
    total_epochs: int | None = fld(None, doc="Epochs to run.", minimum=0)
    loss: float | None = fld(None, doc="Training loss of the last epoch.")
    validation_metric: str | None = fld(
        None, doc="Name of the last validation metric (e.g. valAccuracy).", max_length=63
    )
    validation_value: float | None = fld(None, doc="Value of the last validation metric.")
    epoch_seconds: float | None = fld(None, doc="Wall time of the last epoch.", minimum=0)
    samples_per_second: float | None = fld(
        None, doc="Training seeds per second of the last epoch (all ranks).", minimum=0
    )
    update_time: str | None = fld(
        None, doc="When this progress last changed.", max_length=64, fmt="date-time"
    )


@dataclass
class DistGNNJobStatus:
    """Observed state of a DistGNNJob."""

    phase: str | None = fld(None, doc="Summary phase.", enum=JOB_PHASES)
    conditions: list[Condition] | None = fld(None, doc="Conditions.", max_items=16)
    observed_generation: int | None = fld(None, doc="Last generation reconciled.", minimum=0)
    partitions_ready: int | None = fld(None, doc="Graph servers ready.", minimum=0)
    num_parts: int | None = fld(None, doc="Partitions (graph servers).", minimum=0)
    trainers: TrainerCounts | None = fld(None, doc="Trainer pods by state.")
    restarts: int | None = fld(None, doc="Restarts of the trainer group.", minimum=0)
    start_time: str | None = fld(None, doc="When the job started.", max_length=64, fmt="date-time")
    completion_time: str | None = fld(
        None, doc="When the job finished.", max_length=64, fmt="date-time"
    )
    manifest_url: str | None = fld(
        None, doc="Partition manifest in use.", name="manifestURL", max_length=URL_MAX
    )
    metrics: dict[str, float] | None = fld(
        None, doc="Final metrics of rank 0 (testAccuracy, valAccuracy, ...)."
    )
    graph_server: str | None = fld(None, doc="Attached GraphServer.", max_length=63)
    output_url: str | None = fld(
        None,
        doc="Where inference wrote its output (index.json there), once the job succeeded.",
        name="outputURL",
        max_length=URL_MAX,
    )
    progress: TrainingProgress | None = fld(None, doc="Live training progress of rank 0.")
    taken_names: list[TakenName] | None = fld(None, doc=TAKEN_NAMES_DOC, max_items=MAX_TAKEN_NAMES)


@dataclass
class GraphServerStatus:
    """Observed state of a GraphServer."""

    phase: str | None = fld(None, doc="Summary phase.", enum=GRAPHSERVER_PHASES)
    conditions: list[Condition] | None = fld(None, doc="Conditions.", max_items=16)
    observed_generation: int | None = fld(None, doc="Last generation reconciled.", minimum=0)
    partitions_ready: int | None = fld(None, doc="Graph servers ready.", minimum=0)
    num_parts: int | None = fld(None, doc="Partitions (graph servers).", minimum=0)
    manifest_url: str | None = fld(
        None, doc="Partition manifest served.", name="manifestURL", max_length=URL_MAX
    )
    attached_jobs: list[str] | None = fld(
        None, doc="DistGNNJobs using these servers.", max_items=MAX_ATTACHED_JOBS, max_length=63
    )
    endpoints: list[str] | None = fld(
        None, doc="host:port of each server, partition order.", max_items=1024, max_length=320
    )
    token_secret: str | None = fld(None, doc="Secret holding the servers' token.", max_length=253)
    taken_names: list[TakenName] | None = fld(None, doc=TAKEN_NAMES_DOC, max_items=MAX_TAKEN_NAMES)


# --- whole resources ----------------------------------------------------------------


@dataclass
class ObjectMeta:
    """The parts of metadata DistGNN uses."""

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


@dataclass
class DistGNNJob:
    """A parsed, defaulted, validated DistGNNJob."""

    metadata: ObjectMeta
    spec: DistGNNJobSpec
    KIND: ClassVar[str] = "DistGNNJob"


@dataclass
class GraphServer:
    """A parsed, defaulted, validated GraphServer."""

    metadata: ObjectMeta
    spec: GraphServerSpec
    KIND: ClassVar[str] = "GraphServer"
