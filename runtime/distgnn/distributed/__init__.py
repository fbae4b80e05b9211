"""Trainer-side API with DGL's names (``dgl.distributed``): initialize, DistGraph,
DistTensor, DistEmbedding, sparse optimizers, node/edge splits, the partition book,
one-hop distributed sampling and partitioning."""

from typing import Any

from distgnn.dataloading.dist_loader import DistEdgeDataLoader, DistNodeDataLoader
from distgnn.distributed import nn, optim  # DGL's dgl.distributed.nn / .optim attributes
from distgnn.distributed.context import DistContext, exit_client, initialize
from distgnn.distributed.dataloader import DistDataLoader
from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.graph import DistGraph
from distgnn.distributed.optim import SparseAdagrad, SparseAdam
from distgnn.distributed.partition import (
    load_partition,
    load_partition_book,
    load_partition_feats,
    partition_graph,
)
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
from distgnn.errors import ConfigError

__all__ = [
    "EID",
    "NID",
    "DistContext",
    "DistDataLoader",
    "DistEdgeDataLoader",
    "DistEmbedding",
    "DistGraph",
    "DistNodeDataLoader",
    "DistTensor",
    "EdgePartitionPolicy",
    "GraphPartitionBook",
    "NodePartitionPolicy",
    "NotSupportedError",
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
    "load_partition_feats",
    "nn",
    "node_split",
    "optim",
    "partition_graph",
    "sample_etype_neighbors",
    "sample_neighbors",
]


class NotSupportedError(ConfigError, AttributeError):
    """A ``dgl.distributed`` name DistGNN deliberately does not offer."""


_NO_CODE = (
    "no code crosses the wire in DistGNN (no pickle), so there is no custom RPC or "
    "server-side user code; servers answer built-in requests only"
)
_SERVERS = "graph servers are `distgnn serve` processes started by `distgnn run` or the operator"
_UNSUPPORTED = {
    "DistGraphServer": _SERVERS,
    "start_server": _SERVERS,
    "shutdown_servers": _SERVERS,
    "KVServer": _SERVERS,
    "ServerState": _SERVERS,
    "KVClient": "use DistTensor (its rows live on the servers)",
    "connect_to_server": "initialize() connects to the servers",
    "register_service": _NO_CODE,
    "register_sig_handler": _NO_CODE,
    "send_request": _NO_CODE,
    "recv_response": _NO_CODE,
    "send_requests_to_machine": _NO_CODE,
    "recv_responses": _NO_CODE,
    "remote_call": _NO_CODE,
    "remote_call_to_machine": _NO_CODE,
    "Request": _NO_CODE,
    "Response": _NO_CODE,
}


def __getattr__(name: str) -> Any:
    """DGL names left out on purpose raise :class:`NotSupportedError` saying why (see
    docs/servers.md)."""
    if name in _UNSUPPORTED:
        raise NotSupportedError(
            f"dgl.distributed.{name} is not available: {_UNSUPPORTED[name]} "
            "(docs/servers.md, 'Deliberate differences from DGL')"
        )
    raise AttributeError(f"module 'distgnn.distributed' has no attribute {name!r}")
