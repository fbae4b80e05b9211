"""Graph attention (multi-head) on blocks."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from distgnn.nn.ops import scatter_sum, segment_softmax
from distgnn.sampling.blocks import Block


class GATConv(nn.Module):
    """GAT layer (Velickovic et al.): output shape ``(num_dst, heads, out_feats)``."""

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        num_heads: int = 1,
        feat_drop: float = 0.0,
        attn_drop: float = 0.0,
        negative_slope: float = 0.2,
        residual: bool = False,
    ) -> None:
        super().__init__()
        self.heads, self.out_feats = num_heads, out_feats
        self.fc = nn.Linear(in_feats, num_heads * out_feats, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.bias = nn.Parameter(torch.zeros(num_heads * out_feats))
        self.feat_drop, self.attn_drop = nn.Dropout(feat_drop), nn.Dropout(attn_drop)
        self.slope = negative_slope
        self.res_fc = nn.Linear(in_feats, num_heads * out_feats, bias=False) if residual else None
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        src, dst = block.edges(h.device)
        n_dst = block.num_dst_nodes
        h = self.feat_drop(h)
        feat = self.fc(h).view(-1, self.heads, self.out_feats)
        el = (feat * self.attn_l).sum(-1)
        er = (feat[:n_dst] * self.attn_r).sum(-1)
        e = F.leaky_relu(el.index_select(0, src) + er.index_select(0, dst), self.slope)
        a = self.attn_drop(segment_softmax(e, dst, n_dst))
        out = scatter_sum(feat.index_select(0, src) * a.unsqueeze(-1), dst, n_dst)
        if self.res_fc is not None:
            out = out + self.res_fc(h[:n_dst]).view(-1, self.heads, self.out_feats)
        return out + self.bias.view(1, self.heads, self.out_feats)


class GAT(nn.Module):
    """GAT stack: hidden layers concatenate heads (ELU); the last averages them."""

    def __init__(
        self,
        in_feats: int,
        hidden: int,
        out_feats: int,
        num_layers: int = 2,
        heads: int = 4,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList()
        d = in_feats
        for _ in range(num_layers - 1):
            self.layers.append(GATConv(d, hidden // heads, heads, dropout, dropout))
            d = (hidden // heads) * heads
        self.layers.append(GATConv(d, out_feats, 1, dropout, dropout))

    def forward(self, blocks: list[Block], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            h = F.elu(h.flatten(1)) if i != len(self.layers) - 1 else h.mean(1)
        return h
