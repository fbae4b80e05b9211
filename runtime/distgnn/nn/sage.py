"""GraphSAGE (DGL's ``SAGEConv``: mean, gcn, pool, lstm aggregators) on blocks."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.nn import ops
from distgnn.nn.ops import MeanAdjacency, mean_aggregate, mean_aggregate_with_prefix
from distgnn.nn.utils import edges_of, expand_as_pair, pair, sum_into_dst
from distgnn.sampling.blocks import Block

AGGREGATORS = ("mean", "gcn", "pool", "lstm")


class SAGEConv(nn.Module):
    """DGL's ``SAGEConv(in_feats, out_feats, aggregator_type, feat_drop, bias, norm,
    activation)``: ``h_v' = W_self h_v + W_neigh agg_{u->v} h_u + b`` (``gcn``:
    ``W_neigh (h_v + sum h_u) / (deg + 1) + b``), then ``activation`` and ``norm``.

    ``forward(block, feat)``: ``feat`` is the sources' features (the first
    ``num_dst_nodes()`` rows are the destinations) or a pair ``(h_src, h_dst)``.
    """

    def __init__(
        self,
        in_feats: int | tuple[int, int],
        out_feats: int,
        aggregator_type: str,
        feat_drop: float = 0.0,
        bias: bool = True,
        norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
        activation: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        if aggregator_type not in AGGREGATORS:
            raise ConfigError(
                f"aggregator_type: {aggregator_type!r} is not one of {', '.join(AGGREGATORS)}"
            )
        self._in_src_feats, self._in_dst_feats = pair(in_feats)
        self._out_feats = out_feats
        self._aggre_type = aggregator_type
        self.norm, self.activation = norm, activation
        self.feat_drop = nn.Dropout(feat_drop)
        src_dim = self._in_src_feats
        if aggregator_type == "pool":
            self.fc_pool = nn.Linear(src_dim, src_dim)
        if aggregator_type == "lstm":
            self.lstm = nn.LSTM(src_dim, src_dim, batch_first=True)
        self.fc_neigh = nn.Linear(src_dim, out_feats, bias=False)
        if aggregator_type != "gcn":
            self.fc_self = nn.Linear(self._in_dst_feats, out_feats, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_feats)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        if self._aggre_type == "pool":
            nn.init.xavier_uniform_(self.fc_pool.weight, gain=gain)
        if self._aggre_type == "lstm":
            self.lstm.reset_parameters()
        if self._aggre_type != "gcn":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(
        self, graph: Any, feat: Any, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        h_src, h_dst = expand_as_pair(feat, graph)
        h_src, h_dst = self.feat_drop(h_src), self.feat_drop(h_dst)
        agg = self._aggre_type
        if agg == "mean" and edge_weight is None and isinstance(graph, Block):
            out = self._fused_mean(graph, h_src, h_dst)
        else:
            src, dst = edges_of(graph, h_src.device)
            if agg == "mean":
                h_neigh = self._mean(graph, h_src, src, dst, edge_weight)
                out = self.fc_self(h_dst) + h_neigh
            elif agg == "gcn":
                msg = h_src.index_select(0, src)
                if edge_weight is not None:
                    msg = msg * edge_weight.view(-1, 1)
                total = sum_into_dst(graph, msg, dst) + h_dst
                deg = torch.bincount(dst, minlength=graph.num_dst_nodes()).to(total.dtype)
                out = self.fc_neigh(total / (deg + 1).unsqueeze(-1))
            elif agg == "pool":
                pooled = torch.relu(self.fc_pool(h_src))
                msg = pooled.index_select(0, src)
                if edge_weight is not None:
                    msg = msg * edge_weight.view(-1, 1)
                h_neigh = _scatter_max(msg, dst, graph.num_dst_nodes())
                out = self.fc_self(h_dst) + self.fc_neigh(h_neigh)
            else:
                h_neigh = self._lstm(graph, h_src, src, dst, edge_weight)
                out = self.fc_self(h_dst) + self.fc_neigh(h_neigh)
        if self.bias is not None:
            out = out + self.bias
        if self.activation is not None:
            out = self.activation(out)
        if self.norm is not None:
            out = self.norm(out)
        return out

    def _fused_mean(self, block: Block, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        adj = mean_adjacency(block, h_src.device)
        # project first when it shrinks the messages (as DGL does); the mean is one
        # fused sparse (CSR) matmul, no per-edge copy of the features
        if self._in_src_feats > self._out_feats:
            return self.fc_self(h_dst) + mean_aggregate(adj, self.fc_neigh(h_src))
        if h_src.requires_grad and _is_prefix(h_dst, h_src, block.num_dst_nodes()):
            # one gradient buffer for both uses of h_src (see mean_aggregate_with_prefix)
            h_dst, agg = mean_aggregate_with_prefix(adj, h_src)
        else:
            agg = mean_aggregate(adj, h_src)
        return torch.addmm(self.fc_self(h_dst), agg, self.fc_neigh.weight.t())

    def _mean(
        self,
        graph: Any,
        h_src: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        edge_weight: torch.Tensor | None,
    ) -> torch.Tensor:
        lin_first = self._in_src_feats > self._out_feats
        h = self.fc_neigh(h_src) if lin_first else h_src
        msg = h.index_select(0, src)
        if edge_weight is not None:
            msg = msg * edge_weight.view(-1, 1)
        total = sum_into_dst(graph, msg, dst)
        deg = torch.bincount(dst, minlength=graph.num_dst_nodes()).clamp(min=1).to(total.dtype)
        mean = total / deg.unsqueeze(-1)
        return mean if lin_first else self.fc_neigh(mean)

    def _lstm(
        self,
        graph: Any,
        h_src: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        edge_weight: torch.Tensor | None,
    ) -> torch.Tensor:
        """Each destination's neighbours (in edge order) through the LSTM; nodes grouped
        by in-degree so every group is one batched LSTM call (DGL's degree bucketing)."""
        n_dst, dim = graph.num_dst_nodes(), h_src.shape[1]
        out = h_src.new_zeros((n_dst, dim))
        if src.numel() == 0:
            return out
        msg = h_src.index_select(0, src)
        if edge_weight is not None:
            msg = msg * edge_weight.view(-1, 1)
        order = torch.argsort(dst, stable=True)
        deg = torch.bincount(dst, minlength=n_dst)
        start = torch.cumsum(deg, 0) - deg
        for d in torch.unique(deg[deg > 0]).tolist():
            nodes = torch.nonzero(deg == d, as_tuple=True)[0]
            pos = start[nodes].unsqueeze(1) + torch.arange(d, device=dst.device)
            seq = msg.index_select(0, order[pos.reshape(-1)]).view(nodes.numel(), d, dim)
            _, (h_n, _) = self.lstm(seq)
            out = out.index_copy(0, nodes, h_n[-1])
        return out


def _is_prefix(h_dst: torch.Tensor, h_src: torch.Tensor, n: int) -> bool:
    """Whether ``h_dst`` is exactly ``h_src[:n]`` (a view of its first rows)."""
    return (
        h_dst.shape[0] == n
        and h_dst.shape[1:] == h_src.shape[1:]
        and h_dst.dtype == h_src.dtype
        and h_dst.stride() == h_src.stride()
        and h_dst.data_ptr() == h_src.data_ptr()
        and h_dst._base is not None
        and (h_dst._base is h_src or h_dst._base is h_src._base)
    )


def _scatter_max(msg: torch.Tensor, dst: torch.Tensor, n: int) -> torch.Tensor:
    """Elementwise max of the messages per destination; zeros where there are none."""
    out = msg.new_full((n, *msg.shape[1:]), float("-inf"))
    idx = dst.view(-1, *([1] * (msg.dim() - 1))).expand_as(msg)
    out = out.scatter_reduce(0, idx, msg, reduce="amax", include_self=True)
    return torch.where(torch.isinf(out), torch.zeros_like(out), out)


def mean_adjacency(block: Block, device: torch.device) -> MeanAdjacency:
    """The block's row-normalised adjacency (cached on the block per device)."""
    key = f"mean_adj:{device}"
    adj = block._cache.get(key)
    if adj is None:
        adj = MeanAdjacency(
            block.edge_src, block.edge_dst, block.num_src_nodes(), block.num_dst_nodes(), device
        )
        block._cache[key] = adj
    assert isinstance(adj, MeanAdjacency)
    return adj


class GraphSAGE(nn.Module):
    """A stack of mean :class:`SAGEConv` with ReLU and dropout between layers."""

    def __init__(
        self, in_feats: int, hidden: int, out_feats: int, num_layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1) + [out_feats]
        self.layers = nn.ModuleList(SAGEConv(a, b, "mean") for a, b in itertools.pairwise(dims))
        self.p = dropout

    def forward(self, blocks: list[Block], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks, strict=True)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = ops.relu_dropout(h, self.p, self.training)
        return h
