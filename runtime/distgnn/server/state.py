"""A server's partition in shared memory: loading it (parent) and attaching to it (workers).

The parent calls :func:`load_into_store`, which reads partition ``I`` with
``distgnn.partition.loader.load_partition`` (checksums verified there), copies its
arrays into the :class:`~distgnn.server.store.ShmStore` and writes ``info.json``
(the manifest and this partition's offsets). Workers build a :class:`GraphState`
from the same folder, without reading object storage again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from distgnn.partition.manifest import Manifest
from distgnn.server.store import ShmStore

GRAPH = "graph/_/"


def node_key(ntype: str, name: str) -> str:
    return f"node/{ntype}/{name}"


def edge_key(cetype: str, name: str) -> str:
    return f"edge/{cetype}/{name}"


def load_into_store(
    manifest_url: str,
    part_id: int,
    store: ShmStore,
    storage_options: Mapping[str, Any] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Load one partition into ``store``; returns the info workers need.

    ``cancel()`` is polled while files are read (LoadCancelled when it turns true)."""
    from distgnn.partition.loader import load_partition

    part = load_partition(
        manifest_url, part_id, storage_options=dict(storage_options or {}), cancel=cancel
    )
    man: Manifest = part.manifest
    n_owned, m_owned = int(part.num_owned_nodes), int(part.num_owned_edges)
    indptr = np.asarray(part.indptr, dtype=np.int64)
    indices = np.asarray(part.indices, dtype=np.int64)
    l2g = np.asarray(part.local2global, dtype=np.int64)
    store.put(GRAPH + "indptr", indptr)
    # the CSC's sources as global IDs (what sampling and FIND_EDGES answer): one gather
    # per sampled edge instead of two; the local IDs are not kept (the same size)
    store.put(GRAPH + "src", np.take(l2g, indices))
    eid = np.asarray(part.eid, dtype=np.int64)
    store.put(GRAPH + "eid", eid)
    eidpos = np.empty(m_owned, dtype=np.int64)  # position of owned edge (new ID - offset)
    eidpos[eid[:m_owned] - part.manifest.edge_offsets[part_id]] = np.arange(m_owned)
    store.put(GRAPH + "eidpos", eidpos)
    sampled = int(indptr[n_owned])  # the in-edges of owned nodes: what sampling reads
    contiguous = _is_offset_range(eid[:sampled], int(part.manifest.edge_offsets[part_id]))
    if part.etype is not None:
        store.put(GRAPH + "etype", np.asarray(part.etype, dtype=np.int32))
    store.put(GRAPH + "local2global", l2g)
    halo = l2g[n_owned:]
    order = np.argsort(halo, kind="stable")
    store.put(GRAPH + "halo_sorted", halo[order])
    store.put(GRAPH + "halo_order", (order + n_owned).astype(np.int64))
    owned_src = indices[: int(indptr[n_owned])]
    store.put(GRAPH + "outdeg", np.bincount(owned_src, minlength=len(l2g)).astype(np.int64))
    for ntype, arrays in part.node_data.items():
        for name, arr in arrays.items():
            store.put(node_key(ntype, name), np.asarray(arr))
    for cet, arrays in part.edge_data.items():
        for name, arr in arrays.items():
            store.put(edge_key(cet, name), np.asarray(arr))
    info = {
        "manifest_url": manifest_url,
        "manifest": man.to_dict(),
        "part_id": part_id,
        "num_owned_nodes": n_owned,
        "num_owned_edges": m_owned,
        "num_local_nodes": len(l2g),
        "has_etype": part.etype is not None,
        "eid_contiguous": contiguous,
    }
    store.seal()  # the partition's own tensors: not counted by the run-time quota
    tmp = os.path.join(store.root, "info.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f)
    os.replace(tmp, os.path.join(store.root, "info.json"))
    return info


def _is_offset_range(a: np.ndarray, offset: int, chunk: int = 1 << 20) -> bool:
    """Whether ``a == offset + arange(len(a))`` (checked a chunk at a time)."""
    for i in range(0, len(a), chunk):
        part = a[i : i + chunk]
        if not np.array_equal(part, np.arange(offset + i, offset + i + len(part))):
            return False
    return True


@dataclass
class GraphState:
    """A worker's view of its partition (all arrays map the shared memory)."""

    info: dict[str, Any]
    manifest: Manifest
    part_id: int
    node_offset: int
    edge_offset: int
    n_owned: int
    m_owned: int
    indptr: np.ndarray
    src: np.ndarray
    """the CSC's source of each position as a global node ID (``local2global[indices]``)"""
    eid: np.ndarray
    eidpos: np.ndarray
    etype: np.ndarray | None
    local2global: np.ndarray
    halo_sorted: np.ndarray
    halo_order: np.ndarray
    outdeg: np.ndarray
    etype_starts: dict[str, int]
    eid_contiguous: bool = False
    """``eid[pos] == edge_offset + pos`` for every in-edge of an owned node (the
    partitioner numbers a homogeneous partition's edges in CSC order): sampling then
    computes edge IDs instead of gathering them."""

    @classmethod
    def attach(cls, store: ShmStore) -> GraphState:
        with open(os.path.join(store.root, "info.json"), encoding="utf-8") as f:
            info = json.load(f)
        man = Manifest.from_dict(info["manifest"], source="server info")
        p = int(info["part_id"])
        starts, acc = {}, 0
        for name in man.etype_names:
            starts[name] = acc
            off = man.etype_offsets[name]
            acc += off[p + 1] - off[p]
        return cls(
            info=info,
            manifest=man,
            part_id=p,
            node_offset=man.node_offsets[p],
            edge_offset=man.edge_offsets[p],
            n_owned=int(info["num_owned_nodes"]),
            m_owned=int(info["num_owned_edges"]),
            indptr=store.get(GRAPH + "indptr"),
            src=store.get(GRAPH + "src"),
            eid=store.get(GRAPH + "eid"),
            eidpos=store.get(GRAPH + "eidpos"),
            etype=store.get(GRAPH + "etype") if info["has_etype"] else None,
            local2global=store.get(GRAPH + "local2global"),
            halo_sorted=store.get(GRAPH + "halo_sorted"),
            halo_order=store.get(GRAPH + "halo_order"),
            outdeg=store.get(GRAPH + "outdeg"),
            etype_starts=starts,
            eid_contiguous=bool(info.get("eid_contiguous", False)),
        )

    def global_to_local(self, gids: np.ndarray) -> np.ndarray:
        """Local IDs of global node IDs (owned or halo); -1 where not in this partition."""
        out = np.full(len(gids), -1, dtype=np.int64)
        own = (gids >= self.node_offset) & (gids < self.node_offset + self.n_owned)
        out[own] = gids[own] - self.node_offset
        rest = np.flatnonzero(~own)
        if len(rest) and len(self.halo_sorted):
            g = gids[rest]
            pos = np.minimum(np.searchsorted(self.halo_sorted, g), len(self.halo_sorted) - 1)
            hit = self.halo_sorted[pos] == g
            out[rest[hit]] = self.halo_order[pos[hit]]
        return out
