"""Layer-wise full-neighbour inference (DGL's ``model.inference(g, x, batch_size, device)``).

Every layer is computed for every node before the next one starts, each node with
all its in-neighbours (no sampling), so the cost is one pass over the edges per
layer instead of the neighbourhood explosion of a multi-layer forward pass. Each
trainer computes the nodes of its own partition (``split_even`` over the partitions'
ID ranges, as ``node_split`` does); a layer's output is kept in a :class:`Rows`
store: a named ``DistTensor`` on the graph servers for a distributed graph, a NumPy
array for an in-memory graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn import contract
from distgnn.dataloading.types import graph_typing
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.nn import GAT, GraphSAGE
from distgnn.sampling import NeighborSampler
from distgnn.sampling.blocks import Block
from distgnn.sampling.loader import prefetch
from distgnn.sampling.local import LocalGraph
from distgnn.train.ddp import DDPContext, barrier
from distgnn.train.graph import TrainGraph

log = logging.getLogger("distgnn.train")

Step = Callable[[Block, torch.Tensor], torch.Tensor]


@dataclass
class LayerWise:
    """A model as a list of per-layer steps (layer + activation) and their output widths."""

    steps: list[Step]
    dims: list[int]


def layerwise(model: nn.Module) -> LayerWise:
    """The built-in models' layers, or ``model.layerwise()`` for a model of your own."""
    own = getattr(model, "layerwise", None)
    if callable(own):
        lw = own()
        if not isinstance(lw, LayerWise):
            raise ConfigError("model.layerwise() must return a distgnn LayerWise")
        return lw
    if isinstance(model, GraphSAGE):
        n = len(model.layers)

        def sage(i: int) -> Step:
            def step(block: Block, h: torch.Tensor) -> torch.Tensor:
                y: torch.Tensor = model.layers[i](block, h)
                return torch.relu(y) if i != n - 1 else y

            return step

        convs: list[Any] = list(model.layers)
        dims = [int(c.fc_self.out_features) for c in convs]
        return LayerWise([sage(i) for i in range(n)], dims)
    if isinstance(model, GAT):
        n = len(model.layers)

        def gat(i: int) -> Step:
            def step(block: Block, h: torch.Tensor) -> torch.Tensor:
                y: torch.Tensor = model.layers[i](block, h)
                return F.elu(y.flatten(1)) if i != n - 1 else y.mean(1)

            return step

        gats: list[Any] = list(model.layers)
        heads = [(int(c.num_heads), int(c.out_feats)) for c in gats]
        dims = [h * o for h, o in heads[:-1]] + [heads[-1][1]]
        return LayerWise([gat(i) for i in range(n)], dims)
    raise ConfigError(
        f"layer-wise inference: {type(model).__name__} is not GraphSAGE or GAT and has no "
        "layerwise() method"
    )


class Rows(Protocol):
    """Rows of one layer's input or output, by (homogeneous) node ID."""

    def read(self, ids: np.ndarray) -> torch.Tensor: ...
    def write(self, ids: np.ndarray, values: torch.Tensor) -> None: ...
    def release(self) -> None: ...


class FeatureRows:
    """The input layer: a node-data field of the graph, as float32."""

    def __init__(self, tg: TrainGraph, name: str) -> None:
        self.tg, self.name = tg, name

    def read(self, ids: np.ndarray) -> torch.Tensor:
        return self.tg.read(self.name, torch.from_numpy(ids)).float()

    def write(self, ids: np.ndarray, values: torch.Tensor) -> None:
        raise ConfigError("the input features are read-only")

    def release(self) -> None:
        return None


class MemRows:
    """An in-memory layer (single process, whole graph)."""

    def __init__(self, n: int, dim: int) -> None:
        self.a = np.zeros((n, dim), dtype=np.float32)

    def read(self, ids: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self.a[ids])

    def write(self, ids: np.ndarray, values: torch.Tensor) -> None:
        self.a[ids] = values.detach().cpu().numpy()

    def release(self) -> None:
        self.a = np.zeros((0, self.a.shape[1]), dtype=np.float32)


