"""Trainer-side API (DGL's names): initialize, DistGraph, DistTensor, DistEmbedding,
sparse optimizers, node/edge splits and one-hop distributed sampling."""

from distgnn.dist.context import DistContext, initialize
from distgnn.dist.embedding import DistEmbedding
from distgnn.dist.graph import DistGraph
from distgnn.dist.optim import SparseAdagrad, SparseAdam
from distgnn.dist.sampling import SampledEdges, sample_neighbors
from distgnn.dist.split import edge_split, node_split
from distgnn.dist.tensor import DistTensor

__all__ = [
    "DistContext",
    "DistEmbedding",
    "DistGraph",
    "DistTensor",
    "SampledEdges",
    "SparseAdagrad",
    "SparseAdam",
    "edge_split",
    "initialize",
    "node_split",
    "sample_neighbors",
]
