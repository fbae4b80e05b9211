"""GraphSAGE (mean aggregator) on blocks."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from distgnn.nn import ops
from distgnn.nn.ops import scatter_mean
from distgnn.sampling.blocks import Block


class SAGEConv(nn.Module):
    """``h_v' = W_self h_v + W_neigh mean_{u->v} h_u`` (DGL's ``SAGEConv(aggregator="mean")``)."""

    def __init__(self, in_feats: int, out_feats: int, bias: bool = True) -> None:
        super().__init__()
        self.fc_self = nn.Linear(in_feats, out_feats, bias=bias)
        self.fc_neigh = nn.Linear(in_feats, out_feats, bias=False)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        src, dst = block.edges(h.device)
        n_dst = block.num_dst_nodes
        # project first when it shrinks the messages (as DGL does)
        if self.fc_neigh.in_features > self.fc_neigh.out_features:
            neigh = scatter_mean(self.fc_neigh(h).index_select(0, src), dst, n_dst)
        else:
            neigh = self.fc_neigh(scatter_mean(h.index_select(0, src), dst, n_dst))
        out: torch.Tensor = self.fc_self(h[:n_dst]) + neigh
        return out


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
                h = ops.dropout(torch.relu(h), self.p, self.training)
        return h
