"""DGL's ``DistNodeDataLoader`` / ``DistEdgeDataLoader`` on DistGNN's batch loader.

Batches are sampled in the trainer or in ``num_samplers`` sampler processes per
trainer (default: the job's ``numSamplers``, i.e. ``DISTGNN_NUM_SAMPLERS``), each
with its own server connections; see :mod:`distgnn.sampling.loader`. Seeds given
per node (edge) type yield typed blocks and per-type ``input_nodes``/``output_nodes``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from distgnn import contract
from distgnn.dataloading.negative_sampler import num_negatives
from distgnn.dataloading.pair_graph import typed_pair_graph
from distgnn.dataloading.types import GraphTyping, graph_typing, to_numpy
from distgnn.errors import ConfigError
from distgnn.sampling.batches import EdgeBatcher, NodeBatcher
from distgnn.sampling.blocks import EID, Block
from distgnn.sampling.loader import BatchLoader
from distgnn.sampling.neighbor import NeighborSampler
from distgnn.sampling.source import source_for

log = logging.getLogger("distgnn.dataloading")

EXCLUDE = {None: "none", "self": "self", "reverse_id": "reverse_id", "reverse": "reverse"}


def env_num_samplers(env: Mapping[str, str] | None = None) -> int:
    """The job's sampler processes per trainer (``DISTGNN_NUM_SAMPLERS``, default 0)."""
    e = os.environ if env is None else env
    raw = e.get(contract.ENV_NUM_SAMPLERS, "").strip() or "0"
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"{contract.ENV_NUM_SAMPLERS}: {raw!r} is not an int") from None
    if n < 0:
        raise ConfigError(f"{contract.ENV_NUM_SAMPLERS}: {n} must be >= 0")
    return n


def _seed(seed: int | None) -> int:
    # as DGL, shuffling follows torch's random state unless a seed is given
    return int(torch.randint(0, 2**31 - 1, (1,)).item()) if seed is None else int(seed)


def _engine_sampler(s: NeighborSampler, typing: GraphTyping | None, g: Any) -> NeighborSampler:
    """The sampler with per-type fanout keys as ``"SRC:ETYPE:DST"`` strings."""
    fanouts: list[Any] = []
    for f in s.fanouts:
        if isinstance(f, Mapping):
            if typing is None:
                names = list(getattr(g, "etype_names", []) or [])
                fanouts.append({_local_key(k, names): v for k, v in f.items()})
            else:
                fanouts.append({typing.etype_key(k): v for k, v in f.items()})
        elif typing is not None and len(typing.types.canonical_etypes) > 1:
            # DGL: an int fanout on a heterogeneous graph applies to every edge type
            fanouts.append({":".join(c): f for c in typing.types.canonical_etypes})
        else:
            fanouts.append(f)
    return NeighborSampler(fanouts, edge_dir=s.edge_dir, prob=s.prob, replace=s.replace)


def _local_key(k: Any, names: list[str]) -> str:
    key = ":".join(k) if isinstance(k, tuple) else str(k)
    if key in names:
        return key
    found = [n for n in names if n.split(":")[1] == key]
    if len(found) == 1:
        return found[0]
    raise ConfigError(f"fanouts: unknown edge type {k!r} (graph has {names})")


def _dropped(num_workers: int | None, pin_memory: bool | None) -> None:
    """DGL's distributed loaders drop ``num_workers`` and ``pin_memory`` (its
    ``_remove_kwargs_dist``); so do these, saying where sampler processes come from."""
    if num_workers:
        log.info(
            "num_workers=%d ignored, as DGL's distributed loaders do: sampler processes are "
            "the job's spec.trainers.numSamplers (or num_samplers=)",
            num_workers,
        )
    if pin_memory:
        log.info("pin_memory ignored: distributed loaders do not pin memory (as DGL's)")


def _check_sampler(sampler: Any) -> NeighborSampler:
    if not isinstance(sampler, NeighborSampler):
        raise ConfigError(
            f"graph_sampler: {type(sampler).__name__} is not a distgnn.dataloading "
            "NeighborSampler (custom samplers cannot run in sampler processes)"
        )
    return sampler


