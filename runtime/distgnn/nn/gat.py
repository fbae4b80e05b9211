"""Graph attention (DGL's ``GATConv``, multi-head) on blocks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from distgnn.nn.ops import scatter_sum, segment_softmax
from distgnn.nn.utils import check_in_degree, edges_of, pair
from distgnn.sampling.blocks import Block


class GATConv(nn.Module):
    """GAT layer (Velickovic et al.), DGL's signature; output ``(num_dst, heads, out_feats)``.

    ``in_feats`` may be a pair ``(src, dst)`` (separate source and destination
    projections ``fc_src``/``fc_dst``); ``forward(graph, feat, edge_weight=None,
    get_attention=False)`` takes one tensor or ``(h_src, h_dst)``.
    """

    def __init__(
        self,
        in_feats: int | tuple[int, int],
        out_feats: int,
        num_heads: int,
        feat_drop: float = 0.0,
        attn_drop: float = 0.0,
        negative_slope: float = 0.2,
        residual: bool = False,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
        allow_zero_in_degree: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self._num_heads, self._out_feats = num_heads, out_feats
        self._in_src_feats, self._in_dst_feats = pair(in_feats)
        self._allow_zero_in_degree = allow_zero_in_degree
        self._pair = isinstance(in_feats, tuple)
        hd = num_heads * out_feats
        if self._pair:
            self.fc_src = nn.Linear(self._in_src_feats, hd, bias=False)
            self.fc_dst = nn.Linear(self._in_dst_feats, hd, bias=False)
        else:
            self.fc = nn.Linear(self._in_src_feats, hd, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.feat_drop, self.attn_drop = nn.Dropout(feat_drop), nn.Dropout(attn_drop)
        self.negative_slope = negative_slope
        self.bias = nn.Parameter(torch.zeros(hd)) if bias else None
        self.res_fc: nn.Module | None = None
        if residual:
            self.res_fc = (
                nn.Identity()
                if self._in_dst_feats == hd
                else nn.Linear(self._in_dst_feats, hd, bias=False)
            )
        self.activation = activation
        gain = nn.init.calculate_gain("relu")
        for lin in ("fc", "fc_src", "fc_dst"):
            if hasattr(self, lin):
                nn.init.xavier_normal_(getattr(self, lin).weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        if isinstance(self.res_fc, nn.Linear):
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)

    @property
    def num_heads(self) -> int:
        return self._num_heads

    @property
    def out_feats(self) -> int:
        return self._out_feats

    def forward(
        self,
        graph: Any,
        feat: Any,
        edge_weight: torch.Tensor | None = None,
        get_attention: bool = False,
    ) -> Any:
        heads, d = self._num_heads, self._out_feats
        if isinstance(feat, tuple):
            h_src, h_dst = self.feat_drop(feat[0]), self.feat_drop(feat[1])
            fs = self.fc_src if self._pair else self.fc
            fd = self.fc_dst if self._pair else self.fc
            f_src, f_dst = fs(h_src).view(-1, heads, d), fd(h_dst).view(-1, heads, d)
        else:
            h_src = self.feat_drop(feat)
            f_src = (self.fc_src if self._pair else self.fc)(h_src).view(-1, heads, d)
            n_dst = graph.num_dst_nodes() if getattr(graph, "is_block", False) else h_src.shape[0]
            h_dst, f_dst = h_src[:n_dst], f_src[:n_dst]
        src, dst = edges_of(graph, f_src.device)
        check_in_degree(graph, dst, self._allow_zero_in_degree, "GATConv")
        n_dst = graph.num_dst_nodes()
        el = (f_src * self.attn_l).sum(-1)
        er = (f_dst * self.attn_r).sum(-1)
        e = F.leaky_relu(el.index_select(0, src) + er.index_select(0, dst), self.negative_slope)
        a = segment_softmax(e, dst, n_dst)
        if edge_weight is not None:
            a = a * edge_weight.view(-1, 1)
        a = self.attn_drop(a)
        out = scatter_sum(f_src.index_select(0, src) * a.unsqueeze(-1), dst, n_dst)
        if self.res_fc is not None:
            out = out + self.res_fc(h_dst).view(h_dst.shape[0], heads, d)
        if self.bias is not None:
            out = out + self.bias.view(1, heads, d)
        if self.activation is not None:
            out = self.activation(out)
        return (out, a) if get_attention else out


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
            self.layers.append(
                GATConv(d, hidden // heads, heads, dropout, dropout, allow_zero_in_degree=True)
            )
            d = (hidden // heads) * heads
        self.layers.append(GATConv(d, out_feats, 1, dropout, dropout, allow_zero_in_degree=True))

    def forward(self, blocks: list[Block], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            h = F.elu(h.flatten(1)) if i != len(self.layers) - 1 else h.mean(1)
        return h