class ServerRows:
    """Rows held on the graph servers in ``self.t``, a named, reference-counted
    ``DistTensor`` (every trainer attaches to the same name; released when no trainer
    holds it)."""

    t: Any

    def read(self, ids: np.ndarray) -> torch.Tensor:
        return self.t[ids]

    def write(self, ids: np.ndarray, values: torch.Tensor) -> None:
        self.t[ids] = values

    def release(self) -> None:
        self.t.release()


class DistRows(ServerRows):
    """A layer of a homogeneous graph held on the graph servers."""

    def __init__(self, g: Any, name: str, dim: int) -> None:
        from distgnn.distributed.tensor import DistTensor

        if len(g.ntypes) != 1:
            raise ConfigError(
                "layer-wise inference: a heterogeneous graph needs a typed model "
                "(distgnn.train.hetero_inference.hetero_infer_to_storage)"
            )
        policy = g.get_node_partition_policy(g.ntypes[0])
        self.t = DistTensor((g.num_nodes(), dim), torch.float32, name, part_policy=policy, ctx=g)


def check_shared_rows(tg: TrainGraph, world: int) -> None:
    """ConfigError when ``world`` trainers could not share the layers' rows: without
    graph servers (an in-memory or standalone graph) each trainer holds its own, so the
    rows of the other trainers' nodes would stay zero."""
    ctx = getattr(tg.g, "ctx", None)
    standalone = isinstance(tg.g, LocalGraph) or bool(getattr(ctx, "standalone", False))
    if world > 1 and standalone:
        raise ConfigError(
            f"layer-wise inference: {world} trainers without graph servers would each hold "
            "their own layers (the others' nodes' rows missing); run one trainer on "
            f"{contract.ENV_MANIFEST}, or with the job's servers ({contract.ENV_SERVERS})"
        )


def owned_nodes(tg: TrainGraph, rank: int, world: int) -> np.ndarray:
    """This trainer's nodes: its partition's ID range (``node_split(force_even=True)``)."""
    from distgnn.distributed.split import split_even

    check_shared_rows(tg, world)
    n = tg.num_nodes()
    if isinstance(tg.g, LocalGraph):
        return np.array_split(np.arange(n, dtype=np.int64), world)[rank]
    off = np.asarray(tg.g.get_partition_book().node_offsets, dtype=np.int64)
    per_part = [np.arange(off[p], off[p + 1], dtype=np.int64) for p in range(len(off) - 1)]
    return split_even(per_part, rank, world)


def rows_factory(tg: TrainGraph, run: str) -> Callable[[int, int], Rows]:
    """``make(layer, dim)``: where layer outputs live (servers, or this process)."""
    n = tg.num_nodes()

    def make(layer: int, dim: int) -> Rows:
        if isinstance(tg.g, LocalGraph):
            return MemRows(n, dim)
        return DistRows(tg.g, f"infer-{run}-h{layer}", dim)

    return make


