"""Trainer-side API with DGL's names (``dgl.distributed``): initialize, DistGraph,
DistTensor, DistEmbedding, sparse optimizers, node/edge splits, the partition book,
one-hop distributed sampling and partitioning."""

from distgnn.distributed.context import DistContext, exit_client, initialize
from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.graph import DistGraph
from distgnn.distributed.optim import SparseAdagrad, SparseAdam
from distgnn.distributed.partition import load_partition, load_partition_book, partition_graph
from distgnn.distributed.partition_book import (
    EdgePartitionPolicy,
    GraphPartitionBook,
    NodePartitionPolicy,
    PartitionPolicy,
    RangePartitionBook,
)
from distgnn.distributed.sampling import in_subgraph, sample_etype_neighbors, sample_neighbors
from distgnn.distributed.split import edge_split, node_split
from distgnn.distributed.subgraph import EID, NID, SubGraph
from distgnn.distributed.tensor import DistTensor

__all__ = [
    "EID",
    "NID",
    "DistContext",
    "DistEmbedding",
    "DistGraph",
    "DistTensor",
    "EdgePartitionPolicy",
    "GraphPartitionBook",
    "NodePartitionPolicy",
    "PartitionPolicy",
    "RangePartitionBook",
    "SparseAdagrad",
    "SparseAdam",
    "SubGraph",
    "edge_split",
    "exit_client",
    "in_subgraph",
    "initialize",
    "load_partition",
    "load_partition_book",
    "node_split",
    "partition_graph",
    "sample_etype_neighbors",
    "sample_neighbors",
]
