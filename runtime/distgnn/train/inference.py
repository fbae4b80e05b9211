"""The built-in ``inference`` app: every node's embedding (and prediction) from a checkpoint.

``distgnn train inference --checkpoint-url URL --output-url OUT`` (or a training app with
``--infer-after-training``) loads the checkpoint, rebuilds the model from its weights,
runs the layer-wise full-neighbour pass (:mod:`distgnn.train.layerwise`, the layers on
the graph servers) and writes the output (:mod:`distgnn.train.infer_output`): each
partition's shards by one trainer (partition ``p`` by rank ``p % world_size``), then
the index, last, by rank 0.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn import contract, storage
from distgnn.dataloading.types import graph_typing
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.nn import GAT, GraphSAGE
from distgnn.npy import ShardWriter
from distgnn.sampling.local import LocalGraph
from distgnn.train import checkpoint
from distgnn.train import infer_output as fmt
from distgnn.train.config import FEAT
from distgnn.train.ddp import DDPContext, barrier
from distgnn.train.edge_output import (
    EdgePredictions,
    array_specs,
    pred_specs,
    predictions,
)
from distgnn.train.graph import TrainGraph
from distgnn.train.layerwise import (
    FeatureRows,
    Rows,
    layer_pass,
    layerwise,
    owned_nodes,
    rows_factory,
    run_id,
)
from distgnn.train.objective import for_app
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")
CHUNK = 1 << 16
INPUT_EMBEDDING = "input_embedding"
"""the learnt input embedding of a featureless node type (its ``DistEmbedding`` row)"""
EMBEDDING_LAYERS = ("last", "hidden")
EDGE_APPS = ("edge-classification", "edge-regression")


@dataclass(frozen=True)
class InferOptions:
    """What to compute and where to write it."""

    output_url: str
    feat: str = "feat"
    batch_size: int = 4096
    embedding_layer: str = "last"
    classify: bool = True
    regress: bool = False
    """node regression: ``pred`` is the last layer's output (float32), no ``prob``"""
    test_mask: str | None = "test_mask"
    label: str = "label"
    target_ntype: str | None = None
    """typed graphs: the node type whose test accuracy is reported"""

    def validate(self) -> InferOptions:
        if not self.output_url:
            raise ConfigError("--output-url: inference needs an output URL")
        if self.embedding_layer not in EMBEDDING_LAYERS:
            raise ConfigError(f"--embedding-layer: {self.embedding_layer!r} is not last or hidden")
        if self.batch_size < 1:
            raise ConfigError("--infer-batch-size: must be >= 1")
        return self


def resolve_checkpoint(url: str | None) -> str:
    """A ``ckpt-epoch-N.pt`` URL as given, or the latest one in a folder."""
    if not url:
        raise ConfigError("--checkpoint-url: inference needs a checkpoint (file or folder)")
    if url.endswith(".pt"):
        return url
    found = checkpoint.latest(url)
    if found is None:
        raise ConfigError(f"--checkpoint-url: no checkpoint under {storage.redact(url)}")
    return found


def model_from_state(state: dict[str, Any]) -> nn.Module:
    """The built-in model (GraphSAGE or GAT) the weights belong to, weights loaded."""
    keys = set(state)
    n = 0
    while any(k.startswith(f"layers.{n}.") for k in keys):
        n += 1
    if n == 0:
        raise ConfigError("checkpoint: no layers.N.* weights (not a built-in model)")
    model: nn.Module
    if "layers.0.fc_self.weight" in keys:
        ws = [state[f"layers.{i}.fc_self.weight"] for i in range(n)]
        model = GraphSAGE(int(ws[0].shape[1]), int(ws[0].shape[0]), int(ws[-1].shape[0]), n, 0.0)
    elif "layers.0.attn_l" in keys:
        a0, al = state["layers.0.attn_l"], state[f"layers.{n - 1}.attn_l"]
        heads = int(a0.shape[1])
        in_feats = int(state["layers.0.fc.weight"].shape[1])
        hidden = heads * int(a0.shape[2]) if n > 1 else 1
        model = GAT(in_feats, hidden, int(al.shape[2]), n, heads=heads, dropout=0.0)
    else:
        raise ConfigError("checkpoint: weights are neither GraphSAGE nor GAT")
    state = _renamed(state, set(model.state_dict()))
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ConfigError(f"checkpoint: weights do not fit the model ({e})") from e
    model.eval()
    return model


