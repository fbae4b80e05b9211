"""Multi-layer neighbour sampling, blocks, negative sampling and data loaders."""

from distgnn.sampling.batches import EdgeBatcher, NodeBatcher, PairGraph
from distgnn.sampling.blocks import Block, to_block
from distgnn.sampling.loader import (
    DistDataLoader,
    DistEdgeDataLoader,
    DistNodeDataLoader,
    EdgeDataLoader,
    NodeDataLoader,
    SamplerError,
)
from distgnn.sampling.local import LocalGraph
from distgnn.sampling.negative import UniformNegativeSampler
from distgnn.sampling.neighbor import Exclusion, Hop, NeighborSampler, OneHop
from distgnn.sampling.source import GraphSource, open_source, source_for

__all__ = [
    "Block",
    "DistDataLoader",
    "DistEdgeDataLoader",
    "DistNodeDataLoader",
    "EdgeBatcher",
    "EdgeDataLoader",
    "Exclusion",
    "GraphSource",
    "Hop",
    "LocalGraph",
    "NeighborSampler",
    "NodeBatcher",
    "NodeDataLoader",
    "OneHop",
    "PairGraph",
    "SamplerError",
    "UniformNegativeSampler",
    "open_source",
    "source_for",
    "to_block",
]
