"""Trainer-side API (DGL's names): initialize, DistGraph, DistTensor, DistEmbedding,
sparse optimizers, node/edge splits and one-hop distributed sampling."""

from distgnn.distributed.context import DistContext, initialize
from distgnn.distributed.dataloader import DistDataLoader
from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.graph import DistGraph
from distgnn.distributed.optim import SparseAdagrad, SparseAdam
from distgnn.distributed.sampling import SampledEdges, sample_neighbors
from distgnn.distributed.split import edge_split, node_split
from distgnn.distributed.tensor import DistTensor

__all__ = [
    "DistContext",
    "DistDataLoader",
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
