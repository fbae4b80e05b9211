"""GNN layers on blocks under DGL's names and signatures (``dgl.nn``), plain PyTorch."""

from distgnn.nn.gat import GAT, GATConv
from distgnn.nn.graphconv import GraphConv
from distgnn.nn.hetero import HeteroGraphConv
from distgnn.nn.pyg import to_pyg_edge_index
from distgnn.nn.rgcn import RelGraphConv
from distgnn.nn.rgcn_model import RGCN
from distgnn.nn.sage import GraphSAGE, SAGEConv
from distgnn.nn.utils import WeightBasis

__all__ = [
    "GAT",
    "RGCN",
    "GATConv",
    "GraphConv",
    "GraphSAGE",
    "HeteroGraphConv",
    "RelGraphConv",
    "SAGEConv",
    "WeightBasis",
    "to_pyg_edge_index",
]
