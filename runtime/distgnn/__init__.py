"""DistGNN: distributed GNN training (partitions, graph servers, samplers, DDP trainers).

The package root is torch-free and cheap to import (the operator imports
``distgnn.api`` and ``distgnn.contract``). The trainer-side API DGL users know is
re-exported lazily: ``distgnn.initialize``, ``distgnn.DistGraph`` ... import torch
only when first touched.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; resolved on first attribute access.
_LAZY: dict[str, str] = {
    "initialize": "distgnn.distributed.context",
    "DistContext": "distgnn.distributed.context",
    "DistGraph": "distgnn.distributed.graph",
    "DistTensor": "distgnn.distributed.tensor",
    "DistEmbedding": "distgnn.distributed.embedding",
    "SparseAdagrad": "distgnn.distributed.optim",
    "SparseAdam": "distgnn.distributed.optim",
    "node_split": "distgnn.distributed.split",
    "edge_split": "distgnn.distributed.split",
    "partition_graph": "distgnn.partition.partitioner",
    "load_partition": "distgnn.partition.loader",
    "load_graph": "distgnn.graph.io",
    "DGLError": "distgnn.errors",
}


# submodules a DGL user reaches as attributes (``dgl.distributed``, ``dgl.dataloading``)
_SUBMODULES = ("distributed", "dataloading", "nn", "function")

NID = "_ID"
"""DGL's ``dgl.NID``: the key of global node IDs in a block's ``srcdata``/``dstdata``."""
EID = "_ID"
"""DGL's ``dgl.EID``: the key of global edge IDs in ``edata``."""
NTYPE = "_TYPE"
ETYPE = "_TYPE"


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"distgnn.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'distgnn' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [  # noqa: PLE0604 (names resolved lazily by __getattr__)
    "EID",
    "ETYPE",
    "NID",
    "NTYPE",
    "__version__",
    *_LAZY,
]
