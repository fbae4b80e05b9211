"""Where one-hop samples come from: an in-memory graph or the distributed graph.

A :class:`GraphSource` offers what the loaders need (one-hop sampling, edge
endpoints, node count) plus a JSON ``spec`` from which a sampler process
re-opens its own source (its own server connections).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from distgnn import contract
from distgnn.errors import ConfigError
from distgnn.sampling.local import LocalGraph
from distgnn.sampling.negative import UniformNegativeSampler
from distgnn.sampling.neighbor import Fanout, Hop, OneHop


class GraphSource(Protocol):
    def one_hop(self, rng: np.random.Generator) -> OneHop: ...
    def num_nodes(self) -> int: ...
    def find_edges(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
    def negatives(
        self, src: np.ndarray, eids: np.ndarray, k: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def spec(self) -> dict[str, Any] | None: ...
    def close(self) -> None: ...


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return np.asarray(x)


class LocalSource:
    """A :class:`LocalGraph`; with ``path`` (its file) sampler processes can open it too."""

    def __init__(self, g: LocalGraph, path: str | None = None) -> None:
        self.g, self.path = g, path

    def one_hop(self, rng: np.random.Generator) -> OneHop:
        return self.g.one_hop(rng)

    def num_nodes(self) -> int:
        return self.g.num_nodes()

    def find_edges(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.g.find_edges(eids)

    def negatives(
        self, src: np.ndarray, eids: np.ndarray, k: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return UniformNegativeSampler(k)(src, self.num_nodes(), rng)

    def spec(self) -> dict[str, Any] | None:
        return None if self.path is None else {"kind": "local", "path": self.path}

    def close(self) -> None:
        return None


class _DistOneHop:
    def __init__(self, g: Any, rng: np.random.Generator) -> None:
        self.g, self.rng = g, rng

    def __call__(
        self, seeds: np.ndarray, fanout: Fanout, *, replace: bool, prob: str | None, edge_dir: str
    ) -> Hop:
        if edge_dir != "in":
            raise ConfigError("edge_dir: the distributed graph samples in-edges only")
        from distgnn.distributed.sampling import sample_hop_edges, seed_ids

        fan: Any = dict(fanout) if not isinstance(fanout, int) else fanout
        if isinstance(fan, int) and len(self.g.canonical_etypes) > 1:
            fan = {c: fan for c in self.g.canonical_etypes}  # DGL: the fanout of every type
        seed = int(self.rng.integers(0, 2**31 - 1))
        gid = seed_ids(self.g, np.asarray(seeds, dtype=np.int64))
        h = sample_hop_edges(self.g, gid, fan, replace=replace, prob=prob, seed=seed)
        # one edge type: no edge-type column (the blocks' type is 0, as from a local
        # graph; DGL's homogeneous blocks carry only EID), also from a server of the
        # per-edge layout, which sends zeros
        et = h.etype
        if et is not None:
            et = None if len(self.g.canonical_etypes) == 1 else et.astype(np.int64)
        return Hop(h.src, None, h.eid, et, dst_index=h.dst_index)


class DistSource:
    """A ``distgnn.distributed.DistGraph``; ``reopen`` is the spec a sampler process opens again."""

    def __init__(self, g: Any, reopen: dict[str, Any] | None, owner: Any = None) -> None:
        self.g, self._spec, self._owner = g, reopen, owner

    def one_hop(self, rng: np.random.Generator) -> OneHop:
        return _DistOneHop(self.g, rng)

    def num_nodes(self) -> int:
        return int(self.g.num_nodes())

    def find_edges(self, eids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Endpoints of homogeneous edge IDs, as homogeneous node IDs (any graph)."""
        ids = np.asarray(eids, dtype=np.int64)
        homo = getattr(self.g, "_find_homo", None)  # DistGraph: no per-type mapping
        src, dst = homo(ids) if homo is not None else self.g.find_edges(ids)
        return _np(src).astype(np.int64), _np(dst).astype(np.int64)

    def negatives(
        self, src: np.ndarray, eids: np.ndarray, k: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``k`` pairs ``(u, w)`` per positive edge ``(u, v)``; on a graph with several node
        types ``w`` is uniform over the nodes of the edge's destination type (DGL's
        ``Uniform``), else over all nodes."""
        book = getattr(self.g, "book", None)
        if book is None or len(book.ntypes) <= 1:
            return UniformNegativeSampler(k)(src, self.num_nodes(), rng)
        et = np.repeat(np.asarray(book.map_eids(eids)[0], dtype=np.int64), k)
        dst_t = np.asarray(
            [book.ntypes.index(c[2]) for c in book.canonical_etypes], dtype=np.int64
        )[et]
        neg_dst = np.empty(et.size, dtype=np.int64)
        for t, ntype in enumerate(book.ntypes):
            sel = np.flatnonzero(dst_t == t)
            if sel.size:
                n_t = int(book.ntype_offsets(ntype)[-1])
                neg_dst[sel] = book.to_homogeneous_nids(ntype, rng.integers(0, n_t, sel.size))
        return np.repeat(np.asarray(src, dtype=np.int64), k), neg_dst

    def spec(self) -> dict[str, Any] | None:
        return self._spec

    def close(self) -> None:
        for obj in (self._owner, self.g):
            fn: Callable[[], Any] | None = getattr(obj, "close", None) if obj is not None else None
            if fn is not None:
                fn()
                break


def source_for(g: Any, reopen: dict[str, Any] | None = None) -> GraphSource:
    """Wrap a graph object (LocalGraph or DistGraph) as a source.

    ``reopen`` is the JSON spec sampler processes open; for a DistGraph it defaults to
    the graph named by the contract environment (``DISTGNN_SERVERS`` / ``DISTGNN_MANIFEST``).
    """
    if isinstance(g, LocalGraph):
        return LocalSource(g, reopen.get("path") if reopen else None)
    if reopen is None:  # sampler processes re-open the graph the environment names
        ctx = getattr(g, "ctx", None)
        if os.environ.get(contract.ENV_SERVERS) and not getattr(ctx, "standalone", True):
            reopen = {"kind": "dist"}
        elif os.environ.get(contract.ENV_MANIFEST) and getattr(ctx, "standalone", False):
            reopen = {"kind": "standalone", "manifest": os.environ[contract.ENV_MANIFEST]}
    return DistSource(g, reopen)


def open_source(spec: dict[str, Any]) -> GraphSource:
    """Open a source from its spec (in a sampler process)."""
    kind = spec.get("kind")
    if kind == "local":
        return LocalSource(LocalGraph.from_npz(str(spec["path"])), str(spec["path"]))
    if kind == "standalone":
        from distgnn.distributed.graph import DistGraph

        return DistSource(DistGraph.standalone(str(spec["manifest"])), spec)
    if kind == "dist":
        from distgnn.train.graph import open_dist_graph

        g, owner = open_dist_graph(spec)
        return DistSource(g, spec, owner)
    raise ConfigError(f"sampler source: unknown kind {kind!r}")
