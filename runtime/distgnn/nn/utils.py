"""Helpers shared by the layers: (source, destination) inputs, DGL's ``WeightBasis``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.nn.ops import scatter_sum


def expand_as_pair(feat: Any, graph: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(h_src, h_dst)``: a pair as given, or one tensor whose first ``num_dst`` rows are
    the destinations (blocks), as DGL's ``expand_as_pair``."""
    if isinstance(feat, tuple):
        if len(feat) != 2:
            raise ConfigError("feat: a tuple must be (h_src, h_dst)")
        return feat[0], feat[1]
    if getattr(graph, "is_block", False):
        return feat, feat[: graph.num_dst_nodes()]
    return feat, feat


def pair(x: int | tuple[int, int]) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else (int(x[0]), int(x[1]))


def edges_of(graph: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    src, dst = graph.edges(device)
    return src.to(device), dst.to(device)


def sum_into_dst(graph: Any, msg: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Sum of per-edge messages ``msg`` at their destinations."""
    return scatter_sum(msg, dst, graph.num_dst_nodes())


def check_in_degree(graph: Any, dst: torch.Tensor, allow: bool, layer: str) -> None:
    """DGL's zero-in-degree check (outputs of such nodes would be meaningless)."""
    if allow:
        return
    deg = torch.bincount(dst, minlength=graph.num_dst_nodes())
    if bool((deg == 0).any()):
        raise ConfigError(
            f"{layer}: there are 0-in-degree destination nodes; add self-loops or create "
            "the layer with allow_zero_in_degree=True"
        )


class WeightBasis(nn.Module):
    """``num_outputs`` weights of ``shape`` as combinations of ``num_bases`` shared bases."""

    def __init__(self, shape: tuple[int, ...], num_bases: int, num_outputs: int) -> None:
        super().__init__()
        self.shape, self.num_bases, self.num_outputs = tuple(shape), num_bases, num_outputs
        if num_outputs <= num_bases:
            raise ConfigError(
                f"num_bases: {num_bases} must be smaller than the number of outputs ({num_outputs})"
            )
        self.weight = nn.Parameter(torch.empty(num_bases, *self.shape))
        nn.init.xavier_uniform_(self.weight, gain=nn.init.calculate_gain("relu"))
        self.w_comp = nn.Parameter(torch.empty(num_outputs, num_bases))
        nn.init.xavier_uniform_(self.w_comp, gain=nn.init.calculate_gain("relu"))

    def forward(self) -> torch.Tensor:
        w = self.w_comp @ self.weight.view(self.num_bases, -1)
        return w.view(self.num_outputs, *self.shape)
