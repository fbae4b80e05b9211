"""``node_split`` / ``edge_split``: each trainer's share of a set of nodes or edges.

When the trainers are a multiple of the partitions, DGL's algorithm is used (see
:func:`node_split`). Otherwise (DGL refuses this case) rank ``r`` belongs to
partition ``r % num_parts``: with ``force_even`` every rank
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
from distgnn.distributed.partition_book import RangePartitionBook
from distgnn.distributed.tensor import DistTensor
from distgnn.errors import ConfigError
from distgnn.partition.book import PartitionBook


def _mask_ids(items: Any, n: int, what: str) -> np.ndarray:
    """Sorted positions of the non-zero entries of a mask (any dtype, as DGL's nonzero)."""
    if isinstance(items, DistTensor):
        items = np.concatenate([items.pull_numpy(c) for c in items._chunks()])
    if isinstance(items, torch.Tensor):
        items = items.detach().cpu().numpy()
    a = np.asarray(items)
    if a.ndim != 1 or len(a) != n:
        raise ConfigError(
            f"{what} must be a mask with one entry per {what[:-1]} ({n}), got shape "
            f"{list(a.shape)} (DGL's node_split/edge_split take masks, not ID lists)"
        )
    return np.flatnonzero(a).astype(np.int64)


def even_offsets(n: int, k: int) -> np.ndarray:
    """Bounds of ``k`` contiguous shares of ``n`` items whose sizes differ by at most 1."""
    base = np.full(k, n // k, dtype=np.int64)
    base[: n % k] += 1
    return np.concatenate([[0], np.cumsum(base)])


def _trainer_ids(ids: Any, n: int, world: int) -> np.ndarray:
    if isinstance(ids, DistTensor):
        ids = np.concatenate([ids.pull_numpy(c) for c in ids._chunks()])
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    t = np.asarray(ids).reshape(-1).astype(np.int64)
    if len(t) != n:
        raise ConfigError(f"trainer IDs: {len(t)} entries, expected {n}")
    most = int(t.max()) + 1 if len(t) else 0
    if most > world:  # partitioned for more trainers than run now (DGL's rule)
        if most % world:
            raise ConfigError(f"trainer IDs go up to {most - 1}: not a multiple of {world}")
        t = t // (most // world)
    return t


def _by_trainer_id(
    part_ids: np.ndarray, tid: np.ndarray, part: int, per: int, client: int
) -> np.ndarray:
    """DGL's split by trainer IDs: own-partition items by trainer, the rest evenly."""
    home = tid[part_ids] // per == part
    local, remote = part_ids[home], part_ids[~home]
    local = local[np.argsort(tid[local] % per, kind="stable")]
    lo, ro = even_offsets(len(local), per), even_offsets(len(remote), per)
    return np.concatenate([local[lo[client] : lo[client + 1]], remote[ro[client] : ro[client + 1]]])


def _dgl_split(
    ids: np.ndarray,
    offsets: np.ndarray,
    rank: int,
    world: int,
    force_even: bool,
    trainer_ids: Any,
) -> np.ndarray:
    """DGL's algorithm (``world`` a multiple of the number of partitions)."""
    k = len(offsets) - 1
    per = world // k
    part, client = rank // per, rank % per
    if not force_even:  # the partition's own items, contiguous shares among its trainers
        mine = ids[(ids >= offsets[part]) & (ids < offsets[part + 1])]
        size = len(mine) // per
        return (
            mine[size * client :]
            if client + 1 == per
            else mine[size * client : size * (client + 1)]
        )
    bounds = even_offsets(len(ids), k)
    part_ids = ids[bounds[part] : bounds[part + 1]]
    if per == 1:
        return part_ids
    if trainer_ids is None:  # a permutation seeded by the partition, as DGL's
        off = even_offsets(len(part_ids), per)
        perm = np.random.RandomState(part).permutation(len(part_ids))
        return part_ids[np.sort(perm[off[client] : off[client + 1]])]
    tid = _trainer_ids(trainer_ids, int(offsets[-1]), world)
    return _by_trainer_id(part_ids, tid, part, per, client)


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
    what: str,
    rank: int | None,
    world_size: int | None,
    force_even: bool,
    trainer_ids: Any,
) -> torch.Tensor:
    env = contract.TrainerEnv.from_env()
    rank = env.rank if rank is None else rank
    world = env.world_size if world_size is None else world_size
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not in [0, world_size={world})")
    ids = _mask_ids(items, int(offsets[-1]), what)
    k = len(offsets) - 1
    if world >= k and world % k == 0:
        return torch.from_numpy(_dgl_split(ids, offsets, rank, world, force_even, trainer_ids))
    if trainer_ids is not None:
        raise ConfigError(
            f"trainer IDs need world_size ({world}) to be a multiple of the partitions ({k})"
        )
    bounds = np.searchsorted(ids, offsets)
    per_part = [ids[bounds[p] : bounds[p + 1]] for p in range(k)]
    fn = split_even if force_even else split_local
    return torch.from_numpy(fn(per_part, rank, world))


def _book(items: Any, partition_book: Any) -> RangePartitionBook:
    if partition_book is None:
        if not isinstance(items, DistTensor):
            raise ConfigError("partition_book is required unless the mask is a DistTensor")
        return items.policy.partition_book
    if isinstance(partition_book, PartitionBook):
        return RangePartitionBook(partition_book)
    return partition_book


def node_split(
    nodes: Any,
    partition_book: Any = None,
    ntype: str = "_N",
    rank: int | None = None,
    force_even: bool = True,
    node_trainer_ids: Any = None,
    *,
    world_size: int | None = None,
) -> torch.Tensor:
    """DGL's ``node_split``: this trainer's share of the nodes selected by a mask.

    ``nodes`` is a mask (bool, or any numbers: non-zero selects) of length
    ``num_nodes(ntype)``, a tensor or a DistTensor. When the trainers are a multiple of
    the partitions (DGL's requirement), the result is DGL's: the selected IDs are cut in
    even contiguous shares per partition, and a partition's share among its trainers is
    random (seeded by the partition) or follows ``node_trainer_ids``. Otherwise every
    trainer still gets ``floor`` or ``ceil`` of the total, its partition's items first
    (see the module doc). ``rank``/``world_size`` default to ``RANK``/``WORLD_SIZE``.
    """
    book = _book(nodes, partition_book)
    return _split(
        nodes, book._noffsets(ntype), "nodes", rank, world_size, force_even, node_trainer_ids
    )


def edge_split(
    edges: Any,
    partition_book: Any = None,
    etype: str | tuple[str, str, str] = "_E",
    rank: int | None = None,
    force_even: bool = True,
    edge_trainer_ids: Any = None,
    *,
    world_size: int | None = None,
) -> torch.Tensor:
    """DGL's ``edge_split``: the same as :func:`node_split` for a mask over edges."""
    book = _book(edges, partition_book)
    return _split(
        edges, book._eoffsets(etype), "edges", rank, world_size, force_even, edge_trainer_ids
    )