def rgcn_from_checkpoint(
    ck: checkpoint.Checkpoint, state: dict[str, Any] | None = None
) -> nn.Module:
    """The built-in R-GCN a checkpoint's ``extra["rgcn"]`` describes, weights loaded
    (``state``: its weights, default the checkpoint's model; an edge app's encoder's)."""
    from distgnn.nn import RGCN

    cfg = ck.extra.get("rgcn")
    if not isinstance(cfg, dict):
        raise ConfigError("checkpoint: model rgcn without its configuration (extra.rgcn)")
    try:
        model = RGCN.from_config(cfg)
        model.load_state_dict(ck.model if state is None else state)
    except (TypeError, RuntimeError) as e:
        raise ConfigError(f"checkpoint: weights do not fit the R-GCN ({e})") from e
    model.eval()
    return model


def attach_tables(
    model: nn.Module, ck: checkpoint.Checkpoint, tg: TrainGraph, ctx: DDPContext
) -> Any:
    """An R-GCN trained with sparse embeddings: its tables on the servers (attached by
    name, created if the job has none), written back from the checkpoint by every trainer
    (the rows the checkpoint's trainers saved), so inference reads the checkpoint's rows.
    Returns the tables (None: dense)."""
    from distgnn.train.sparse_emb import NodeEmbeddings

    types = list(getattr(model, "sparse_types", []))
    if not types:
        return None
    cfg = ck.extra["rgcn"]
    num = {t: int(cfg["num_nodes"][t]) for t in types}
    embs = NodeEmbeddings(tg.g, num, int(cfg["hidden"]))
    embs.check(ck.sparse)
    embs.restore(ck.sparse, ck.url, ctx.is_main, optimizer=False)
    barrier(ctx)
    model.set_tables(embs.lookups())  # type: ignore[operator]
    return embs


def _renamed(state: dict[str, Any], expected: set[str]) -> dict[str, Any]:
    """Keys of checkpoints written before the layers took DGL's parameter names
    (``SAGEConv.fc_self.bias`` is now ``SAGEConv.bias``)."""
    out = {}
    for k, v in state.items():
        new = k.replace(".fc_self.bias", ".bias")
        out[new if k not in expected and new in expected else k] = v
    return out


@dataclass(frozen=True)
class Segment:
    """The nodes of one type in one partition: new IDs ``start .. start+count``."""

    ntype: str
    part: int
    start: int
    count: int
    row: int  # first row in the partition's orig_nid
    type_offset: int  # original homogeneous ID of the type's node 0
    type_start: int = 0  # type-wise (partitioned) ID of the segment's first node


def segments(tg: TrainGraph, ntypes: Collection[str] | None = None) -> list[Segment]:
    """The (node type, partition) segments, of ``ntypes`` only when given."""
    if isinstance(tg.g, LocalGraph):
        return [Segment("_N", 0, 0, tg.num_nodes(), 0, 0)]
    man = tg.g.manifest
    orig_off, acc = {}, 0
    for t in man.node_types:
        orig_off[t] = acc
        acc += int(man.ntype_offsets[t][-1])
    out = []
    for p in range(man.num_parts):
        pos = int(man.node_offsets[p])
        for t in man.node_types:
            c = int(man.ntype_offsets[t][p + 1] - man.ntype_offsets[t][p])
            if ntypes is None or t in ntypes:
                row = pos - int(man.node_offsets[p])
                out.append(Segment(t, p, pos, c, row, orig_off[t], int(man.ntype_offsets[t][p])))
            pos += c
    return out


def _orig_nid(tg: TrainGraph, part: int, manifest_url: str | None) -> np.ndarray | None:
    """Original homogeneous IDs of a partition's nodes (None: IDs are original already)."""
    if isinstance(tg.g, LocalGraph):
        return None
    from distgnn.partition.loader import read_part_array

    if not manifest_url:
        raise ConfigError(f"{contract.ENV_MANIFEST}: needed to map node IDs to original IDs")
    return read_part_array(manifest_url, tg.g.manifest, part, "graph/orig_nid.npy")


def write_shards(
    tg: TrainGraph,
    ctx: DDPContext,
    opts: InferOptions,
    run: str,
    final: Rows,
    emb: Rows,
    manifest_url: str | None,
    ntypes: Collection[str] | None = None,
    learned: Mapping[str, Any] | None = None,
) -> int:
    """Write the shards of the partitions this rank owns (of ``ntypes`` when given);
    returns rows written. ``learned``: the learnt input embedding of featureless node
    types (``DistEmbedding`` per type), written as their ``input_embedding``."""
    total = 0
    segs = segments(tg, ntypes)
    parts = sorted({s.part for s in segs})
    for p in parts:
        if p % ctx.world_size != ctx.rank:
            continue
        orig = _orig_nid(tg, p, manifest_url)
        for s in (s for s in segs if s.part == p):
            t0 = time.monotonic()
            files = _write_segment(tg, opts, run, s, orig, final, emb, (learned or {}).get(s.ntype))
            rec = {"ntype": s.ntype, "part": p, "rows": s.count, "files": files}
            fmt.write_shard_record(opts.output_url, run, s.ntype, p, rec)
            total += s.count
            log.info(
                "inference shard written",
                extra=kv(
                    rank=ctx.rank,
                    ntype=s.ntype,
                    part=p,
                    rows=s.count,
                    seconds=round(time.monotonic() - t0, 3),
                ),
            )
    return total


