"""Multi-layer neighbour sampling on top of any one-hop sampler.

:class:`NeighborSampler` calls a one-hop sampler (``seeds -> SampledEdges``)
once per layer, from the output layer down to the input layer, and compacts
each hop into a :class:`~distgnn.sampling.blocks.Block`. Where one-hop samples
come from (an in-memory graph, the graph servers) is the caller's choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distgnn.errors import ConfigError
from distgnn.sampling.blocks import Block, to_block

Fanout = int | Mapping[str, int]


@dataclass(frozen=True)
class Hop:
    """The edges of one sampled hop, global IDs, messages flow ``src -> dst``.

    A sampler may give ``dst_index`` (each edge's destination as a position in the
    seeds it sampled) instead of ``dst`` (None): the block builder needs no lookup then.
    """

    src: np.ndarray
    dst: np.ndarray | None
    eid: np.ndarray
    etype: np.ndarray | None = None
    dst_index: np.ndarray | None = None

    def with_dst(self, seeds: np.ndarray) -> Hop:
        """This hop with ``dst`` as global IDs (taken from ``seeds`` when not given)."""
        if self.dst is not None:
            return self
        if self.dst_index is None:
            raise ConfigError("a sampled hop needs dst or dst_index")
        return Hop(self.src, np.take(seeds, self.dst_index), self.eid, self.etype, self.dst_index)


class OneHop(Protocol):
    """Samples at most ``fanout`` in-edges (or out-edges) of every seed."""

    def __call__(
        self, seeds: np.ndarray, fanout: Fanout, *, replace: bool, prob: str | None, edge_dir: str
    ) -> Hop: ...


@dataclass(frozen=True)
class Exclusion:
    """Edges to drop from every sampled hop: by edge ID and/or by ``(src, dst)`` pair."""

    eids: np.ndarray | None = None
    pairs: tuple[np.ndarray, np.ndarray] | None = None

    def keep_mask(self, hop: Hop) -> np.ndarray:
        """Which edges of ``hop`` (with ``dst`` given) stay."""
        keep = np.ones(hop.eid.shape[0], dtype=bool)
        if self.eids is not None and self.eids.size:
            keep &= ~np.isin(hop.eid, self.eids)
        if self.pairs is not None and self.pairs[0].size:
            assert hop.dst is not None
            ps, pd = self.pairs
            width = int(max(hop.src.max(initial=0), hop.dst.max(initial=0), ps.max(), pd.max())) + 1
            keys = ps.astype(np.int64) * width + pd.astype(np.int64)
            keep &= ~np.isin(hop.src.astype(np.int64) * width + hop.dst, keys)
        return keep


class NeighborSampler:
    """DGL's ``NeighborSampler(fanouts, edge_dir='in', prob=None, mask=None, replace=False,
    ...)``, same positional order: ``fanouts[0]`` is the input layer's fanout.

    A fanout is an int (``-1`` = all neighbours; on a heterogeneous graph: per edge
    type) or a dict edge type -> int. ``prob`` names an edge-data field of non-negative
    sampling weights; ``mask`` a boolean edge field (only edges where it is true are
    candidates, uniformly). ``prefetch_*`` are not supported (features are pulled by
    the caller, see docs/dgl-migration.md); ``output_device`` moves the blocks.
    """

    def __init__(
        self,
        fanouts: Sequence[Fanout],
        edge_dir: str = "in",
        prob: str | None = None,
        mask: str | None = None,
        replace: bool = False,
        prefetch_node_feats: Any = None,
        prefetch_labels: Any = None,
        prefetch_edge_feats: Any = None,
        output_device: Any = None,
        fused: bool = True,
    ) -> None:
        if not fanouts:
            raise ConfigError("fanouts: at least one layer is needed")
        for f in fanouts:
            vals = list(f.values()) if isinstance(f, Mapping) else [f]
            if any(
                isinstance(v, bool) or not isinstance(v, int) or (v < 0 and v != -1) for v in vals
            ):
                raise ConfigError(f"fanouts: {f!r} is not a non-negative int or -1")
        if edge_dir not in ("in", "out"):
            raise ConfigError(f"edge_dir: {edge_dir!r} is not 'in' or 'out'")
        if not isinstance(replace, bool):
            raise ConfigError(f"replace: {replace!r} is not a bool")
        if prob is not None and mask is not None:
            raise ConfigError("prob and mask: give one of them")
        for name, val in (
            ("prefetch_node_feats", prefetch_node_feats),
            ("prefetch_labels", prefetch_labels),
            ("prefetch_edge_feats", prefetch_edge_feats),
        ):
            if val is not None:
                raise ConfigError(
                    f"{name}: not supported; read features with g.ndata[name][input_nodes] "
                    "(see docs/dgl-migration.md)"
                )
        self.fanouts = list(fanouts)
        self.replace = replace
        self.prob = prob if prob is not None else mask
        self.edge_dir = edge_dir
        self.output_device = output_device

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def sample_blocks(
        self, one_hop: OneHop, seeds: np.ndarray, exclude: Exclusion | None = None
    ) -> tuple[np.ndarray, np.ndarray, list[Block]]:
        """``(input_nodes, output_nodes, blocks)``; ``blocks[0]`` is the input layer."""
        output = np.asarray(seeds, dtype=np.int64)
        frontier = output
        blocks: list[Block] = []
        for fanout in reversed(self.fanouts):
            hop = one_hop(
                frontier, fanout, replace=self.replace, prob=self.prob, edge_dir=self.edge_dir
            )
            if self.edge_dir == "out":  # sampled seed -> nbr; messages flow nbr -> seed
                hop = hop.with_dst(frontier)
                assert hop.dst is not None
                hop = Hop(hop.dst, hop.src, hop.eid, hop.etype)
            if exclude is not None:
                hop = hop.with_dst(frontier) if exclude.pairs is not None else hop
                keep = exclude.keep_mask(hop)
                if not keep.all():
                    hop = Hop(
                        hop.src[keep],
                        None if hop.dst is None else hop.dst[keep],
                        hop.eid[keep],
                        None if hop.etype is None else hop.etype[keep],
                        None if hop.dst_index is None else hop.dst_index[keep],
                    )
            block = to_block(
                frontier, hop.src, hop.dst, hop.eid, hop.etype, dst_index=hop.dst_index
            )
            blocks.insert(0, block)
            frontier = block.src_nid
        return frontier, output, blocks
