"""``node_split`` / ``edge_split``: each trainer's share of a set of nodes or edges.

Rank ``r`` belongs to partition ``r % num_parts``. With ``force_even`` every rank
gets ``floor`` or ``ceil`` of ``total / world_size`` items, taken first from its own
partition (split among that partition's ranks in rank order), then from what other
partitions have left over; every rank computes the same assignment, so the shares
cover the input exactly once. Without ``force_even`` each partition's items are split
evenly among its own ranks only (partitions without a rank go to rank ``p % world``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distgnn import contract
from distgnn.distributed.tensor import DistTensor, as_ids
from distgnn.errors import ConfigError
from distgnn.partition.book import PartitionBook


def _selected(items: Any, n: int) -> np.ndarray:
    """Sorted IDs from a mask (bool, uint8 or a DistTensor of length n) or an ID list."""
    is_mask = isinstance(items, DistTensor)
    if is_mask:
        items = items.pull_numpy(np.arange(len(items)))
    if isinstance(items, torch.Tensor):
        items = items.detach().cpu().numpy()
    a = np.asarray(items)
    if is_mask or a.dtype in (np.bool_, np.uint8):
        if a.ndim != 1 or len(a) != n:
            raise ConfigError(f"mask has shape {list(a.shape)}, expected [{n}]")
        return np.flatnonzero(a).astype(np.int64)
    ids = np.unique(as_ids(a))
    if ids.size and (ids[0] < 0 or ids[-1] >= n):
        raise ConfigError(f"IDs out of range [0, {n})")
    return ids


def split_even(per_part: list[np.ndarray], rank: int, world: int) -> np.ndarray:
    """The share of ``rank`` when parts' items are spread evenly (see module doc)."""
    k = len(per_part)
    total = sum(len(x) for x in per_part)
    quota = np.full(world, total // world, dtype=np.int64)
    quota[: total % world] += 1
    shares: list[list[np.ndarray]] = [[] for _ in range(world)]
    left = quota.copy()
    rest = []
    for p, items in enumerate(per_part):
        ranks = [r for r in range(world) if r % k == p]
        pos = 0
        for r in ranks:
            take = int(min(left[r], len(items) - pos))
            if take > 0:
                shares[r].append(items[pos : pos + take])
                left[r] -= take
                pos += take
        rest.append(items[pos:])
    pool = np.concatenate(rest) if rest else np.empty(0, np.int64)
    pos = 0
    for r in range(world):
        if left[r] > 0:
            shares[r].append(pool[pos : pos + left[r]])
            pos += int(left[r])
    mine = shares[rank]
    return np.sort(np.concatenate(mine)) if mine else np.empty(0, np.int64)


def split_local(per_part: list[np.ndarray], rank: int, world: int) -> np.ndarray:
    k = len(per_part)
    mine = []
    for p, items in enumerate(per_part):
        ranks = [r for r in range(world) if r % k == p] or [p % world]
        if rank in ranks:
            mine.append(np.array_split(items, len(ranks))[ranks.index(rank)])
    return np.sort(np.concatenate(mine)) if mine else np.empty(0, np.int64)


def _split(
    items: Any,
    offsets: np.ndarray,
    rank: int | None,
    world_size: int | None,
    force_even: bool,
) -> torch.Tensor:
    env = contract.TrainerEnv.from_env()
    rank = env.rank if rank is None else rank
    world = env.world_size if world_size is None else world_size
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not in [0, world_size={world})")
    ids = _selected(items, int(offsets[-1]))
    bounds = np.searchsorted(ids, offsets)
    per_part = [ids[bounds[p] : bounds[p + 1]] for p in range(len(offsets) - 1)]
    fn = split_even if force_even else split_local
    return torch.from_numpy(fn(per_part, rank, world))


def node_split(
    nodes: Any,
    partition_book: PartitionBook,
    ntype: str = "_N",
    rank: int | None = None,
    world_size: int | None = None,
    force_even: bool = True,
) -> torch.Tensor:
    """This rank's nodes (type-wise IDs of ``ntype``) among a mask or an ID list."""
    return _split(
        nodes, np.asarray(partition_book.ntype_offsets(ntype)), rank, world_size, force_even
    )


def edge_split(
    edges: Any,
    partition_book: PartitionBook,
    etype: str = "_N:_E:_N",
    rank: int | None = None,
    world_size: int | None = None,
    force_even: bool = True,
) -> torch.Tensor:
    """This rank's edges (type-wise IDs of ``etype``) among a mask or an ID list."""
    return _split(
        edges, np.asarray(partition_book.etype_offsets(etype)), rank, world_size, force_even
    )
