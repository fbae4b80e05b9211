"""Deterministic benchmark graphs: power-law degrees, nested communities, random ID order.

Nodes sit at random positions on a line; a community hierarchy is a set of nested
position ranges (small clusters inside sub-communities inside ``communities`` top-level
communities). Each edge picks its source by degree weight (Chung-Lu, Pareto weights),
then a level of the hierarchy (``locality``), then its destination by weight inside the
source's group at that level, or anywhere in the graph with the remaining probability.
Like real graphs, this gives local clustering that survives coarsening; a flat
community model (every in-community edge uniformly random over ~60k nodes) does not
coarsen, which makes METIS about twice as slow as on the graph the issue's reference
figures were measured on. Edges are de-duplicated and free of self-loops.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from distgnn.errors import ConfigError
from distgnn.graph.data import drop_repeats
from distgnn.log import step

log = logging.getLogger("distgnn.graph")


@dataclass(frozen=True)
class GenerateOptions:
    nodes: int = 1_000_000
    avg_degree: float = 12.0
    feat_dim: int = 100
    communities: int = 16
    """Top-level communities; a node's label is its community."""
    group_sizes: tuple[int, ...] = (64, 2048)
    """Nested group sizes below the communities, smallest first."""
    locality: tuple[float, ...] = (0.55, 0.25, 0.12)
    """Probability that an edge stays inside each level (``group_sizes``, then the
    community); the rest go anywhere in the graph."""
    alpha: float = 1.5
    """Pareto shape of the degree weights (smaller: heavier tail)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 2 or self.avg_degree <= 0 or self.feat_dim < 0 or self.communities < 1:
            raise ConfigError("--nodes >= 2, --avg-degree > 0, --feat-dim >= 0, --communities >= 1")
        if len(self.locality) != len(self.group_sizes) + 1:
            raise ConfigError("--locality needs one probability per group size plus the community")
        if (
            any(s < 1 for s in self.group_sizes)
            or any(p < 0 for p in self.locality)
            or sum(self.locality) > 1
        ):
            raise ConfigError("--group-sizes must be >= 1; --locality >= 0 and summing to <= 1")


def _level_sizes(opts: GenerateOptions, n: int) -> np.ndarray:
    csize = -(-n // max(1, opts.communities))
    sizes = [min(s, n) for s in opts.group_sizes] + [csize, n]
    return np.asarray(sizes, dtype=np.int64)


def _edges(
    rng: np.random.Generator, opts: GenerateOptions, cw: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` (source position, destination position) pairs, possibly repeated."""
    n = cw.shape[0]
    cw0 = np.concatenate([[0.0], cw])
    sizes = _level_sizes(opts, n)
    probs = np.asarray([*opts.locality, max(0.0, 1.0 - float(sum(opts.locality)))])
    src = np.minimum(np.searchsorted(cw, rng.random(m) * cw[-1], side="right"), n - 1)
    gs = sizes[rng.choice(sizes.shape[0], size=m, p=probs / probs.sum())]
    start = (src // gs) * gs
    lo = cw0[start]
    u = lo + rng.random(m) * (cw0[np.minimum(start + gs, n)] - lo)
    del gs, start, lo
    dst = np.minimum(np.searchsorted(cw, u, side="right"), n - 1)
    return src, dst


def generate_graph(opts: GenerateOptions) -> dict[str, np.ndarray]:
    """Arrays in the input format (src, dst, feat, label, train/val/test masks)."""
    rng = np.random.default_rng(opts.seed)
    n, k = opts.nodes, max(1, opts.communities)
    m = round(n * opts.avg_degree)
    pos_of = rng.permutation(n)  # node ID -> position: IDs carry no locality
    node_at = np.argsort(pos_of)
    cw = np.cumsum(rng.pareto(opts.alpha, n) + 1.0)
    comm = (np.arange(n) * k // n)[pos_of]
    with step("edges", log, edges=m):
        keys = np.empty(0, dtype=np.int64)
        draw = m
        for _ in range(8):  # top up after removing self-loops and repeats
            s, d = _edges(rng, opts, cw, draw)
            ok = s != d
            new = node_at[s[ok]] * n + node_at[d[ok]]
            keys = np.concatenate([keys, new])
            keys.sort()
            keys = drop_repeats(keys)
            if keys.shape[0] >= m:
                break
            draw = int((m - keys.shape[0]) * 1.5) + 16
        keys = keys[rng.permutation(keys.shape[0])[:m]]  # random edge order
        src, dst = np.divmod(keys, n)
        del keys
    with step("features", log, dim=opts.feat_dim):
        centroids = rng.standard_normal((k, opts.feat_dim), dtype=np.float32)
        feat = rng.standard_normal((n, opts.feat_dim), dtype=np.float32)
        feat += centroids[comm]
    split = rng.random(n)
    return {
        "src": src.astype(np.int64),
        "dst": dst.astype(np.int64),
        "feat": feat,
        "label": comm.astype(np.int64),
        "train_mask": split < 0.1,
        "val_mask": (split >= 0.1) & (split < 0.2),
        "test_mask": split >= 0.8,
    }


def write_graph_dir(arrays: dict[str, np.ndarray], out_dir: str) -> None:
    """Write arrays as a directory of ``.npy`` files (the input format)."""
    os.makedirs(out_dir, exist_ok=True)
    for key, arr in arrays.items():
        path = os.path.join(out_dir, f"{key}.npy")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, arr, allow_pickle=False)
