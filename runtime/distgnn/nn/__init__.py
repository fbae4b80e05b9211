"""GNN layers and models on blocks, in plain PyTorch."""

from distgnn.nn.gat import GAT, GATConv
from distgnn.nn.pyg import to_pyg_edge_index
from distgnn.nn.rgcn import RelGraphConv
from distgnn.nn.sage import GraphSAGE, SAGEConv

__all__ = ["GAT", "GATConv", "GraphSAGE", "RelGraphConv", "SAGEConv", "to_pyg_edge_index"]
