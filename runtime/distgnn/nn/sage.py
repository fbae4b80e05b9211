"""GraphSAGE (mean aggregator) on blocks."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from distgnn.nn import ops
from distgnn.nn.ops import MeanAdjacency, mean_aggregate
from distgnn.sampling.blocks import Block


class SAGEConv(nn.Module):
    """``h_v' = W_self h_v + W_neigh mean_{u->v} h_u`` (DGL's ``SAGEConv(aggregator="mean")``)."""

    def __init__(self, in_feats: int, out_feats: int, bias: bool = True) -> None:
        super().__init__()
        self.fc_self = nn.Linear(in_feats, out_feats, bias=bias)
        self.fc_neigh = nn.Linear(in_feats, out_feats, bias=False)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        adj = mean_adjacency(block, h.device)
        n_dst = block.num_dst_nodes
        # project first when it shrinks the messages (as DGL does); the mean is one
        # fused sparse (CSR) matmul, no per-edge copy of the features
        h_self = self.fc_self(h[:n_dst])
        if self.fc_neigh.in_features > self.fc_neigh.out_features:
            out: torch.Tensor = h_self + mean_aggregate(adj, self.fc_neigh(h))
        else:  # fc_self(h_dst) + mean @ W_neigh^T in one addmm (no extra pass)
            out = torch.addmm(h_self, mean_aggregate(adj, h), self.fc_neigh.weight.t())
        return out


def mean_adjacency(block: Block, device: torch.device) -> MeanAdjacency:
    """The block's row-normalised adjacency (cached on the block per device)."""
    key = f"mean_adj:{device}"
    adj = block._cache.get(key)
    if adj is None:
        adj = MeanAdjacency(
            block.edge_src, block.edge_dst, block.num_src_nodes, block.num_dst_nodes, device
        )
        block._cache[key] = adj
    assert isinstance(adj, MeanAdjacency)
    return adj


class GraphSAGE(nn.Module):
    """A stack of :class:`SAGEConv` with ReLU and dropout between layers."""

    def __init__(
        self, in_feats: int, hidden: int, out_feats: int, num_layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1) + [out_feats]
        self.layers = nn.ModuleList(SAGEConv(a, b) for a, b in itertools.pairwise(dims))
        self.p = dropout

    def forward(self, blocks: list[Block], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = ops.relu_dropout(h, self.p, self.training)
        return h
