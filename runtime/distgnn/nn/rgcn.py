"""Relational graph convolution (DGL's ``RelGraphConv``) on homogeneous-ID blocks.

The block's edges carry their relation (edge-type index); messages ``W_r h_u`` are
summed at the destinations (times ``norm`` when given), as in DGL. For typed blocks,
:class:`~distgnn.nn.hetero.HeteroGraphConv` with one module per relation is the other way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.nn.ops import scatter_sum
from distgnn.nn.utils import edges_of

REGULARIZERS = (None, "basis", "bdd")


class RelGraphConv(nn.Module):
    """``h_v' = act(sum_r sum_{u ->_r v} norm_e W_r h_u + b + W_0 h_v)``, then dropout.

    ``regularizer``: ``None`` (one weight per relation), ``"basis"`` (``num_bases`` shared
    bases) or ``"bdd"`` (block-diagonal, ``num_bases`` blocks). ``forward(g, feat, etypes,
    norm=None)``: ``etypes`` is each edge's relation (a tensor), ``norm`` an optional
    ``(E, 1)`` edge normaliser.
    """

    def __init__(
        self,
        in_feat: int,
        out_feat: int,
        num_rels: int,
        regularizer: str | None = None,
        num_bases: int | None = None,
        bias: bool = True,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
        self_loop: bool = True,
        dropout: float = 0.0,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if regularizer not in REGULARIZERS:
            raise ConfigError(f"regularizer: {regularizer!r} is not None, 'basis' or 'bdd'")
        if regularizer is not None and num_bases is None:
            num_bases = num_rels
        self.in_feat, self.out_feat, self.num_rels = in_feat, out_feat, num_rels
        self.regularizer, self.num_bases = regularizer, num_bases
        gain = nn.init.calculate_gain("relu")
        self.coeff: nn.Parameter | None = None
        if regularizer == "bdd":
            nb = int(num_bases or 1)
            if in_feat % nb or out_feat % nb:
                raise ConfigError(
                    f"num_bases: {nb} must divide in_feat ({in_feat}) and out_feat ({out_feat})"
                )
            self.weight = nn.Parameter(torch.empty(num_rels, nb, in_feat // nb, out_feat // nb))
        elif regularizer == "basis" and int(num_bases or num_rels) < num_rels:
            self.weight = nn.Parameter(torch.empty(int(num_bases or 1), in_feat, out_feat))
            self.coeff = nn.Parameter(torch.empty(num_rels, int(num_bases or 1)))
            nn.init.xavier_uniform_(self.coeff, gain=gain)
        else:
            self.weight = nn.Parameter(torch.empty(num_rels, in_feat, out_feat))
        nn.init.xavier_uniform_(self.weight, gain=gain)
        self.h_bias = nn.Parameter(torch.zeros(out_feat)) if bias else None
        self.loop_weight: nn.Parameter | None = None
        if self_loop:
            self.loop_weight = nn.Parameter(torch.empty(in_feat, out_feat))
            nn.init.xavier_uniform_(self.loop_weight, gain=gain)
        self.layer_norm = nn.LayerNorm(out_feat, elementwise_affine=True) if layer_norm else None
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    def rel_weights(self) -> torch.Tensor:
        """``(num_rels, in_feat, out_feat)`` (block-diagonal weights expanded for ``bdd``)."""
        if self.regularizer == "bdd":
            return torch.stack([torch.block_diag(*w) for w in self.weight])
        if self.coeff is None:
            return self.weight
        return torch.einsum("rb,bio->rio", self.coeff, self.weight)

    def forward(
        self,
        g: Any,
        feat: torch.Tensor,
        etypes: Any = None,
        norm: torch.Tensor | None = None,
        *,
        presorted: bool = False,
    ) -> torch.Tensor:
        src, dst = edges_of(g, feat.device)
        if etypes is None:
            et = g.etypes_tensor(feat.device)
        elif isinstance(etypes, torch.Tensor):
            et = etypes.to(feat.device).long()
        else:  # presorted: a list of per-relation edge counts
            et = torch.repeat_interleave(
                torch.arange(len(etypes), device=feat.device),
                torch.as_tensor(list(etypes), device=feat.device),
            )
        if et.numel() != src.numel():
            raise ConfigError(f"etypes: {et.numel()} entries for {src.numel()} edges")
        n_dst = g.num_dst_nodes() if getattr(g, "is_block", False) else feat.shape[0]
        w = self.rel_weights()
        msg = feat.new_zeros((src.shape[0], self.out_feat))
        for r in torch.unique(et).tolist():  # a loop over relations, not nodes
            sel = torch.nonzero(et == r, as_tuple=True)[0]
            msg = msg.index_copy(0, sel, feat.index_select(0, src[sel]) @ w[r])
        if norm is not None:
            msg = msg * norm.view(-1, 1)
        h = scatter_sum(msg, dst, n_dst)
        if self.layer_norm is not None:
            h = self.layer_norm(h)
        if self.h_bias is not None:
            h = h + self.h_bias
        if self.loop_weight is not None:
            h = h + feat[:n_dst] @ self.loop_weight
        if self.activation is not None:
            h = self.activation(h)
        out: torch.Tensor = self.dropout(h)
        return out
