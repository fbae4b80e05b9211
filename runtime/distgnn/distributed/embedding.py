"""``DistEmbedding``: a learnable embedding table on the servers, updated sparsely.

``emb(ids)`` pulls the rows and, while autograd is on, remembers ``(ids, rows)``;
after ``loss.backward()`` a sparse optimizer (:mod:`distgnn.distributed.optim`) sends the
row gradients to the servers, which apply the update to the table and its state.
:func:`save_tables` / :func:`load_tables` write and read the tables themselves the way the
optimizers' ``save`` / ``load`` do their state (each trainer the rows it owns).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from distgnn.distributed import rowshards
from distgnn.distributed.tensor import DistTensor, InitFunc, as_ids


class DistEmbedding:
    """DGL's ``DistEmbedding(num_embeddings, embedding_dim, name=None, init_func=None,
    part_policy=None)``: zeros unless ``init_func`` says otherwise; unnamed tables are
    shared by every trainer creating them in the same order (as DGL's)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        name: str | None = None,
        init_func: InitFunc = None,
        part_policy: Any = None,
        *,
        ctx: Any = None,
        seed: int | None = None,
    ) -> None:
        self._num_embeddings, self._embedding_dim = int(num_embeddings), int(embedding_dim)
        self._tensor = DistTensor(
            (num_embeddings, embedding_dim),
            torch.float32,
            name,
            init_func,
            part_policy,
            ctx=ctx,
            seed=seed,
        )
        self._part_policy = part_policy
        self._trace: list[tuple[Any, torch.Tensor]] = []
        self._optm_state: Any = None

    def __call__(self, idx: Any, device: Any = None) -> torch.Tensor:
        ids = as_ids(idx, self._num_embeddings)
        rows = self._tensor[ids]
        if device is not None:
            rows = rows.to(device)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((ids, rows))
        return rows

    def reset_trace(self) -> None:
        self._trace = []

    @property
    def trace(self) -> list[tuple[Any, torch.Tensor]]:
        return self._trace

    @property
    def name(self) -> str:
        """The user's name (generated for unnamed tables)."""
        return self._tensor.name

    @property
    def data_name(self) -> str:
        """The table's name on the servers."""
        return self._tensor.key

    @property
    def tensor(self) -> DistTensor:
        return self._tensor

    @property
    def weight(self) -> DistTensor:
        return self._tensor

    @property
    def part_policy(self) -> Any:
        return self._tensor.policy

    @property
    def num_embeddings(self) -> int:
        return self._num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self._embedding_dim

    @property
    def optm_state(self) -> Any:
        return self._optm_state

    def __repr__(self) -> str:
        return f"DistEmbedding({self.name!r}, {self._num_embeddings}x{self._embedding_dim})"


TABLES_KIND = "DistEmbedding"


def _tables(
    embs: Sequence[DistEmbedding], rank: int, world: int, owned: bool = True
) -> dict[str, rowshards.Table]:
    """Each table, with the rows trainer ``rank`` owns when ``owned`` (saving)."""
    return {
        e.name: rowshards.Table(
            e.num_embeddings,
            rowshards.owned_rows(e.part_policy, e.num_embeddings, rank, world) if owned else None,
            {"weight": e.tensor},
        )
        for e in embs
    }


def save_tables(embs: Sequence[DistEmbedding], f: str | os.PathLike[str]) -> None:
    """Every trainer writes the rows of ``embs`` it owns to ``f"{f}_{rank}"`` (any fsspec
    URL; all trainers call it, between barriers of their own)."""
    ctx = embs[0].tensor.ctx
    rowshards.write(
        rowshards.rank_url(f, ctx.rank),
        TABLES_KIND,
        {},
        ctx.world_size,
        _tables(embs, ctx.rank, ctx.world_size),
    )


def load_tables(embs: Sequence[DistEmbedding], f: str | os.PathLike[str], saved_world: int) -> None:
    """Write back what :func:`save_tables` wrote with ``saved_world`` trainers (this
    trainer reads ``f_RANK``, ``f_{RANK+world}``, ...; every folder must be there)."""
    ctx = embs[0].tensor.ctx
    rowshards.load(
        f,
        ctx.rank,
        ctx.world_size,
        TABLES_KIND,
        _tables(embs, ctx.rank, ctx.world_size, owned=False),
        saved_world=saved_world,
    )
