"""Relational graph convolution (R-GCN) for heterogeneous graphs on blocks.

Blocks of a heterogeneous graph carry the edge-type index of every edge
(homogeneous IDs, as DGL's distributed RGCN example uses).
"""

from __future__ import annotations

import torch
from torch import nn

from distgnn.nn.ops import scatter_sum
from distgnn.sampling.blocks import Block


class RelGraphConv(nn.Module):
    """``h_v' = W_0 h_v + sum_r sum_{u ->_r v} W_r h_u / c_{v,r}`` with optional basis sharing."""

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        num_rels: int,
        num_bases: int | None = None,
        self_loop: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_rels, self.out_feats = num_rels, out_feats
        nb = num_bases if num_bases and num_bases < num_rels else None
        if nb is None:
            self.weight = nn.Parameter(torch.empty(num_rels, in_feats, out_feats))
            self.coeff = None
        else:
            self.weight = nn.Parameter(torch.empty(nb, in_feats, out_feats))
            self.coeff = nn.Parameter(torch.empty(num_rels, nb))
            nn.init.xavier_uniform_(self.coeff)
        nn.init.xavier_uniform_(self.weight, gain=nn.init.calculate_gain("relu"))
        self.loop = nn.Linear(in_feats, out_feats, bias=False) if self_loop else None
        self.bias = nn.Parameter(torch.zeros(out_feats)) if bias else None

    def rel_weights(self) -> torch.Tensor:
        if self.coeff is None:
            return self.weight
        return torch.einsum("rb,bio->rio", self.coeff, self.weight)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        src, dst = block.edges(h.device)
        et = block.etypes(h.device)
        n_dst = block.num_dst_nodes
        w = self.rel_weights()
        # normalise by the in-degree per (destination, relation)
        key = dst * self.num_rels + et
        cnt = torch.bincount(key, minlength=n_dst * self.num_rels).clamp_(min=1)
        norm = (1.0 / cnt.to(h.dtype)).index_select(0, key).unsqueeze(1)
        msg = h.new_zeros((src.shape[0], self.out_feats))
        for r in range(self.num_rels):  # loop over relation types, not nodes
            sel = torch.nonzero(et == r, as_tuple=True)[0]
            if sel.numel():
                msg = msg.index_copy(0, sel, h.index_select(0, src[sel]) @ w[r])
        out = scatter_sum(msg * norm, dst, n_dst)
        if self.loop is not None:
            out = out + self.loop(h[:n_dst])
        if self.bias is not None:
            out = out + self.bias
        return out
