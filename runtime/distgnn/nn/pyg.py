"""Conversion of a block to PyTorch Geometric's bipartite ``edge_index`` form."""

from __future__ import annotations

import torch

from distgnn.sampling.blocks import Block


def to_pyg_edge_index(
    block: Block, device: torch.device | str | None = None
) -> tuple[torch.Tensor, tuple[int, int]]:
    """``(edge_index, (num_src, num_dst))``: row 0 indexes ``x_src``, row 1 ``x_dst``.

    Pass ``(x, x[:num_dst])`` and ``size`` to a PyG bipartite layer such as ``SAGEConv``.
    """
    src, dst = block.edges(device)
    return torch.stack([src, dst]), (block.num_src_nodes(), block.num_dst_nodes())
