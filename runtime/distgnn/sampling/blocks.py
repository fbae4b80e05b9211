"""Blocks (message-flow graphs): one bipartite graph per GNN layer.

A :class:`Block` maps source nodes to destination nodes. As in DGL, the
destination nodes come first among the source nodes, so ``src_nid[:num_dst]
== dst_nid``. Edges are stored in local block indices (``edge_src`` indexes
``src_nid``, ``edge_dst`` indexes ``dst_nid``) together with their global edge
IDs. Relabelling is vectorised: a lookup table over the ID range (O(edges), no
sort) or, for IDs spread over a huge range, ``np.unique`` + ``searchsorted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError


@dataclass
class Block:
    """One layer's bipartite graph over global node IDs."""

    src_nid: np.ndarray
    dst_nid: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    eid: np.ndarray
    etype: np.ndarray | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_src_nodes(self) -> int:
        return int(self.src_nid.shape[0])

    @property
    def num_dst_nodes(self) -> int:
        return int(self.dst_nid.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    def edges(self, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` local indices as int64 tensors (cached per device)."""
        key = f"edges:{device}"
        if key not in self._cache:
            s = torch.from_numpy(np.ascontiguousarray(self.edge_src, dtype=np.int64))
            d = torch.from_numpy(np.ascontiguousarray(self.edge_dst, dtype=np.int64))
            if device is not None:
                s, d = s.to(device), d.to(device)
            self._cache[key] = (s, d)
        out: tuple[torch.Tensor, torch.Tensor] = self._cache[key]
        return out

    def etypes(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Edge-type index of every edge (zeros for homogeneous graphs)."""
        if self.etype is None:
            t = torch.zeros(self.num_edges, dtype=torch.int64)
        else:
            t = torch.from_numpy(np.asarray(self.etype, dtype=np.int64))
        return t if device is None else t.to(device)

    def in_degrees(self, device: torch.device | str | None = None) -> torch.Tensor:
        _, d = self.edges(device)
        return torch.bincount(d, minlength=self.num_dst_nodes)

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Flat ``name -> array`` form (for passing between processes without pickle)."""
        out = {
            f"{prefix}src_nid": self.src_nid,
            f"{prefix}dst_nid": self.dst_nid,
            f"{prefix}edge_src": self.edge_src,
            f"{prefix}edge_dst": self.edge_dst,
            f"{prefix}eid": self.eid,
        }
        if self.etype is not None:
            out[f"{prefix}etype"] = self.etype
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> Block:
        return cls(
            src_nid=arrays[f"{prefix}src_nid"],
            dst_nid=arrays[f"{prefix}dst_nid"],
            edge_src=arrays[f"{prefix}edge_src"],
            edge_dst=arrays[f"{prefix}edge_dst"],
            eid=arrays[f"{prefix}eid"],
            etype=arrays.get(f"{prefix}etype"),
        )


def _positions(sorted_keys: np.ndarray, order: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position in the original (unsorted) key array of each id, or -1 when absent."""
    if sorted_keys.size == 0:
        return np.full(ids.shape, -1, dtype=np.int64)
    pos = np.searchsorted(sorted_keys, ids)
    pos_c = np.minimum(pos, sorted_keys.size - 1)
    found = sorted_keys[pos_c] == ids
    return np.where(found, order[pos_c], -1).astype(np.int64)


# dense relabelling (one lookup table over the ID range) when the ID range is at
# most this many times the work (edges + seeds); sort-based otherwise
DENSE_RELABEL_FACTOR = 16
DENSE_RELABEL_MIN = 1 << 20


def to_block(
    dst_nid: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    eid: np.ndarray,
    etype: np.ndarray | None = None,
) -> Block:
    """Compact the sampled edges ``src -> dst`` (global IDs) into a block.

    ``dst_nid`` must be unique and contain every ``dst``; the block's source
    nodes are ``dst_nid`` followed by the other sources in ascending ID order.
    """
    dst_nid = np.asarray(dst_nid, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    work = src.size + dst_nid.size
    hi = max(int(dst_nid.max(initial=-1)), int(src.max(initial=-1)), int(dst.max(initial=-1)))
    lo = min(int(dst_nid.min(initial=0)), int(src.min(initial=0)), int(dst.min(initial=0)))
    if lo >= 0 and hi < max(DENSE_RELABEL_MIN, DENSE_RELABEL_FACTOR * work):
        src_nid, edge_src, edge_dst = _relabel_dense(dst_nid, src, dst, hi + 1)
    else:
        src_nid, edge_src, edge_dst = _relabel_sorted(dst_nid, src, dst)
    return Block(
        src_nid=src_nid,
        dst_nid=dst_nid,
        edge_src=edge_src,
        edge_dst=edge_dst,
        eid=np.asarray(eid, dtype=np.int64),
        etype=None if etype is None else np.asarray(etype),
    )


def _relabel_dense(
    dst_nid: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """O(edges + ID range) relabelling with a lookup table (no sort), as DGL's hash map."""
    n_dst = dst_nid.size
    table = np.full(n, -1, dtype=np.int64)
    table[dst_nid] = np.arange(n_dst, dtype=np.int64)
    if n_dst > 1 and not np.array_equal(table[dst_nid], np.arange(n_dst)):
        raise ConfigError("seeds: destination node IDs must be unique")
    edge_dst = table[dst]
    if edge_dst.size and int(edge_dst.min()) < 0:
        raise ConfigError("sampled edges: a destination is not among the seeds")
    seen = np.zeros(n, dtype=bool)
    seen[src] = True
    seen[dst_nid] = False
    new = np.flatnonzero(seen)  # the other sources, ascending
    table[new] = np.arange(n_dst, n_dst + new.size, dtype=np.int64)
    return np.concatenate([dst_nid, new]), table[src], edge_dst


def _relabel_sorted(
    dst_nid: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique`` + ``searchsorted`` relabelling (IDs spread over a huge range)."""
    order = np.argsort(dst_nid, kind="stable")
    sorted_dst = dst_nid[order]
    if sorted_dst.size > 1 and bool(np.any(sorted_dst[1:] == sorted_dst[:-1])):
        raise ConfigError("seeds: destination node IDs must be unique")
    edge_dst = _positions(sorted_dst, order, dst)
    if edge_dst.size and int(edge_dst.min()) < 0:
        raise ConfigError("sampled edges: a destination is not among the seeds")
    uniq, inv = np.unique(src, return_inverse=True)
    pos = _positions(sorted_dst, order, uniq)
    new = pos < 0
    new_local = dst_nid.size + np.cumsum(new) - 1
    local = np.where(new, new_local, pos)
    src_nid = np.concatenate([dst_nid, uniq[new]])
    return src_nid, local[inv.reshape(-1)].astype(np.int64), edge_dst


def blocks_to_arrays(blocks: list[Block]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"num_blocks": np.array(len(blocks), dtype=np.int64)}
    for i, b in enumerate(blocks):
        out.update(b.to_arrays(f"b{i}/"))
    return out


def blocks_from_arrays(arrays: dict[str, np.ndarray]) -> list[Block]:
    n = int(arrays["num_blocks"])
    return [Block.from_arrays(arrays, f"b{i}/") for i in range(n)]
