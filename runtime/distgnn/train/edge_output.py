"""The edge apps' inference output: a prediction for each test edge, written beside the
nodes' embeddings, as GraphStorm writes its edge tasks' predictions (the test edges,
with their source and destination node IDs).

For the edges of ``--test-mask`` (edge data), ``pred`` is the head's output on the two
endpoints' final embeddings (the layer-wise pass's last layer: the encoder's output):
the argmax class and its softmax ``prob`` (``edge-classification``) or the predicted
target, float32 (``edge-regression``). ``src_id`` / ``dst_id`` are the endpoints'
original node IDs and ``edge_id`` the edge's original ID (its row in the input graph's
edge arrays). Shards are per partition (the edges a partition holds), written by rank
``p % world_size``, under ``run-RUN/_E/part-P/`` in the format of
:mod:`distgnn.train.infer_output`, listed under the index's ``edge_types``. On a
heterogeneous graph (``--model rgcn --target-etype SRC:REL:DST``) the edges are the
target edge type's, the IDs its type-wise original IDs (the endpoints' of their node
types), the folder and the ``edge_types`` key the canonical edge type ``SRC:REL:DST``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from distgnn import contract
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.npy import ShardWriter
from distgnn.sampling.blocks import CanonicalEtype
from distgnn.sampling.local import LocalGraph
from distgnn.train import infer_output as fmt
from distgnn.train.config import TEST_MASK
from distgnn.train.ddp import DDPContext, all_reduce
from distgnn.train.edge_classification import pair_outputs
from distgnn.train.graph import TrainGraph
from distgnn.train.layerwise import Rows
from distgnn.train.objective import Objective, add

log = logging.getLogger("distgnn.train")
ETYPE = "_E"
"""the edge type's name in the output (DGL's default edge type)"""
CHUNK = 1 << 16
IDS = ("src_id", "dst_id", "edge_id")


def pred_specs(regress: bool, width: int = 1) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The prediction arrays and their per-row dtype and shape: ``pred`` float32 (``()``
    or ``(width,)``) for a regression, ``pred`` int64 and ``prob`` float32 for classes."""
    if regress:
        return {"pred": (np.dtype(np.float32), () if width == 1 else (width,))}
    return {"pred": (np.dtype(np.int64), ()), "prob": (np.dtype(np.float32), ())}


def predictions(out: torch.Tensor, regress: bool) -> dict[str, np.ndarray]:
    """Rows of model output -> the arrays of :func:`pred_specs`."""
    out = out.detach().float()
    if regress:
        a = out.cpu().numpy()
        return {"pred": a[:, 0] if a.shape[1] == 1 else a}
    prob, pred = torch.softmax(out, dim=1).max(dim=1)
    return {"pred": pred.cpu().numpy(), "prob": prob.cpu().numpy()}


