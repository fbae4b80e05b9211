"""The sampling engine: blocks, multi-layer neighbour sampling, negative sampling, batch
loaders with sampler processes. DGL's user-facing names are in :mod:`distgnn.dataloading`."""

from distgnn.sampling.batches import EdgeBatcher, NodeBatcher, PairGraph
from distgnn.sampling.blocks import EID, NID, Block, BlockTypes, to_block
from distgnn.sampling.loader import BatchLoader, SamplerError
from distgnn.sampling.local import LocalGraph
from distgnn.sampling.negative import UniformNegativeSampler
from distgnn.sampling.neighbor import Exclusion, Hop, NeighborSampler, OneHop
from distgnn.sampling.source import GraphSource, open_source, source_for

__all__ = [
    "EID",
    "NID",
    "BatchLoader",
    "Block",
    "BlockTypes",
    "EdgeBatcher",
    "Exclusion",
    "GraphSource",
    "Hop",
    "LocalGraph",
    "NeighborSampler",
    "NodeBatcher",
    "OneHop",
    "PairGraph",
    "SamplerError",
    "UniformNegativeSampler",
    "open_source",
    "source_for",
    "to_block",
]