def _write_segment(
    tg: TrainGraph,
    opts: InferOptions,
    run: str,
    s: Segment,
    orig: np.ndarray | None,
    final: Rows,
    emb: Rows,
    table: Any = None,
) -> dict[str, dict[str, Any]]:
    first = s.start if s.count else 0
    probe = emb.read(np.arange(first, first + min(1, tg.num_nodes()), dtype=np.int64))
    dim = int(probe.shape[1])
    specs: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
        "orig_id": (np.dtype(np.int64), (s.count,)),
        "embedding": (np.dtype(np.float32), (s.count, dim)),
    }
    if opts.regress or opts.classify:
        width = int(final.read(np.arange(first, first + min(1, tg.num_nodes()))).shape[1])
        preds = pred_specs(opts.regress, width)
        specs |= {a: (dt, (s.count, *shape)) for a, (dt, shape) in preds.items()}
    if table is not None:
        specs[INPUT_EMBEDDING] = (np.dtype(np.float32), (s.count, int(table.embedding_dim)))
    writers = {
        a: ShardWriter(opts.output_url, fmt.shard_path(run, s.ntype, s.part, a), dt, shape)
        for a, (dt, shape) in specs.items()
    }
    try:
        for lo in range(0, s.count, CHUNK):
            hi = min(lo + CHUNK, s.count)
            ids = np.arange(s.start + lo, s.start + hi, dtype=np.int64)
            if orig is None:
                writers["orig_id"].write(ids - s.type_offset)
            else:
                writers["orig_id"].write(orig[s.row + lo : s.row + hi] - s.type_offset)
            e = emb.read(ids)
            writers["embedding"].write(e.numpy())
            if opts.regress or opts.classify:
                out = predictions(e if emb is final else final.read(ids), opts.regress)
                for a, v in out.items():
                    writers[a].write(v)
            if table is not None:
                typed = np.arange(s.type_start + lo, s.type_start + hi, dtype=np.int64)
                writers[INPUT_EMBEDDING].write(table.tensor.pull_numpy(typed))
        return {a: vars(w.close()) for a, w in writers.items()}
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def build_index(
    tg: TrainGraph,
    opts: InferOptions,
    run: str,
    dim: int,
    info: dict[str, Any],
    ntypes: Collection[str] | None = None,
    learned: Mapping[str, int] | None = None,
    pred_width: int = 1,
) -> fmt.Index:
    """Rank 0: the index from every shard's record (written by the other ranks);
    ``learned``: the width of each type's ``input_embedding`` (listed under its type);
    ``pred_width``: a regression's targets per node (``pred`` is ``[]`` for 1)."""
    segs = segments(tg, ntypes)
    types: dict[str, dict[str, Any]] = {}
    arrays: dict[str, dict[str, Any]] = {}
    for s in segs:
        rec = fmt.read_shard_record(opts.output_url, run, s.ntype, s.part)
        t = types.setdefault(s.ntype, {"num_nodes": 0, "shards": []})
        if learned and s.ntype in learned:
            t["arrays"] = {INPUT_EMBEDDING: {"dtype": "float32", "shape": [learned[s.ntype]]}}
        t["num_nodes"] += int(rec["rows"])
        t["shards"].append({"part": s.part, "rows": int(rec["rows"]), "files": rec["files"]})
    arrays["orig_id"] = {"dtype": "int64", "shape": []}
    arrays["embedding"] = {"dtype": "float32", "shape": [dim]}
    if opts.regress or opts.classify:
        arrays |= array_specs(pred_specs(opts.regress, pred_width))
    total = sum(int(t["num_nodes"]) for t in types.values())
    return fmt.Index(run, total, arrays, types, info)


def peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(r / (1 << 20) if sys.platform == "darwin" else r / 1024, 1)