def array_specs(specs: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> dict[str, Any]:
    """The index's ``arrays`` entry of per-row specs."""
    return {a: {"dtype": dt.name, "shape": list(shape)} for a, (dt, shape) in specs.items()}


class OrigIds:
    """New (partitioned) node and edge IDs -> the input graph's, from the partitions'
    ``graph/orig_nid.npy`` / ``orig_eid.npy``, each read once when first needed. An
    in-memory graph's IDs are the original ones."""

    def __init__(self, tg: TrainGraph, manifest_url: str | None) -> None:
        self.man = None if isinstance(tg.g, LocalGraph) else tg.g.manifest
        if self.man is not None and not manifest_url:
            raise ConfigError(f"{contract.ENV_MANIFEST}: needed to map IDs to original IDs")
        self.url = manifest_url or ""
        self.arrays: dict[tuple[str, int], np.ndarray] = {}

    def nodes(self, ids: np.ndarray) -> np.ndarray:
        return self._map(ids, "graph/orig_nid.npy", "node_offsets")

    def edges(self, ids: np.ndarray) -> np.ndarray:
        return self._map(ids, "graph/orig_eid.npy", "edge_offsets")

    def _map(self, ids: np.ndarray, rel: str, offsets_name: str) -> np.ndarray:
        if self.man is None:
            return ids.astype(np.int64)
        from distgnn.partition.loader import read_part_array

        offsets = np.asarray(getattr(self.man, offsets_name), dtype=np.int64)
        part = np.searchsorted(offsets, ids, side="right") - 1
        out = np.empty(ids.shape, dtype=np.int64)
        for p in np.unique(part).tolist():
            if (rel, p) not in self.arrays:
                self.arrays[rel, p] = read_part_array(self.url, self.man, p, rel)
            sel = part == p
            out[sel] = self.arrays[rel, p][ids[sel] - offsets[p]]
        return out


class Edges:
    """The edges of a homogeneous graph: new IDs, endpoints, original IDs and edge data."""

    def __init__(self, tg: TrainGraph, ids: OrigIds) -> None:
        self.tg, self.ids = tg, ids

    def has(self, name: str) -> bool:
        return name in self.tg.edge_field_names()

    def by_part(self, mask: str) -> list[tuple[int, np.ndarray]]:
        """The edges of ``mask`` in each partition (the IDs the other methods take)."""
        self.tg.require_edges({TEST_MASK: mask})
        test = self.tg.edge_mask_ids(mask)
        return [(p, test[(test >= lo) & (test < hi)]) for p, lo, hi in edge_parts(self.tg)]

    def ends(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The endpoints' (new, homogeneous) node IDs: the rows of the node output."""
        src, dst = self.tg.source.find_edges(eids)
        return np.asarray(src, np.int64), np.asarray(dst, np.int64)

    def original(self, src: np.ndarray, dst: np.ndarray, eids: np.ndarray) -> dict[str, Any]:
        return {"src_id": self.ids.nodes(src), "dst_id": self.ids.nodes(dst)} | {
            "edge_id": self.ids.edges(eids)
        }

    def labels(self, name: str, eids: np.ndarray) -> torch.Tensor:
        return self.tg.read_edges(name, torch.from_numpy(eids))


class TypedEdges(Edges):
    """The edges of one edge type of a heterogeneous graph (type-wise IDs); original IDs
    type-wise, as the input graph numbers each type's nodes and edges."""

    def __init__(self, tg: TrainGraph, ids: OrigIds, etype: CanonicalEtype) -> None:
        from distgnn.dataloading.types import graph_typing

        super().__init__(tg, ids)
        typing = graph_typing(tg.g)
        assert typing is not None
        self.typing, self.etype, self.data = typing, etype, tg.g.edges[etype].data
        man = tg.g.manifest
        node_off = np.cumsum([0] + [int(man.ntype_offsets[t][-1]) for t in man.node_types])
        edge_off = np.cumsum([0] + [int(man.etype_offsets[e][-1]) for e in man.etype_names])
        self.src_off = int(node_off[man.node_types.index(etype[0])])
        self.dst_off = int(node_off[man.node_types.index(etype[2])])
        self.edge_off = int(edge_off[man.etype_names.index(":".join(etype))])

    def has(self, name: str) -> bool:
        return name in self.data

    def by_part(self, mask: str) -> list[tuple[int, np.ndarray]]:
        from distgnn.train.typed import edge_mask_ids

        if mask not in self.data:
            raise ConfigError(
                f"{TEST_MASK}: edge type {':'.join(self.etype)!r} has no field {mask!r}"
            )
        test = edge_mask_ids(self.tg.g, self.etype, mask)
        homo = self.typing.homo_eids({self.etype: test})
        off = [int(x) for x in self.tg.g.manifest.edge_offsets]
        part = np.searchsorted(np.asarray(off), homo, side="right") - 1
        return [(p, test[part == p]) for p in range(len(off) - 1)]

    def ends(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, d = self.tg.g.find_edges(torch.from_numpy(eids), etype=self.etype)
        src = self.typing.homo_seeds({self.etype[0]: np.asarray(s, np.int64)})
        return src, self.typing.homo_seeds({self.etype[2]: np.asarray(d, np.int64)})

    def original(self, src: np.ndarray, dst: np.ndarray, eids: np.ndarray) -> dict[str, Any]:
        homo = self.typing.homo_eids({self.etype: eids})
        return {
            "src_id": self.ids.nodes(src) - self.src_off,
            "dst_id": self.ids.nodes(dst) - self.dst_off,
            "edge_id": self.ids.edges(homo) - self.edge_off,
        }

    def labels(self, name: str, eids: np.ndarray) -> torch.Tensor:
        out = self.data[name][torch.from_numpy(eids)]
        return out if isinstance(out, torch.Tensor) else torch.as_tensor(out)


@dataclass
class EdgePredictions:
    """What the edge apps' inference adds: their head and objective, and the test mask
    and label (edge data) it predicts and measures."""

    head: nn.Module
    width: int
    """the head's outputs: classes, or a regression's targets per edge"""
    objective: Objective
    test_mask: str | None
    label: str
    etype: CanonicalEtype | None = None
    """a heterogeneous graph's target edge type (None: the graph's only one)"""

    @property
    def key(self) -> str:
        """The edge type's name in the output: ``_E``, or ``SRC:REL:DST``."""
        return ":".join(self.etype) if self.etype else ETYPE

    def edges(self, tg: TrainGraph, manifest_url: str | None) -> Edges:
        ids = OrigIds(tg, manifest_url)
        return Edges(tg, ids) if self.etype is None else TypedEdges(tg, ids, self.etype)

    @property
    def specs(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        ids = {a: (np.dtype(np.int64), ()) for a in IDS}
        return ids | pred_specs(self.objective.regression, self.width)

    def write(
        self,
        tg: TrainGraph,
        ctx: DDPContext,
        output_url: str,
        run: str,
        final: Rows,
        manifest_url: str | None,
    ) -> dict[str, float] | None:
        """Write this rank's partitions' shards (every rank calls it); returns the
        objective's metrics of the written predictions on all test edges (None without
        the label)."""
        if not self.test_mask:
            raise ConfigError(f"{TEST_MASK}: the edge apps' inference predicts the test edges")
        edges = self.edges(tg, manifest_url)
        labelled = edges.has(self.label)
        sums = (0.0, 0.0, 0.0)
        for p, eids in edges.by_part(self.test_mask):
            if p % ctx.world_size != ctx.rank:
                continue
            t0 = time.monotonic()
            files, s = self._write_part(output_url, run, p, eids, final, edges, labelled)
            sums = add(sums, s)
            rec = {"etype": self.key, "part": p, "rows": int(eids.size), "files": files}
            fmt.write_shard_record(output_url, run, self.key, p, rec)
            log.info(
                "inference edge shard written",
                extra=kv(
                    rank=ctx.rank,
                    etype=self.key,
                    part=p,
                    rows=int(eids.size),
                    seconds=round(time.monotonic() - t0, 3),
                ),
            )
        total = all_reduce(ctx, list(sums))
        return self.objective.measure((total[0], total[1], total[2])) if labelled else None

    @torch.no_grad()
    def _write_part(
        self,
        output_url: str,
        run: str,
        part: int,
        eids: np.ndarray,
        final: Rows,
        edges: Edges,
        labelled: bool,
    ) -> tuple[dict[str, dict[str, Any]], tuple[float, float, float]]:
        n = int(eids.size)
        writers = {
            a: ShardWriter(output_url, fmt.shard_path(run, self.key, part, a), dt, (n, *shape))
            for a, (dt, shape) in self.specs.items()
        }
        device = next(self.head.parameters()).device
        sums = (0.0, 0.0, 0.0)
        try:
            for lo in range(0, n, CHUNK):
                chunk = eids[lo : lo + CHUNK]
                src, dst = edges.ends(chunk)
                hu, hv = final.read(src).float().to(device), final.read(dst).float().to(device)
                out = pair_outputs(self.head, hu, hv).float()
                cols = edges.original(src, dst, chunk)
                cols |= predictions(out, self.objective.regression)
                for a, w in writers.items():
                    w.write(cols[a])
                if labelled:
                    y = self.objective.target(edges.labels(self.label, chunk))
                    sums = add(sums, self.objective.sums(out, y.to(device)))
            return {a: vars(w.close()) for a, w in writers.items()}, sums
        except BaseException:
            for w in writers.values():
                w.abort()
            raise

    def index(self, tg: TrainGraph, output_url: str, run: str) -> dict[str, Any]:
        """Rank 0: the index's ``edge_types`` entry from every shard's record."""
        shards = []
        for p, _lo, _hi in edge_parts(tg):
            rec = fmt.read_shard_record(output_url, run, self.key, p)
            shards.append({"part": p, "rows": int(rec["rows"]), "files": rec["files"]})
        entry = {
            "num_edges": sum(s["rows"] for s in shards),
            "edges": self.test_mask,
            "arrays": array_specs(self.specs),
            "shards": shards,
        }
        return {self.key: entry}


def edge_parts(tg: TrainGraph) -> list[tuple[int, int, int]]:
    """``(partition, first, end)``: the new edge IDs each partition holds."""
    if isinstance(tg.g, LocalGraph):
        return [(0, 0, tg.num_edges())]
    off = [int(x) for x in tg.g.manifest.edge_offsets]
    return [(p, off[p], off[p + 1]) for p in range(len(off) - 1)]
