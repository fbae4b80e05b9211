"""Inference output of a heterogeneous graph: the typed layer-wise pass
(:mod:`distgnn.train.hetero_layerwise`) written per node type in the output format of
:mod:`distgnn.train.infer_output` (shards per node type and partition, type-wise
``orig_id``)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn import contract, storage
from distgnn.dataloading.types import graph_typing
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.train import hetero_layerwise as hl
from distgnn.train import infer_output as fmt
from distgnn.train.ddp import DDPContext, barrier
from distgnn.train.edge_output import EdgePredictions
from distgnn.train.graph import TrainGraph
from distgnn.train.inference import InferOptions, build_index, write_shards
from distgnn.train.layerwise import owned_nodes, run_id

log = logging.getLogger("distgnn.train")


def hetero_infer_to_storage(
    tg: TrainGraph,
    model: nn.Module,
    ctx: DDPContext,
    opts: InferOptions,
    info: dict[str, Any] | None = None,
    manifest_url: str | None = None,
    learned: Mapping[str, Any] | None = None,
    edges: EdgePredictions | None = None,
) -> dict[str, Any]:
    """Layer-wise inference of a typed ``model`` (layers ``(block, {ntype: h}) ->
    {ntype: h}``) over a heterogeneous DistGraph, written to ``opts.output_url``: one
    output node type per type the chosen layer computes (all of one width); ``learned``
    (``{ntype: DistEmbedding}``, featureless types' learnt inputs) adds each such type's
    table rows as its ``input_embedding``; ``edges``: an edge app's head, whose target
    edge type's test-edge predictions are written too (:mod:`distgnn.train.edge_output`).
    Every trainer calls it together; returns the summary."""
    opts = opts.validate()
    typing = graph_typing(tg.g)
    if typing is None:
        raise ConfigError("hetero_infer_to_storage: the graph has one node type")
    manifest_url = manifest_url or os.environ.get(contract.ENV_MANIFEST)
    model.eval()
    steps = hl.typed_steps(model)
    if opts.embedding_layer == "hidden" and len(steps) < 2:
        raise ConfigError("--embedding-layer hidden: the model has no hidden layer")
    hidden_i = len(steps) - 2
    keep = (hidden_i,) if opts.embedding_layer == "hidden" else ()
    run = run_id(ctx)
    nodes = owned_nodes(tg, ctx.rank, ctx.world_size)
    t0 = time.monotonic()
    rows = hl.hetero_layer_pass(
        tg,
        typing,
        steps,
        hl.input_rows(tg.g, typing, opts.feat),
        nodes,
        ctx,
        run,
        opts.batch_size,
        ctx.device,
        keep,
    )
    t_compute = time.monotonic() - t0
    final_t, emb_t = rows[-1], rows[hidden_i] if opts.embedding_layer == "hidden" else rows[-1]
    assert final_t is not None and emb_t is not None
    widths = {t: int(r.t.shape[1]) for t, r in emb_t.items()}
    if len(set(widths.values())) != 1:
        raise ConfigError(f"--embedding-layer: node types have different widths {widths}")
    dim = next(iter(widths.values()))
    predict = opts.classify or opts.regress
    ntypes = sorted(set(emb_t) & set(final_t)) if predict else sorted(emb_t)
    out_dim = int(next(iter(final_t.values())).t.shape[1])
    final = hl.HomoView(typing, final_t, out_dim)
    emb = final if emb_t is final_t else hl.HomoView(typing, emb_t, dim)
    learned = {t: e for t, e in (learned or {}).items() if t in ntypes}
    written = write_shards(tg, ctx, opts, run, final, emb, manifest_url, ntypes, learned)
    edge_metrics, n_edges = None, None
    if edges is not None:
        edge_metrics = edges.write(tg, ctx, opts.output_url, run, final, manifest_url)
    barrier(ctx)
    if ctx.is_main:
        meta = {
            "graph_name": getattr(getattr(tg.g, "manifest", None), "graph_name", None),
            "embedding_layer": opts.embedding_layer,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(info or {}),
        }
        widths = {t: int(e.embedding_dim) for t, e in learned.items()}
        index = build_index(tg, opts, run, dim, meta, ntypes, widths, pred_width=out_dim)
        if edges is not None:
            index.edge_types = edges.index(tg, opts.output_url, run)
            n_edges = int(index.edge_types[edges.key]["num_edges"])
        fmt.write_index(opts.output_url, index)
        fmt.remove_stale_runs(opts.output_url, run)
    test = _test_metric(tg, opts, final_t) if ctx.is_main else None
    barrier(ctx)
    for r in {id(x): x for x in (final, emb)}.values():
        r.release()
    summary: dict[str, Any] = {} if test is None else dict([test])
    if edge_metrics is not None and ctx.is_main:  # of the written test-edge predictions
        summary |= {f"inference_test_{k}": round(v, 6) for k, v in edge_metrics.items()}
    if n_edges is not None:
        summary["inference_edges"] = n_edges
    summary |= {
        "output_url": opts.output_url,
        "inference_node_types": ntypes,
        "input_embedding_types": sorted(learned),
        "inference_seconds": round(time.monotonic() - t0, 3),
        "inference_compute_seconds": round(t_compute, 3),
    }
    log.info(
        "inference done",
        extra=kv(rank=ctx.rank, rows_written=written, output=storage.redact(opts.output_url)),
    )
    return summary


def _test_metric(
    tg: TrainGraph, opts: InferOptions, final: hl.TypedRows
) -> tuple[str, float] | None:
    """Accuracy (``inference_test_accuracy``) or RMSE (``inference_test_rmse``, node
    regression) of the predictions on ``opts.target_ntype``'s test mask (None without)."""
    tt = opts.target_ntype
    if not (opts.classify or opts.regress) or not opts.test_mask or not tt or tt not in final:
        return None
    data = tg.g.nodes[tt].data
    if opts.test_mask not in data or opts.label not in data:
        return None
    n = int(tg.g.num_nodes(tt))
    ids = np.flatnonzero(np.asarray(data[opts.test_mask][torch.arange(n)]).astype(bool))
    if ids.size == 0:
        return None
    out = final[tt].read(ids)
    labels = data[opts.label][torch.from_numpy(ids)]
    if opts.regress:
        d = out.float() - labels.float().reshape(ids.size, -1)
        return "inference_test_rmse", round(float(d.pow(2).mean().sqrt().item()), 6)
    acc = (out.argmax(1) == labels.long()).float().mean().item()
    return "inference_test_accuracy", round(float(acc), 6)
