"""Deterministic benchmark graphs: power-law degrees, planted communities, random ID order."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from distgnn.log import step

log = logging.getLogger("distgnn.graph")


@dataclass(frozen=True)
class GenerateOptions:
    nodes: int = 1_000_000
    avg_degree: float = 12.0
    feat_dim: int = 100
    communities: int = 16
    p_in: float = 0.8
    """Probability that an edge stays inside its source's community."""
    alpha: float = 1.5
    """Pareto shape of the degree weights (smaller: heavier tail)."""
    seed: int = 0


def generate_graph(opts: GenerateOptions) -> dict[str, np.ndarray]:
    """Arrays in the input format (src, dst, feat, label, train/val/test masks)."""
    rng = np.random.default_rng(opts.seed)
    n, k = opts.nodes, max(1, opts.communities)
    m = round(n * opts.avg_degree)
    comm = rng.integers(0, k, n)  # random community per ID: IDs carry no locality
    w = rng.pareto(opts.alpha, n) + 1.0
    order = np.argsort(comm, kind="stable")
    cw = np.cumsum(w[order])
    cstart = np.searchsorted(comm[order], np.arange(k + 1))
    cw0 = np.concatenate([[0.0], cw])
    with step("edges", log, edges=m):
        src = np.searchsorted(cw, rng.random(m) * cw[-1], side="right")
        src = order[np.minimum(src, n - 1)]
        c = comm[src]
        lo, hi = cw0[cstart[c]], cw0[cstart[c + 1]]
        inside = rng.random(m) < opts.p_in
        u = np.where(inside, lo + rng.random(m) * (hi - lo), rng.random(m) * cw[-1])
        dst = order[np.minimum(np.searchsorted(cw, u, side="right"), n - 1)]
        del c, lo, hi, inside, u
        loop = src == dst
        dst[loop] = (dst[loop] + 1) % n
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
