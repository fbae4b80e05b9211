"""What one mini-batch is made of, computed from ``(epoch, batch index)`` only.

A batcher is deterministic given its seed, the epoch and the batch index, so a
batch is the same whichever process (trainer or sampler process) builds it.
Batches travel as flat ``name -> array`` dicts (see :mod:`distgnn.sampling.wire`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError
from distgnn.sampling.blocks import EID, NID, Block, blocks_from_arrays, blocks_to_arrays
from distgnn.sampling.negative import UniformNegativeSampler
from distgnn.sampling.neighbor import Exclusion, NeighborSampler
from distgnn.sampling.source import GraphSource

EXCLUDE_MODES = ("none", "self", "reverse", "reverse_id")


class PairGraph:
    """Node pairs to score (DGL's ``pair_graph``): edges ``src -> dst`` over the output
    nodes (``blocks[-1].dstdata``), with ``ndata``/``edata`` (``ndata[NID]``: the nodes'
    graph IDs, ``edata[EID]``: the seed edge IDs of a positive graph), ``apply_edges``,
    ``local_scope`` and ``to(device)``.
    """

    is_block = False

    def __init__(
        self,
        src: torch.Tensor,
        dst: torch.Tensor,
        num_nodes: int,
        eid: torch.Tensor | None = None,
    ) -> None:
        self.src, self.dst, self._n = src, dst, int(num_nodes)
        self.ndata: dict[str, Any] = {}
        self.edata: dict[str, Any] = {} if eid is None else {EID: eid}

    def num_nodes(self, ntype: str | None = None) -> int:
        return self._n

    def num_edges(self, etype: Any = None) -> int:
        return int(self.src.shape[0])

    number_of_nodes = num_nodes
    number_of_edges = num_edges

    def num_src_nodes(self, ntype: str | None = None) -> int:
        return self._n

    num_dst_nodes = num_src_nodes

    @property
    def srcdata(self) -> dict[str, Any]:
        return self.ndata

    @property
    def dstdata(self) -> dict[str, Any]:
        return self.ndata

    def edges(self, device: Any = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if device is None:
            return self.src, self.dst
        return self.src.to(device), self.dst.to(device)

    def to(self, device: Any, **_: Any) -> PairGraph:
        if device is None:
            return self
        out = PairGraph(self.src.to(device), self.dst.to(device), self._n)
        out.ndata = {k: v.to(device) for k, v in self.ndata.items()}
        out.edata = {k: v.to(device) for k, v in self.edata.items()}
        return out

    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        """Node and edge data written inside the ``with`` block are dropped on exit."""
        nd, ed = dict(self.ndata), dict(self.edata)
        try:
            yield
        finally:
            self.ndata, self.edata = nd, ed

    def apply_edges(self, func: Any) -> None:
        """``func``: a ``distgnn.function`` built-in (``u_dot_v('h', 'h', 'score')``) or
        a Python function of an :class:`~distgnn.function.EdgeBatch` returning a dict."""
        from distgnn.function import EdgeBatch

        batch = EdgeBatch(self.src, self.dst, self.ndata, self.ndata, self.edata)
        self.edata.update(func(batch))


def _rng(seed: int, epoch: int, batch: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, batch, stream])


def shuffled_positions(seed: int, epoch: int, n: int) -> np.ndarray:
    """The positions of ``n`` seeds in epoch ``epoch``'s shuffled order."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def _sampler_spec(s: NeighborSampler) -> dict[str, Any]:
    fan = [dict(f) if not isinstance(f, int) else f for f in s.fanouts]
    return {"fanouts": fan, "replace": s.replace, "prob": s.prob, "edge_dir": s.edge_dir}


class Batcher:
    """Common part: seeds, batch size, shuffling, the neighbour sampler."""

    kind = ""

    def __init__(
        self,
        seeds: np.ndarray,
        sampler: NeighborSampler,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size: {batch_size} must be >= 1")
        self.seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
        self.sampler, self.batch_size = sampler, batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self._order: tuple[int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        n = self.seeds.size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_seeds(self, epoch: int, b: int) -> np.ndarray:
        ids = self.epoch_order(epoch) if self.shuffle else self.seeds
        return ids[b * self.batch_size : (b + 1) * self.batch_size]

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The seeds shuffled for ``epoch`` (the same permutation whoever asks), made once
        per epoch: the last epoch's order is kept (a batch of 1000 of 25k seeds took a
        permutation of all of them, ~0.3-0.7 ms a step)."""
        kept, seeds = self._order, self.seeds
        if kept is not None and kept[0] == epoch and kept[1] is seeds:
            return kept[2]
        ids = seeds[shuffled_positions(self.seed, epoch, seeds.size)]
        self._order = (epoch, seeds, ids)  # one assignment: safe beside a prefetch thread
        return ids

    def spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sampler": _sampler_spec(self.sampler),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "seed": self.seed,
        }

    def extra(self) -> bytes:
        """Arrays a sampler process needs besides the seeds (raw bytes)."""
        return b""

    def make(self, src: GraphSource, epoch: int, b: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def decode(self, arrays: dict[str, np.ndarray]) -> tuple[Any, ...]:
        raise NotImplementedError


class NodeBatcher(Batcher):
    """Node classification: ``(input_nodes, output_nodes, blocks)``."""

    kind = "node"

    def make(self, src: GraphSource, epoch: int, b: int) -> dict[str, np.ndarray]:
        seeds = self.batch_seeds(epoch, b)
        inp, out, blocks = self.sampler.sample_blocks(
            src.one_hop(_rng(self.seed, epoch, b, 0)), seeds
        )
        arrays = blocks_to_arrays(blocks)
        arrays.update(input_nodes=inp, output_nodes=out)
        return arrays

    def decode(
        self, arrays: dict[str, np.ndarray]
    ) -> tuple[torch.Tensor, torch.Tensor, list[Block]]:
        return (
            torch.from_numpy(arrays["input_nodes"]),
            torch.from_numpy(arrays["output_nodes"]),
            blocks_from_arrays(arrays),
        )


class EdgeBatcher(Batcher):
    """Link prediction: ``(input_nodes, pos_pair_graph, neg_pair_graph, blocks)``.

    Seeds are edge IDs. ``exclude`` drops from the sampled neighbourhoods the seed
    edges (``"self"``), also their reverse pairs ``(v, u)`` (``"reverse"``), or also
    the edges ``reverse_eids[seeds]`` (``"reverse_id"``, DGL's). ``num_negs=0``: no
    negative pairs.
    """

    kind = "edge"

    def __init__(
        self,
        seeds: np.ndarray,
        sampler: NeighborSampler,
        batch_size: int,
        num_negs: int = 1,
        exclude: str = "none",
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        reverse_eids: np.ndarray | None = None,
    ) -> None:
        super().__init__(seeds, sampler, batch_size, shuffle, drop_last, seed)
        if exclude not in EXCLUDE_MODES:
            raise ConfigError(f"exclude: {exclude!r} is not one of {', '.join(EXCLUDE_MODES)}")
        if exclude == "reverse_id" and reverse_eids is None:
            raise ConfigError("reverse_eids: needed with exclude='reverse_id'")
        if num_negs < 0:
            raise ConfigError(f"num_negs: {num_negs} must be >= 0")
        self.neg = UniformNegativeSampler(num_negs) if num_negs else None
        self.exclude = exclude
        self.reverse_eids = (
            None if reverse_eids is None else np.asarray(reverse_eids, dtype=np.int64).reshape(-1)
        )

    def spec(self) -> dict[str, Any]:
        k = self.neg.k if self.neg is not None else 0
        return {**super().spec(), "num_negs": k, "exclude": self.exclude}

    def extra(self) -> bytes:
        return b"" if self.reverse_eids is None else self.reverse_eids.tobytes()

    def make(self, src: GraphSource, epoch: int, b: int) -> dict[str, np.ndarray]:
        eids = self.batch_seeds(epoch, b)
        u, v = src.find_edges(eids)
        if self.neg is not None:  # per destination type on typed graphs
            nu, nv = src.negatives(u, eids, self.neg.k, _rng(self.seed, epoch, b, 1))
        else:
            nu = nv = np.zeros(0, dtype=np.int64)
        nodes, inv = np.unique(np.concatenate([u, v, nu, nv]), return_inverse=True)
        inv = inv.reshape(-1)
        p, q = u.size, nu.size
        excl = None
        if self.exclude == "self":
            excl = Exclusion(eids=eids)
        elif self.exclude == "reverse":
            excl = Exclusion(eids=eids, pairs=(np.concatenate([u, v]), np.concatenate([v, u])))
        elif self.exclude == "reverse_id":
            assert self.reverse_eids is not None
            excl = Exclusion(eids=np.concatenate([eids, self.reverse_eids[eids]]))
        one_hop = src.one_hop(_rng(self.seed, epoch, b, 0))
        inp, _, blocks = self.sampler.sample_blocks(one_hop, nodes, excl)
        arrays = blocks_to_arrays(blocks)
        arrays.update(
            input_nodes=inp,
            output_nodes=nodes,
            pos_eid=eids,
            pos_src=inv[:p],
            pos_dst=inv[p : 2 * p],
            neg_src=inv[2 * p : 2 * p + q],
            neg_dst=inv[2 * p + q :],
        )
        return arrays

    def decode(
        self, arrays: dict[str, np.ndarray]
    ) -> tuple[torch.Tensor, PairGraph, PairGraph, list[Block]]:
        n = int(arrays["output_nodes"].size)
        t = torch.from_numpy
        pos = PairGraph(t(arrays["pos_src"]), t(arrays["pos_dst"]), n, t(arrays["pos_eid"]))
        neg = PairGraph(t(arrays["neg_src"]), t(arrays["neg_dst"]), n)
        out = t(arrays["output_nodes"])
        pos.ndata[NID] = neg.ndata[NID] = out  # DGL's: the pair graphs' nodes' graph IDs
        return t(arrays["input_nodes"]), pos, neg, blocks_from_arrays(arrays)


def batcher_from_spec(spec: dict[str, Any], seeds: np.ndarray, extra: bytes = b"") -> Batcher:
    """Rebuild a batcher in a sampler process (seeds and ``extra`` arrays travel as raw bytes)."""
    s = spec["sampler"]
    sampler = NeighborSampler(
        s["fanouts"], edge_dir=s["edge_dir"], prob=s["prob"], replace=s["replace"]
    )
    common = {
        "shuffle": spec["shuffle"],
        "drop_last": spec["drop_last"],
        "seed": spec["seed"],
    }
    if spec["kind"] == "node":
        return NodeBatcher(seeds, sampler, spec["batch_size"], **common)
    if spec["kind"] == "edge":
        rev = np.frombuffer(extra, dtype=np.int64) if extra else None
        return EdgeBatcher(
            seeds,
            sampler,
            spec["batch_size"],
            spec["num_negs"],
            spec["exclude"],
            reverse_eids=rev,
            **common,
        )
    raise ConfigError(f"batcher: unknown kind {spec['kind']!r}")
