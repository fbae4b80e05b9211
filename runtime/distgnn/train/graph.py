"""The graph a trainer trains on: the servers, a standalone manifest, or a local file.

* ``DISTGNN_SERVERS`` set: ``distgnn.distributed.initialize()`` + ``DistGraph`` (servers);
  sampler processes re-open their own connections from the same environment.
* otherwise ``DISTGNN_MANIFEST``: ``DistGraph.standalone(manifest)`` (all partitions
  in-process), or, for a ``.npz`` graph file, an in-memory :class:`LocalGraph`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distgnn import contract
from distgnn.distributed.featcache import CacheStats, FeatureCache
from distgnn.distributed.localread import LocalReader, LocalStats
from distgnn.distributed.localsample import LocalSampler, SampleStats
from distgnn.errors import ConfigError, StorageNotFound
from distgnn.rpc.stats import ClientStats
from distgnn.sampling.local import LocalGraph
from distgnn.sampling.source import GraphSource, LocalSource, source_for
from distgnn.train.ddp import DDPContext

_CHUNK = 1 << 18


@dataclass
class TrainGraph:
    """A graph plus the source its loaders sample from."""

    g: Any
    source: GraphSource
    owner: Any = None

    def num_nodes(self) -> int:
        return self.source.num_nodes()

    def num_edges(self) -> int:
        return int(self.g.num_edges())

    def read(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        # indexing, not ``name in ndata``: a DistGraph's ``in`` asks server 0 for its
        # tensor list every time (a round trip per read, two per step); indexing uses
        # the cached list and asks only when the name is not in it
        try:
            data = self.g.ndata[name]
        except KeyError:
            raise ConfigError(
                f"node data {name!r} not found in the graph (it has: {self._have()})"
            ) from None
        out = data[ids]
        return out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out))

    def field_names(self) -> list[str]:
        """The graph's node fields (of its only node type)."""
        return sorted(str(k) for k in self.g.ndata.keys())  # noqa: SIM118 (a DistGraph's ndata)

    def _have(self) -> str:
        return ", ".join(self.field_names()) or "no node fields"

    def require(self, fields: Mapping[str, str]) -> None:
        """ConfigError naming the option (``--feat (trainers.app.feat)``) whose node field
        the graph lacks, and the fields it has: at start, not at the first read."""
        have = set(self.field_names())
        for option, name in fields.items():
            if name not in have:
                raise ConfigError(
                    f"{option}: node data {name!r} not found in the graph (it has: {self._have()})"
                )

    def read_all(self, name: str) -> np.ndarray:
        """All rows of a (small) node field, read in chunks."""
        return _in_chunks(self.read, name, self.num_nodes())

    def mask_ids(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.read_all(name).astype(bool)).astype(np.int64)

    def split_nodes(self, name: str, ctx: DDPContext) -> np.ndarray:
        """This trainer's share of the nodes in mask ``name`` (locality-aware when possible)."""
        if ctx.world_size > 1 and not isinstance(self.g, LocalGraph):
            from distgnn.distributed.split import node_split

            mask = torch.from_numpy(self.read_all(name).astype(bool))
            out = node_split(
                mask, self.g.get_partition_book(), rank=ctx.rank, world_size=ctx.world_size
            )
            return np.asarray(out, dtype=np.int64)
        return np.array_split(self.mask_ids(name), ctx.world_size)[ctx.rank]

    # --- edge data (edge classification) ---------------------------------------------

    def edge_field_names(self) -> list[str]:
        """The graph's edge fields (of its only edge type)."""
        return sorted(str(k) for k in self.g.edata.keys())  # noqa: SIM118 (a DistGraph's edata)

    def require_edges(self, fields: Mapping[str, str]) -> None:
        """ConfigError naming the option whose edge field the graph lacks, and the edge
        fields it has."""
        have = self.edge_field_names()
        for option, name in fields.items():
            if name not in have:
                listed = ", ".join(have) or "no edge fields"
                raise ConfigError(
                    f"{option}: edge data {name!r} not found in the graph (it has: {listed})"
                )

    def read_edges(self, name: str, eids: torch.Tensor) -> torch.Tensor:
        """Rows ``eids`` of edge field ``name``."""
        data = self.g.edata[name]
        out = data[eids.numpy() if isinstance(self.g, LocalGraph) else eids]
        return out if isinstance(out, torch.Tensor) else torch.as_tensor(np.asarray(out))

    def read_all_edges(self, name: str) -> np.ndarray:
        """All rows of a (small) edge field, read in chunks."""
        return _in_chunks(self.read_edges, name, self.num_edges())

    def edge_mask_ids(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.read_all_edges(name).astype(bool)).astype(np.int64)

    def split_edges(self, name: str, ctx: DDPContext) -> np.ndarray:
        """This trainer's share of the edges in edge mask ``name`` (DGL's ``edge_split``:
        the edges of its partition first)."""
        mask = self.read_all_edges(name).astype(bool)
        if ctx.world_size > 1 and not isinstance(self.g, LocalGraph):
            from distgnn.distributed.split import edge_split

            out = edge_split(
                torch.from_numpy(mask),
                self.g.get_partition_book(),
                rank=ctx.rank,
                world_size=ctx.world_size,
            )
            return np.asarray(out, dtype=np.int64)
        return np.array_split(np.flatnonzero(mask).astype(np.int64), ctx.world_size)[ctx.rank]

    def client_stats(self) -> ClientStats | None:
        """Counters of the connections to the graph servers (None without servers)."""
        backend = getattr(getattr(self.g, "ctx", None), "backend", None)
        stats = getattr(backend, "stats", None)
        return stats if isinstance(stats, ClientStats) else None

    def local_stats(self) -> LocalStats | None:
        """Rows read from a co-located server's shared memory (None: not co-located)."""
        reader = getattr(getattr(self.g, "ctx", None), "local_reader", None)
        return reader.stats if isinstance(reader, LocalReader) else None

    def local_sample_stats(self) -> SampleStats | None:
        """Sampling requests answered from a co-located server's shared memory in this
        process (None: not co-located, or local sampling off)."""
        sampler = getattr(getattr(self.g, "ctx", None), "local_sampler", None)
        return sampler.stats if isinstance(sampler, LocalSampler) else None

    def cache_stats(self) -> CacheStats | None:
        """The feature cache's counters (None: no cache, ``DISTGNN_FEATURE_CACHE_MB``)."""
        cache = getattr(getattr(self.g, "ctx", None), "feature_cache", None)
        return cache.stats if isinstance(cache, FeatureCache) else None

    def close(self) -> None:
        self.source.close()