def infer_to_storage(
    tg: TrainGraph,
    model: nn.Module,
    ctx: DDPContext,
    opts: InferOptions,
    info: dict[str, Any] | None = None,
    manifest_url: str | None = None,
    telemetry: Telemetry | None = None,
    edges: EdgePredictions | None = None,
) -> dict[str, Any]:
    """Layer-wise inference of ``model`` over ``tg``, written to ``opts.output_url``;
    returns the summary (test accuracy on rank 0 for node classification). ``edges``: an
    edge app's head, whose test-edge predictions are written too
    (:mod:`distgnn.train.edge_output`)."""
    import os

    opts = opts.validate()
    if not isinstance(tg.g, LocalGraph) and graph_typing(tg.g) is not None:
        raise ConfigError(
            "layer-wise inference: the built-in models are homogeneous; a heterogeneous "
            "graph needs a typed model (distgnn.train.hetero_inference.hetero_infer_to_storage)"
        )
    manifest_url = manifest_url or os.environ.get(contract.ENV_MANIFEST)
    model.eval()
    lw = layerwise(model)
    if opts.embedding_layer == "hidden" and len(lw.steps) < 2:
        raise ConfigError("--embedding-layer hidden: the model has no hidden layer")
    tg.require({FEAT: opts.feat})
    in_feats = int(tg.read(opts.feat, torch.tensor([0])).shape[1])
    layers = getattr(model, "layers", None)
    want = getattr(layers[0], "_in_src_feats", None) if layers else None
    if isinstance(want, int) and want != in_feats:
        raise ConfigError(
            f"--feat: {opts.feat!r} has {in_feats} columns but the model takes {want}"
        )
    run = run_id(ctx)
    nodes = owned_nodes(tg, ctx.rank, ctx.world_size)
    hidden_i = len(lw.steps) - 2
    keep = (hidden_i,) if opts.embedding_layer == "hidden" else ()
    log.info(
        "inference",
        extra=kv(
            rank=ctx.rank,
            run=run,
            nodes=int(nodes.size),
            layers=len(lw.steps),
            dims=lw.dims,
            in_feats=in_feats,
            output=storage.redact(opts.output_url),
        ),
    )
    progress = telemetry.progress if telemetry is not None else None

    def on_layer(layer: int, layers: int, seconds: float) -> None:
        if progress is not None:
            progress.update(
                state="inference",
                inferenceLayers=f"{layer + 1}/{layers}",
                inferenceLayerSeconds=round(seconds, 3),
            )

    on_layer(-1, len(lw.steps), 0.0)
    t0, c0 = time.monotonic(), time.process_time()
    rows = layer_pass(
        tg,
        lw,
        FeatureRows(tg, opts.feat),
        nodes,
        ctx,
        rows_factory(tg, run),
        opts.batch_size,
        ctx.device,
        keep,
        on_layer,
    )
    t_compute, cpu_compute = time.monotonic() - t0, time.process_time() - c0
    final = rows[-1]
    emb = rows[hidden_i] if opts.embedding_layer == "hidden" else final
    assert final is not None and emb is not None
    written = write_shards(tg, ctx, opts, run, final, emb, manifest_url)
    edge_metrics = None
    if edges is not None:
        edge_metrics = edges.write(tg, ctx, opts.output_url, run, final, manifest_url)
    barrier(ctx)
    summary: dict[str, Any] = {}
    if ctx.is_main:
        dims = lw.dims[hidden_i] if opts.embedding_layer == "hidden" else lw.dims[-1]
        meta = {
            "graph_name": getattr(getattr(tg.g, "manifest", None), "graph_name", None),
            "embedding_layer": opts.embedding_layer,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(info or {}),
        }
        index = build_index(tg, opts, run, dims, meta, pred_width=lw.dims[-1])
        if edges is not None:
            index.edge_types = edges.index(tg, opts.output_url, run)
        fmt.write_index(opts.output_url, index)
        fmt.remove_stale_runs(opts.output_url, run)
        summary["inference_test_accuracy"] = _test_accuracy(tg, opts, final)
        summary["inference_test_rmse"] = _test_rmse(tg, opts, final)
        if edges is not None and edge_metrics is not None:  # the written test edges'
            summary |= {f"inference_test_{k}": round(v, 6) for k, v in edge_metrics.items()}
            summary["inference_edges"] = index.edge_types[edges.key]["num_edges"]
    barrier(ctx)
    for r in {id(x): x for x in (final, emb)}.values():
        r.release()
    dt = time.monotonic() - t0
    summary |= {
        "output_url": opts.output_url,
        "inference_nodes": tg.num_nodes(),
        "inference_seconds": round(dt, 3),
        "inference_compute_seconds": round(t_compute, 3),
        "inference_nodes_per_second": round(tg.num_nodes() / max(t_compute, 1e-9), 1),
    }
    for k in ("inference_test_accuracy", "inference_test_rmse", "inference_test_mae"):
        if summary.get(k) is None:
            summary.pop(k, None)
    log.info(
        "inference done",
        extra=kv(
            rank=ctx.rank,
            rows_written=written,
            peak_rss_mb=peak_rss_mb(),
            compute_cpu_seconds=round(cpu_compute, 3),
            **{k: v for k, v in summary.items() if k != "output_url"},
            output=storage.redact(opts.output_url),
        ),
    )
    return summary


