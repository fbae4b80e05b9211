"""Negative sampling for link prediction."""

from __future__ import annotations

import numpy as np

from distgnn.errors import ConfigError


class UniformNegativeSampler:
    """``k`` negatives per positive edge ``(u, v)``: ``(u, w)`` with ``w`` uniform over nodes."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ConfigError(f"num_negs: {k} must be >= 1")
        self.k = k

    def __call__(
        self, src: np.ndarray, num_nodes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        neg_src = np.repeat(np.asarray(src, dtype=np.int64), self.k)
        neg_dst = rng.integers(0, num_nodes, size=neg_src.size, dtype=np.int64)
        return neg_src, neg_dst