def layer_pass(
    tg: TrainGraph,
    lw: LayerWise,
    x: Rows,
    nodes: np.ndarray,
    ctx: DDPContext,
    make: Callable[[int, int], Rows],
    batch_size: int = 4096,
    device: torch.device | None = None,
    keep: tuple[int, ...] = (),
    on_layer: Callable[[int, int, float], None] | None = None,
) -> list[Rows | None]:
    """Compute every layer for ``nodes`` (this trainer's share); returns each layer's
    rows (``None`` for layers released once the next one was done; the last layer and
    the layers in ``keep`` are kept). All trainers must call it together.
    ``on_layer(layer, layers, seconds)`` is called after each layer."""
    if batch_size < 1:
        raise ConfigError("--infer-batch-size: must be >= 1")
    dev = device or torch.device("cpu")
    sampler = NeighborSampler([-1])
    rng = np.random.default_rng(0)  # unused by full-neighbour hops; required by the API
    out: list[Rows | None] = []
    h_in = x
    last = len(lw.steps) - 1
    for li, (step, dim) in enumerate(zip(lw.steps, lw.dims, strict=True)):
        y = make(li, dim)
        t0 = time.monotonic()
        seeds = [nodes[i : i + batch_size] for i in range(0, nodes.size, batch_size)]
        src = h_in

        def load(s: np.ndarray, src: Rows = src) -> tuple[np.ndarray, Block, torch.Tensor]:
            inp, outn, blocks = sampler.sample_blocks(tg.source.one_hop(rng), s)
            return outn, blocks[0], src.read(inp)

        every = max(1, len(seeds) // 4)
        for b, (outn, block, h) in enumerate(prefetch(seeds, load)):
            with torch.no_grad():
                val = step(block, h.to(dev))
            y.write(outn, val.float().cpu())
            if (b + 1) % every == 0 and b + 1 < len(seeds):
                log.info(
                    "inference batch",
                    extra=kv(rank=ctx.rank, layer=li, batch=b + 1, batches=len(seeds)),
                )
        barrier(ctx)  # the next layer reads rows every trainer wrote
        dt = time.monotonic() - t0
        log.info(
            "inference layer",
            extra=kv(
                rank=ctx.rank,
                layer=li,
                layers=last + 1,
                nodes=int(nodes.size),
                dim=dim,
                seconds=round(dt, 3),
                nodes_per_s=round(nodes.size / max(dt, 1e-9), 1),
            ),
        )
        if on_layer is not None:
            on_layer(li, last + 1, dt)
        if li > 0 and (li - 1) not in keep:
            prev = out[li - 1]
            if prev is not None:
                prev.release()
            out[li - 1] = None
        out.append(y)
        h_in = y
    return out


def infer(
    g: Any,
    model: nn.Module,
    x: str | Rows | Mapping[str, Rows] = "feat",
    batch_size: int = 4096,
    device: torch.device | None = None,
    ctx: DDPContext | None = None,
    keep: tuple[int, ...] = (),
) -> list[Any]:
    """Layer-wise full-neighbour inference of ``model`` over ``g`` (a ``DistGraph``, a
    ``LocalGraph`` or a :class:`TrainGraph`), from the node field ``x``.

    Returns each layer's rows (see :func:`layer_pass`); ``out[-1].read(ids)`` gives the
    model's output. On a heterogeneous ``DistGraph`` each layer is a dict
    ``ntype -> rows`` read by type-wise IDs (``out[-1]["paper"].read(ids)``), the model's
    layers map ``(typed block, {ntype: h})`` to ``{ntype: h}`` and ``x`` may also be a
    dict ``ntype -> rows`` (see :mod:`distgnn.train.hetero_layerwise`). With several
    trainers every one calls it (``ctx`` defaults to the environment's rank / world size
    and the current process group).
    """
    tg = as_train_graph(g)
    ctx = ctx or default_context()
    model.eval()
    run = run_id(ctx)
    typing = None if isinstance(tg.g, LocalGraph) else graph_typing(tg.g)
    if typing is not None:
        from distgnn.train import hetero_layerwise as hl

        return hl.hetero_layer_pass(
            tg,
            typing,
            hl.typed_steps(model),
            hl.input_rows(tg.g, typing, x),
            owned_nodes(tg, ctx.rank, ctx.world_size),
            ctx,
            run,
            batch_size,
            device,
            keep,
        )
    if isinstance(x, Mapping):
        raise ConfigError("x: a dict of rows per node type needs a heterogeneous graph")
    xs = FeatureRows(tg, x) if isinstance(x, str) else x
    return layer_pass(
        tg,
        layerwise(model),
        xs,
        owned_nodes(tg, ctx.rank, ctx.world_size),
        ctx,
        rows_factory(tg, run),
        batch_size,
        device,
        keep,
    )


def run_id(ctx: DDPContext) -> str:
    """A random ID all trainers agree on (rank 0's)."""
    from distgnn.train.ddp import broadcast_int

    mine = int(np.random.default_rng().integers(0, 2**40))
    return f"{broadcast_int(ctx, mine):010x}"


def as_train_graph(g: Any) -> TrainGraph:
    if isinstance(g, TrainGraph):
        return g
    from distgnn.sampling.source import LocalSource, source_for

    if isinstance(g, LocalGraph):
        return TrainGraph(g, LocalSource(g))
    return TrainGraph(g, source_for(g))


def default_context() -> DDPContext:
    import torch.distributed as dist

    from distgnn.contract import TrainerEnv

    env = TrainerEnv.from_env()
    joined = dist.is_available() and dist.is_initialized()
    return DDPContext(env.rank, env.world_size, torch.device("cpu"), joined=joined)
