"""DGL's ``dgl.dataloading`` names: neighbour samplers, negative samplers and the
distributed node/edge loaders (yielding DGL-style blocks)."""

from distgnn.dataloading import negative_sampler
from distgnn.dataloading.dist_loader import (
    DistEdgeDataLoader,
    DistNodeDataLoader,
    EdgePredictionSampler,
    as_edge_prediction_sampler,
    env_num_samplers,
)
from distgnn.dataloading.neighbor_sampler import (
    MultiLayerFullNeighborSampler,
    MultiLayerNeighborSampler,
    NeighborSampler,
)

__all__ = [
    "DistEdgeDataLoader",
    "DistNodeDataLoader",
    "EdgePredictionSampler",
    "MultiLayerFullNeighborSampler",
    "MultiLayerNeighborSampler",
    "NeighborSampler",
    "as_edge_prediction_sampler",
    "env_num_samplers",
    "negative_sampler",
]