def _test_rows(tg: TrainGraph, opts: InferOptions) -> tuple[np.ndarray, torch.Tensor] | None:
    """The nodes of ``opts.test_mask`` and their labels (None without the mask or a label,
    or with no test node)."""
    if not opts.test_mask:
        return None
    try:
        ids = tg.mask_ids(opts.test_mask)
        labels = tg.read(opts.label, torch.from_numpy(ids))
    except (ConfigError, KeyError):
        return None
    return (ids, labels) if ids.size else None


def _test_accuracy(tg: TrainGraph, opts: InferOptions, final: Rows) -> float | None:
    rows = _test_rows(tg, opts) if opts.classify else None
    if rows is None:
        return None
    ids, labels = rows
    pred = final.read(ids).argmax(1)
    return round(float((pred == labels.long()).float().mean().item()), 6)


def _test_rmse(tg: TrainGraph, opts: InferOptions, final: Rows) -> float | None:
    """RMSE of a regression's written predictions on ``opts.test_mask`` (None without)."""
    rows = _test_rows(tg, opts) if opts.regress else None
    if rows is None:
        return None
    ids, labels = rows
    y = labels.float()
    d = final.read(ids).float() - y.reshape(y.shape[0], -1)
    return round(float(d.pow(2).mean().sqrt().item()), 6)


def run(
    cfg: Any,
    tg: TrainGraph,
    ctx: DDPContext,
    checkpoint_url: str | None = None,
    telemetry: Telemetry | None = None,
) -> dict[str, Any]:
    """The app: load the checkpoint (a file, or a folder's latest), infer, write. A
    checkpoint of the typed R-GCN runs :func:`~distgnn.train.hetero_inference.
    hetero_infer_to_storage` (every node type's output)."""
    url = resolve_checkpoint(checkpoint_url or cfg.checkpoint_url)
    ck = checkpoint.load(url)
    typed = ck.extra.get("model") == "rgcn"
    app = str(ck.extra.get("app") or "node-classification")
    state = ck.model
    edges = None
    if app in EDGE_APPS:  # every node's embedding by the encoder, the test edges' by the head
        from distgnn.train.edge_classification import encoder_state, head_from_state

        state = encoder_state(state)
        head = head_from_state(ck.model).to(ctx.device)
        width = int(ck.model["head.2.weight"].shape[0])
        etype = ck.extra.get("target_etype")
        cet = None
        if typed and etype:  # the R-GCN's target edge type
            src, rel, dst = str(etype).split(":", 2)
            cet = (src, rel, dst)
        edges = EdgePredictions(head, width, for_app(app), cfg.test_mask, cfg.label, cet)
    model = (rgcn_from_checkpoint(ck, state) if typed else model_from_state(state)).to(ctx.device)
    tables = attach_tables(model, ck, tg, ctx) if typed else None
    opts = InferOptions(
        output_url=cfg.output_url or "",
        feat=cfg.feat,
        batch_size=cfg.infer_batch_size,
        embedding_layer=cfg.embedding_layer,
        classify=app == "node-classification",
        regress=app == "node-regression",
        test_mask=cfg.test_mask,
        label=cfg.label,
        target_ntype=getattr(cfg, "target_ntype", None) or ck.extra.get("target_ntype"),
    )
    info: dict[str, Any] = {
        "app": app,
        "model": "rgcn" if typed else "sage" if isinstance(model, GraphSAGE) else "gat",
        "checkpoint": storage.redact(url),
        "checkpoint_epoch": ck.epoch,
    }
    if typed:
        from distgnn.train.hetero_inference import hetero_infer_to_storage

        if ck.extra.get("target_etype"):  # a link-prediction or an edge app's R-GCN
            info["target_etype"] = ck.extra["target_etype"]
        else:
            info["target_ntype"] = opts.target_ntype
        learned = tables.tables if tables is not None else None
        out = hetero_infer_to_storage(tg, model, ctx, opts, info, learned=learned, edges=edges)
        del tables  # the model's tables stay on the servers for the job
    else:
        out = infer_to_storage(tg, model, ctx, opts, info, telemetry=telemetry, edges=edges)
    return {"app": "inference", "checkpoint_epoch": ck.epoch} | out
