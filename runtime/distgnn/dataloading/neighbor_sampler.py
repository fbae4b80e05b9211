"""DGL's neighbour samplers: ``NeighborSampler`` (the sampling engine's, DGL's argument
order), ``MultiLayerNeighborSampler`` and ``MultiLayerFullNeighborSampler``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distgnn.errors import ConfigError
from distgnn.sampling.neighbor import Fanout, NeighborSampler


class MultiLayerNeighborSampler(NeighborSampler):
    """DGL's older name: ``MultiLayerNeighborSampler(fanouts, replace=False,
    return_eids=False)`` (edge IDs are always in ``block.edata[EID]``)."""

    def __init__(
        self,
        fanouts: Sequence[Fanout],
        replace: bool = False,
        return_eids: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(fanouts, replace=replace, **kwargs)


class MultiLayerFullNeighborSampler(NeighborSampler):
    """Every neighbour on each of ``num_layers`` layers."""

    def __init__(self, num_layers: int, edge_dir: str = "in", **kwargs: Any) -> None:
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ConfigError(f"num_layers: {num_layers!r} must be an int >= 1")
        super().__init__([-1] * num_layers, edge_dir=edge_dir, **kwargs)


__all__ = ["MultiLayerFullNeighborSampler", "MultiLayerNeighborSampler", "NeighborSampler"]
