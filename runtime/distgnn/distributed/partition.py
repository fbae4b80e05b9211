"""DGL's ``partition_graph`` / ``load_partition`` / ``load_partition_book`` signatures over
:mod:`distgnn.partition` (which ``distgnn partition`` uses).

The input is a graph file or URL (see docs/partition-format.md) or a
:class:`~distgnn.graph.data.GraphData`: DGL is not a dependency, so there is no
``DGLGraph``. ``load_partition`` returns the partition's local graph as a
:class:`~distgnn.partition.loader.Partition` (CSC arrays) in the place of DGL's graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distgnn.distributed.partition_book import RangePartitionBook
from distgnn.errors import ConfigError
from distgnn.graph.data import GraphData
from distgnn.partition.book import PartitionBook
from distgnn.partition.loader import Partition, load_manifest
from distgnn.partition.loader import load_partition as _load_partition
from distgnn.partition.partitioner import partition_graph as _partition_graph


def partition_graph(
    g: GraphData | str,
    graph_name: str,
    num_parts: int,
    out_path: str,
    num_hops: int = 1,
    part_method: str = "metis",
    balance_ntypes: Any = None,
    balance_edges: bool = False,
    return_mapping: bool = False,
    num_trainers_per_machine: int = 1,
    objtype: str = "cut",
    graph_formats: Any = None,
    use_graphbolt: bool = False,
) -> tuple[Any, Any] | None:
    """Partition ``g`` into ``out_path/graph_name.json`` and its partition folders.

    ``return_mapping`` returns ``(orig_nids, orig_eids)``: the original ID of every new
    node and edge ID, as DGL (on a typed graph, dicts by node type and canonical edge
    type of type-wise IDs). Balancing by node type, several trainers per
    machine (trainer IDs) and GraphBolt are not supported and raise.
    """
    if balance_ntypes is not None:
        raise ConfigError(
            "balance_ntypes: not supported; `distgnn partition --balance-train` balances "
            "the training nodes"
        )
    if num_trainers_per_machine != 1:
        raise ConfigError("num_trainers_per_machine: only 1 is supported (no trainer IDs)")
    if use_graphbolt:
        raise ConfigError("use_graphbolt: DistGNN partitions are CSC arrays, not GraphBolt")
    if objtype != "cut":
        raise ConfigError(f"objtype {objtype!r}: only 'cut' is supported")
    man = _partition_graph(
        g,
        num_parts,
        out_path,
        graph_name,
        method=part_method,
        balance_edges=balance_edges,
        halo_hops=num_hops,
        progress=False,
    )
    if not return_mapping:
        return None
    url = f"{out_path.rstrip('/')}/{graph_name}.json"
    parts = [_load_partition(url, p, manifest=man) for p in range(man.num_parts)]
    nid = np.concatenate([p.orig_nid for p in parts]).astype(np.int64)
    eid = np.concatenate([p.orig_eid for p in parts]).astype(np.int64)
    if man.is_homogeneous:
        return torch.from_numpy(nid), torch.from_numpy(eid)
    return _typed_mapping(man, nid, eid)


def _typed_mapping(man: Any, nid: np.ndarray, eid: np.ndarray) -> tuple[dict, dict]:
    """DGL's mappings of a typed graph: per type, the original type-wise ID of each new one."""
    book = PartitionBook(man)
    nmap, emap = {}, {}
    start = 0
    for t in man.node_types:
        n = int(book.ntype_offsets(t)[-1])
        homo = book.to_homogeneous_nids(t, np.arange(n, dtype=np.int64))
        nmap[t] = torch.from_numpy(nid[homo] - start)
        start += n
    start = 0
    for c in man.edge_types:
        n = int(book.etype_offsets(c)[-1])
        homo = book.to_homogeneous_eids(c, np.arange(n, dtype=np.int64))
        emap[tuple(c)] = torch.from_numpy(eid[homo] - start)
        start += n
    return nmap, emap


def load_partition_book(
    part_config: str, part_id: int
) -> tuple[RangePartitionBook, str, dict[str, int], dict[tuple[str, str, str], int]]:
    """``(gpb, graph_name, ntypes, etypes)``: type -> type ID, edge types as canonical
    ``(src, etype, dst)`` tuples (DGL 2.1's keys)."""
    man = load_manifest(part_config)
    gpb = RangePartitionBook(PartitionBook(man), part_id)
    ntypes = {t: i for i, t in enumerate(man.node_types)}
    etypes = {(c[0], c[1], c[2]): i for i, c in enumerate(man.edge_types)}
    return gpb, man.graph_name, ntypes, etypes


def load_partition_feats(
    part_config: str, part_id: int, load_nodes: bool = True, load_edges: bool = True
) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
    """DGL's ``(node_feats, edge_feats)`` of one partition (None for what is not loaded)."""
    _, nfeat, efeat, *_ = load_partition(part_config, part_id)
    return (nfeat if load_nodes else None), (efeat if load_edges else None)


def load_partition(
    part_config: str, part_id: int, load_feats: bool = True, use_graphbolt: bool = False
) -> tuple[
    Partition,
    dict[str, torch.Tensor],
    dict[str, torch.Tensor],
    RangePartitionBook,
    str,
    dict[str, int],
    dict[tuple[str, str, str], int],
]:
    """DGL's ``(graph, node_feats, edge_feats, gpb, graph_name, ntypes, etypes)``.

    Features are keyed ``NTYPE/NAME`` and ``SRC:ETYPE:DST/NAME`` as DGL's; ``graph`` is
    the partition's local CSC graph.
    """
    if use_graphbolt:
        raise ConfigError("use_graphbolt: DistGNN partitions are CSC arrays, not GraphBolt")
    part = _load_partition(part_config, part_id)
    gpb, name, ntypes, etypes = load_partition_book(part_config, part_id)
    nfeat: dict[str, torch.Tensor] = {}
    efeat: dict[str, torch.Tensor] = {}
    if load_feats:
        for t, fields in part.node_data.items():
            for k, v in fields.items():
                nfeat[f"{t}/{k}"] = torch.from_numpy(np.array(v))
        for t, fields in part.edge_data.items():
            for k, v in fields.items():
                efeat[f"{t}/{k}"] = torch.from_numpy(np.array(v))
    return part, nfeat, efeat, gpb, name, ntypes, etypes
