"""GCN (DGL's ``GraphConv``) on blocks and bipartite relation graphs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.nn.utils import check_in_degree, edges_of, expand_as_pair, sum_into_dst

NORMS = ("none", "both", "right", "left")


class GraphConv(nn.Module):
    """``h_v' = b + sum_{u->v} h_u W / c_uv``; ``norm``: ``both`` (``sqrt(out_deg(u)
    in_deg(v))``), ``right`` (``in_deg(v)``: the mean), ``left`` (``out_deg(u)``), ``none``.

    ``forward(graph, feat, weight=None, edge_weight=None)``: ``weight`` is an external
    weight for a layer built with ``weight=False`` (as R-GCN passes per relation).
    """

    def __init__(
        self,
        in_feats: int,
        out_feats: int,
        norm: str = "both",
        weight: bool = True,
        bias: bool = True,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
        allow_zero_in_degree: bool = False,
    ) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ConfigError(f"norm: {norm!r} is not one of {', '.join(NORMS)}")
        self._in_feats, self._out_feats, self._norm = in_feats, out_feats, norm
        self._allow_zero_in_degree = allow_zero_in_degree
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats)) if weight else None
        self.bias = nn.Parameter(torch.zeros(out_feats)) if bias else None
        self.activation = activation
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)

    def forward(
        self,
        graph: Any,
        feat: Any,
        weight: torch.Tensor | None = None,
        edge_weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h_src, _ = expand_as_pair(feat, graph)
        src, dst = edges_of(graph, h_src.device)
        check_in_degree(graph, dst, self._allow_zero_in_degree, "GraphConv")
        if weight is not None and self.weight is not None:
            raise ConfigError(
                "GraphConv: an external weight was given to a layer with its own weight "
                "(create it with weight=False)"
            )
        w = self.weight if weight is None else weight
        if self._norm in ("both", "left"):
            out_deg = torch.bincount(src, minlength=h_src.shape[0]).clamp(min=1).to(h_src.dtype)
            scale = out_deg.pow(-0.5) if self._norm == "both" else 1.0 / out_deg
            h_src = h_src * scale.view(-1, *([1] * (h_src.dim() - 1)))
        if w is not None and self._in_feats > self._out_feats:
            h_src, w = h_src @ w, None  # project first: smaller messages
        msg = h_src.index_select(0, src)
        if edge_weight is not None:
            msg = msg * edge_weight.view(-1, *([1] * (msg.dim() - 1)))
        out = sum_into_dst(graph, msg, dst)
        if w is not None:
            out = out @ w
        if self._norm in ("both", "right"):
            in_deg = torch.bincount(dst, minlength=graph.num_dst_nodes()).clamp(min=1)
            in_deg = in_deg.to(out.dtype)
            scale = in_deg.pow(-0.5) if self._norm == "both" else 1.0 / in_deg
            out = out * scale.view(-1, *([1] * (out.dim() - 1)))
        if self.bias is not None:
            out = out + self.bias
        if self.activation is not None:
            out = self.activation(out)
        return out
