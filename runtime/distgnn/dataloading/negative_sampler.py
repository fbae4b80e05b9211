"""DGL's ``dgl.dataloading.negative_sampler``: which negative pairs a link-prediction
loader draws. Samplers are descriptions (no code is shipped to sampler processes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distgnn.errors import ConfigError
from distgnn.sampling.negative import UniformNegativeSampler


class Uniform:
    """``k`` negatives per positive edge ``(u, v)``: ``(u, w)`` with ``w`` uniform over nodes.

    Also callable as DGL's: ``Uniform(k)(g, eids) -> (src, dst)``.
    """

    def __init__(self, k: int) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"negative_sampler: k={k!r} must be an int >= 1")
        self.k = k

    def __call__(self, g: Any, eids: Any) -> tuple[torch.Tensor, torch.Tensor]:
        src, _ = g.find_edges(eids)
        s = np.asarray(src.numpy() if hasattr(src, "numpy") else src, dtype=np.int64)
        rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,)).item()))
        nu, nv = UniformNegativeSampler(self.k)(s, int(g.num_nodes()), rng)
        return torch.from_numpy(nu), torch.from_numpy(nv)

    def __repr__(self) -> str:
        return f"Uniform(k={self.k})"


def num_negatives(sampler: Any) -> int:
    """How many negatives per positive a loader draws for ``sampler`` (0 for None)."""
    if sampler is None:
        return 0
    if isinstance(sampler, Uniform):
        return sampler.k
    raise ConfigError(
        f"negative_sampler: {type(sampler).__name__} is not supported; use "
        "distgnn.dataloading.negative_sampler.Uniform(k) (sampler processes cannot run "
        "arbitrary Python code, see docs/dgl-migration.md)"
    )
