"""Layer-wise full-neighbour inference on heterogeneous graphs (DGL's R-GCN ``inference``).

The model's layers map a typed block and a dict ``ntype -> features`` to a dict
``ntype -> features`` (a ``HeteroGraphConv``, or a layer wrapping one as in the R-GCN
example). Each trainer computes its partition's nodes (every node type) batch by
batch: one full-neighbour hop on homogeneous IDs, typed through the partition book,
the previous layer's rows pulled per source type, the layer applied, the rows pushed
per destination type into a named ``DistTensor`` per node type (``infer-RUN-hL-NTYPE``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn.dataloading.types import GraphTyping
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.sampling import NeighborSampler
from distgnn.sampling.blocks import Block, BlockTypes
from distgnn.sampling.loader import prefetch
from distgnn.train.ddp import DDPContext, barrier
from distgnn.train.graph import TrainGraph
from distgnn.train.layerwise import ServerRows

log = logging.getLogger("distgnn.train")

TypedStep = Callable[[Block, dict[str, torch.Tensor]], dict[str, torch.Tensor]]
TypedRows = dict[str, Any]  # ntype -> Rows (type-wise IDs)


def typed_steps(model: nn.Module) -> list[TypedStep]:
    """``model.layerwise().steps`` or the model's ``layers``, each ``(block, dict) -> dict``."""
    own = getattr(model, "layerwise", None)
    if callable(own):
        return list(own().steps)
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) > 0:
        return [_module_step(m) for m in layers]
    raise ConfigError(
        f"layer-wise inference: {type(model).__name__} has no layers (ModuleList) and no "
        "layerwise() method"
    )