def open_dist_graph(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(DistGraph, context)`` connected to the servers named by the environment."""
    from distgnn.distributed.context import initialize
    from distgnn.distributed.graph import DistGraph

    return DistGraph(ctx=initialize(), own=True), None


def open_train_graph(env: Mapping[str, str] | None = None) -> TrainGraph:
    """Open the graph described by the contract environment."""
    e = os.environ if env is None else env
    if e.get(contract.ENV_SERVERS):
        spec = {"kind": "dist"}
        g, owner = open_dist_graph(spec)
        return TrainGraph(g, source_for(g, spec), owner)
    manifest = e.get(contract.ENV_MANIFEST)
    if not manifest:
        raise ConfigError(
            f"{contract.ENV_SERVERS} or {contract.ENV_MANIFEST} must name the graph to train on"
        )
    try:
        if manifest.endswith(".npz"):
            lg = LocalGraph.from_npz(manifest)
            return TrainGraph(lg, LocalSource(lg, manifest))
        from distgnn.distributed.graph import DistGraph

        dg = DistGraph.standalone(manifest)
    except StorageNotFound as e:  # say where the name came from
        raise StorageNotFound(f"{contract.ENV_MANIFEST}: {e}") from e
    except FileNotFoundError as e:  # a local .npz path
        raise StorageNotFound(f"{contract.ENV_MANIFEST}: {manifest}: not found") from e
    return TrainGraph(dg, source_for(dg, {"kind": "standalone", "manifest": manifest}))


def _in_chunks(read: Callable[[str, torch.Tensor], torch.Tensor], name: str, n: int) -> np.ndarray:
    """Rows ``0..n`` of field ``name`` by ``read(name, ids)``, ``_CHUNK`` at a time."""
    parts = [read(name, torch.arange(i, min(i + _CHUNK, n))).numpy() for i in range(0, n, _CHUNK)]
    return np.concatenate(parts) if parts else np.zeros(0)
