"""Input graphs: reading and validation (homogeneous and heterogeneous), benchmark generator."""

from __future__ import annotations

from distgnn.graph.data import DEFAULT_ETYPE, DEFAULT_NTYPE, GraphData, etype_str, parse_etype

__all__ = ["DEFAULT_ETYPE", "DEFAULT_NTYPE", "GraphData", "etype_str", "parse_etype"]