class _Loader:
    """What both loaders share: the batch loader, epochs, device, closing."""

    def __init__(
        self, engine: BatchLoader, typing: GraphTyping | None, device: Any, out_device: Any
    ) -> None:
        self._engine, self._typing = engine, typing
        self.device = torch.device(device) if device is not None else out_device

    def __len__(self) -> int:
        return len(self._engine)

    @property
    def num_samplers(self) -> int:
        return self._engine.num_samplers

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` samples (shuffling depends on it)."""
        self._engine.set_epoch(epoch)

    def _blocks(self, blocks: list[Block]) -> list[Block]:
        if self._typing is not None:
            blocks = [self._typing.type_block(b) for b in blocks]
        if self.device is not None:
            blocks = [b.to(self.device) for b in blocks]
        return blocks

    def _ids(self, ids: torch.Tensor, typed: bool) -> Any:
        if typed and self._typing is not None:
            out: Any = self._typing.per_type(ids.numpy())
            if self.device is not None:
                out = {k: v.to(self.device) for k, v in out.items()}
            return out
        return ids if self.device is None else ids.to(self.device)

    def close(self) -> None:
        """Stop the sampler processes (also done when the loader is garbage-collected)."""
        self._engine.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DistNodeDataLoader(_Loader):
    """``DistNodeDataLoader(g, nids, graph_sampler, device=None, batch_size=1,
    shuffle=False, drop_last=False)``: yields ``(input_nodes, output_nodes, blocks)``.

    ``nids``: IDs, a boolean mask, or (heterogeneous graphs) a dict ``ntype -> IDs``,
    which makes ``input_nodes``/``output_nodes`` dicts and the blocks typed
    (``input_nodes``: every node type; ``output_nodes``: the types of the batch's seeds,
    as DGL's). ``num_samplers`` defaults to ``DISTGNN_NUM_SAMPLERS``; ``seed`` (default: from
    torch's random state) fixes the shuffling. ``num_workers`` and ``pin_memory`` are
    accepted and ignored, as DGL's distributed loaders do.
    """

    def __init__(
        self,
        g: Any,
        nids: Any,
        graph_sampler: NeighborSampler,
        device: Any = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        queue_size: int | None = None,
        num_samplers: int | None = None,
        seed: int | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
    ) -> None:
        _dropped(num_workers, pin_memory)
        sampler = _check_sampler(graph_sampler)
        typing = graph_typing(g)
        self._typed = isinstance(nids, Mapping)
        if self._typed:
            if typing is None:
                seeds = np.concatenate([to_numpy(v) for v in nids.values()] or [np.zeros(0)])
                self._typed = False
            else:
                seeds = typing.homo_seeds(nids)
        else:
            if typing is not None and len(typing.ntypes) > 1:
                raise ConfigError(
                    f"nids: the graph has node types {typing.ntypes}; give a dict ntype -> IDs"
                )
            seeds = to_numpy(nids)
        n = env_num_samplers() if num_samplers is None else num_samplers
        batcher = NodeBatcher(
            seeds, _engine_sampler(sampler, typing, g), batch_size, shuffle, drop_last, _seed(seed)
        )
        super().__init__(
            BatchLoader(source_for(g), batcher, n), typing, device, sampler.output_device
        )

    def __iter__(self) -> Iterator[tuple[Any, Any, list[Block]]]:
        for inp, out, blocks in self._engine:
            seeds = self._ids(out, self._typed)
            if isinstance(seeds, dict):  # DGL's: only the types of this batch's seeds
                seeds = {t: v for t, v in seeds.items() if len(v)}
            yield self._ids(inp, self._typed), seeds, self._blocks(blocks)


class EdgePredictionSampler:
    """DGL's ``as_edge_prediction_sampler`` result: a neighbour sampler plus what a
    link-prediction loader needs (negatives, exclusion)."""

    def __init__(
        self,
        sampler: NeighborSampler,
        exclude: str | None = None,
        reverse_eids: Any = None,
        reverse_etypes: Any = None,
        negative_sampler: Any = None,
        prefetch_labels: Any = None,
    ) -> None:
        self.sampler = _check_sampler(sampler)
        self.exclude, self.reverse_eids = exclude, reverse_eids
        self.negative_sampler = negative_sampler
        if reverse_etypes is not None:
            raise ConfigError("reverse_etypes: not supported yet (use exclude='reverse_id')")
        if prefetch_labels is not None:
            raise ConfigError("prefetch_labels: not supported (read labels from g.ndata)")


def as_edge_prediction_sampler(
    sampler: NeighborSampler,
    exclude: str | None = None,
    reverse_eids: Any = None,
    reverse_etypes: Any = None,
    negative_sampler: Any = None,
    prefetch_labels: Any = None,
) -> EdgePredictionSampler:
    """Wrap a neighbour sampler for edge (link-prediction) loaders, as DGL's."""
    return EdgePredictionSampler(
        sampler, exclude, reverse_eids, reverse_etypes, negative_sampler, prefetch_labels
    )


class DistEdgeDataLoader(_Loader):
    """``DistEdgeDataLoader(g, eids, graph_sampler, device=None, batch_size=1,
    shuffle=False, drop_last=False, negative_sampler=None, exclude=None,
    reverse_eids=None)``: yields ``(input_nodes, pair_graph, neg_pair_graph, blocks)``,
    or ``(input_nodes, pair_graph, blocks)`` without a negative sampler.

    ``exclude``: ``None``, ``"self"`` (drop the batch's edges from the sampled
    neighbourhoods), ``"reverse_id"`` (also ``reverse_eids[eids]``) or ``"reverse"``
    (also every ``(v, u)`` edge, found by endpoints). ``graph_sampler`` may be the
    result of :func:`as_edge_prediction_sampler` instead of these keywords.
    """

    def __init__(
        self,
        g: Any,
        eids: Any,
        graph_sampler: NeighborSampler | EdgePredictionSampler,
        device: Any = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        negative_sampler: Any = None,
        exclude: str | None = None,
        reverse_eids: Any = None,
        reverse_etypes: Any = None,
        queue_size: int | None = None,
        num_samplers: int | None = None,
        seed: int | None = None,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
    ) -> None:
        _dropped(num_workers, pin_memory)
        if isinstance(graph_sampler, EdgePredictionSampler):
            ep = graph_sampler
            sampler = ep.sampler
            negative_sampler = negative_sampler or ep.negative_sampler
            exclude = exclude or ep.exclude
            reverse_eids = reverse_eids if reverse_eids is not None else ep.reverse_eids
        else:
            sampler = _check_sampler(graph_sampler)
        if reverse_etypes is not None:
            raise ConfigError("reverse_etypes: not supported yet (use exclude='reverse_id')")
        if exclude not in EXCLUDE:
            raise ConfigError(
                f"exclude: {exclude!r} is not None, 'self', 'reverse_id' or 'reverse' "
                "(a function cannot run in sampler processes)"
            )
        typing = graph_typing(g)
        self._typed = isinstance(eids, Mapping) and typing is not None
        if isinstance(eids, Mapping):
            if typing is not None:
                seeds = typing.homo_eids(eids)
            else:
                seeds = np.concatenate([to_numpy(v) for v in eids.values()] or [np.zeros(0)])
        else:
            if typing is not None and len(typing.types.canonical_etypes) > 1:
                raise ConfigError(
                    "eids: the graph has several edge types; give a dict etype -> edge IDs"
                )
            seeds = to_numpy(eids)
        rev = None if reverse_eids is None else to_numpy(reverse_eids)
        self._with_neg = negative_sampler is not None
        n = env_num_samplers() if num_samplers is None else num_samplers
        batcher = EdgeBatcher(
            seeds,
            _engine_sampler(sampler, typing, g),
            batch_size,
            num_negatives(negative_sampler),
            EXCLUDE[exclude],
            shuffle,
            drop_last,
            _seed(seed),
            reverse_eids=rev,
        )
        self._k = num_negatives(negative_sampler)
        engine = BatchLoader(source_for(g), batcher, n)
        super().__init__(engine, typing if self._typed else None, device, sampler.output_device)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for inp, pos, neg, raw_blocks in self._engine:
            blocks = self._blocks(raw_blocks)
            pos_g: Any = pos
            neg_g: Any = neg
            if self._typed and self._typing is not None:
                last = blocks[-1]
                et = self._typing.map_eids(pos.edata[EID].numpy())[0]
                pos_g = typed_pair_graph(self._typing, last, pos, et, True)
                neg_g = typed_pair_graph(self._typing, last, neg, np.repeat(et, self._k), False)
            pos_g, neg_g = pos_g.to(self.device), neg_g.to(self.device)
            if self._with_neg:
                yield self._ids(inp, self._typed), pos_g, neg_g, blocks
            else:
                yield self._ids(inp, self._typed), pos_g, blocks