def _module_step(m: nn.Module) -> TypedStep:
    def step(block: Block, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = m(block, h)
        return out

    return step


class TypeFeatureRows:
    """A node field of one node type of a DistGraph (type-wise IDs), as float32."""

    def __init__(self, g: Any, ntype: str, name: str) -> None:
        self.t = g.nodes[ntype].data[name]

    def read(self, ids: np.ndarray) -> torch.Tensor:
        out = self.t[torch.from_numpy(ids)]
        return (out if isinstance(out, torch.Tensor) else torch.as_tensor(out)).float()

    def write(self, ids: np.ndarray, values: torch.Tensor) -> None:
        raise ConfigError("the input features are read-only")

    def release(self) -> None:
        return None


class TypeDistRows(ServerRows):
    """One layer's rows of one node type on the servers (named, reference-counted)."""

    def __init__(self, g: Any, ntype: str, name: str, dim: int) -> None:
        from distgnn.distributed.tensor import DistTensor

        policy = g.get_node_partition_policy(ntype)
        shape = (g.num_nodes(ntype), dim)
        self.t = DistTensor(shape, torch.float32, name, part_policy=policy, ctx=g)


class HomoView:
    """Typed rows read by homogeneous (new) IDs, for the output writer (all types of
    width ``dim``; a type without rows reads as zeros, the writer skips such types)."""

    def __init__(self, typing: GraphTyping, rows: TypedRows, dim: int) -> None:
        self.typing, self.rows, self.dim = typing, rows, dim

    def read(self, ids: np.ndarray) -> torch.Tensor:
        t, tid = self.typing.map_nids(np.asarray(ids, dtype=np.int64))
        out = torch.zeros((t.size, self.dim), dtype=torch.float32)
        for i, name in enumerate(self.typing.ntypes):
            m = t == i
            if m.any() and name in self.rows:
                out[torch.from_numpy(np.flatnonzero(m))] = self.rows[name].read(tid[m]).float()
        return out

    def write(self, ids: np.ndarray, values: torch.Tensor) -> None:
        raise ConfigError("a typed layer is written per node type")

    def release(self) -> None:
        for r in self.rows.values():
            r.release()


def probe_block(types: BlockTypes) -> Block:
    """One node per type, one edge per relation: finds a layer's output types and widths."""
    k, cets = len(types.ntypes), list(types.canonical_etypes)
    ix = {t: i for i, t in enumerate(types.ntypes)}
    e = len(cets)
    return Block(
        src_nid=np.arange(k, dtype=np.int64),
        dst_nid=np.arange(k, dtype=np.int64),
        edge_src=np.array([ix[c[0]] for c in cets], dtype=np.int64),
        edge_dst=np.array([ix[c[2]] for c in cets], dtype=np.int64),
        eid=np.arange(e, dtype=np.int64),
        etype=np.arange(e, dtype=np.int64),
        types=types,
        src_type=np.arange(k, dtype=np.int64),
        src_tid=np.zeros(k, dtype=np.int64),
        etid=np.zeros(e, dtype=np.int64),
    )


def out_widths(step: TypedStep, types: BlockTypes, widths: Mapping[str, int]) -> dict[str, int]:
    """The output node types and widths of ``step`` given input widths per type."""
    h = {t: torch.zeros(1, w) for t, w in widths.items()}
    with torch.no_grad():
        y = step(probe_block(types), h)
    return {t: int(v.reshape(v.shape[0], -1).shape[1]) for t, v in y.items()}


def hetero_layer_pass(
    tg: TrainGraph,
    typing: GraphTyping,
    steps: list[TypedStep],
    x: TypedRows,
    nodes: np.ndarray,
    ctx: DDPContext,
    run: str,
    batch_size: int = 4096,
    device: torch.device | None = None,
    keep: tuple[int, ...] = (),
) -> list[TypedRows | None]:
    """Every layer for ``nodes`` (homogeneous IDs, this trainer's share); each layer's
    rows per node type (hidden ones released as in ``layer_pass``)."""
    if batch_size < 1:
        raise ConfigError("--infer-batch-size: must be >= 1")
    dev = device or torch.device("cpu")
    sampler = NeighborSampler([-1])
    rng = np.random.default_rng(0)
    g = tg.g
    widths = {t: int(r.read(np.zeros(1, dtype=np.int64)).shape[1]) for t, r in x.items()}
    out: list[TypedRows | None] = []
    h_in = x
    for li, step in enumerate(steps):
        dims = out_widths(step, typing.types, widths)
        if not dims:
            raise ConfigError(f"layer-wise inference: layer {li} gives no node type an output")
        y: TypedRows = {
            t: TypeDistRows(g, t, f"infer-{run}-h{li}-{t}", d) for t, d in sorted(dims.items())
        }
        t0 = time.monotonic()
        seeds = [nodes[i : i + batch_size] for i in range(0, nodes.size, batch_size)]
        src = h_in

        def load(s: np.ndarray, src: TypedRows = src) -> tuple[Block, dict[str, torch.Tensor]]:
            _inp, _out, blocks = sampler.sample_blocks(tg.source.one_hop(rng), s)
            b = typing.type_block(blocks[0])
            assert b.src_type is not None and b.src_tid is not None
            h = {
                t: src[t].read(b.src_tid[b.src_type == i])
                for i, t in enumerate(typing.ntypes)
                if t in src and bool((b.src_type == i).any())
            }
            return b, h

        for b, h in prefetch(seeds, load):
            assert b.src_type is not None and b.src_tid is not None
            with torch.no_grad():
                val = step(b.to(dev), {t: v.to(dev) for t, v in h.items()})
            nd = b.dst_nid.shape[0]
            for i, t in enumerate(typing.ntypes):
                m = b.src_type[:nd] == i
                if t in val and t in y and m.any():
                    y[t].write(b.src_tid[:nd][m], val[t].float().cpu().reshape(int(m.sum()), -1))
        barrier(ctx)  # the next layer reads rows every trainer wrote
        dt = time.monotonic() - t0
        log.info(
            "inference layer",
            extra=kv(
                rank=ctx.rank,
                layer=li,
                layers=len(steps),
                nodes=int(nodes.size),
                dims=dims,
                seconds=round(dt, 3),
                nodes_per_s=round(nodes.size / max(dt, 1e-9), 1),
            ),
        )
        if li > 0 and (li - 1) not in keep:
            prev = out[li - 1]
            for r in (prev or {}).values():
                r.release()
            out[li - 1] = None
        out.append(y)
        h_in, widths = y, dims
    return out


def input_rows(g: Any, typing: GraphTyping, x: Any) -> TypedRows:
    """The input layer per node type: the node field ``x`` where a type has it, or the
    given ``ntype -> Rows``."""
    if isinstance(x, Mapping):
        return dict(x)
    if not isinstance(x, str):
        raise ConfigError("x: a heterogeneous graph takes a field name or a dict ntype -> rows")
    rows = {t: TypeFeatureRows(g, t, x) for t in typing.ntypes if x in g.nodes[t].data}
    if not rows:
        raise ConfigError(f"x: no node type has the field {x!r}")
    return rows
