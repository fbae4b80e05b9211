"""Sparse optimizers for :class:`DistEmbedding` with DGL's update rule and state names.

``step()`` takes the gradients of the rows each embedding handed out since the last
step. With ``torch.distributed`` initialised (``world_size > 1``) every trainer's
gradients of this step are exchanged and each row is updated by the one trainer that
owns it (DGL's rule: partition ``p`` of the row, then ``row % trainers_per_partition``),
so a step is one update per row whatever the number of trainers. A row that appears
several times (in one trainer or across trainers) gets the **mean** of its gradients,
as DGL does. The owner sends one SPARSE_UPDATE per server (several when its rows exceed
the server's request limits); the server applies the update to the table and to the
state tensors under its row locks.

State tensors are DistTensors named as in DGL: ``NAME_sum`` (Adagrad), ``NAME_step``,
``NAME_mem``, ``NAME_power`` (Adam). ``save(f)`` / ``load(f)`` write and read the rows
each trainer owns to ``f"{f}_{rank}"`` (``.npy`` files and ``meta.json``, at any fsspec
URL, no pickle: :mod:`distgnn.distributed.rowshards`).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distgnn.distributed import rowshards
from distgnn.distributed.embedding import DistEmbedding
from distgnn.distributed.rowshards import row_owner
from distgnn.distributed.tensor import DistTensor, group
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.rpc.client import Call
from distgnn.rpc.protocol import MsgType

log = logging.getLogger("distgnn.distributed")


def _dist() -> tuple[int, int] | None:
    """(rank, world size) of the torch.distributed group, or None when not initialised."""
    import torch.distributed as tdist

    if tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1:
        return tdist.get_rank(), tdist.get_world_size()
    return None


def _all_gather(x: torch.Tensor) -> torch.Tensor:
    """Concatenation of every rank's ``x`` (rows may differ in number), in rank order, on
    the CPU. With NCCL (GPU trainers) the exchange goes through this rank's GPU."""
    import torch.distributed as tdist

    world = tdist.get_world_size()
    dev = torch.device("cpu")
    if tdist.get_backend() == "nccl":
        dev = torch.device("cuda", torch.cuda.current_device())
    n = torch.tensor([x.shape[0]], dtype=torch.int64, device=dev)
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    tdist.all_gather(sizes, n)
    most = int(max(s.item() for s in sizes))
    pad = torch.zeros((most, *x.shape[1:]), dtype=x.dtype, device=dev)
    pad[: x.shape[0]] = x.to(dev)
    out = [torch.zeros_like(pad) for _ in range(world)]
    tdist.all_gather(out, pad)
    return torch.cat([o[: int(s.item())] for o, s in zip(out, sizes, strict=True)]).cpu()


class SparseOptimizer:
    """DGL's ``DistSparseGradOptimizer``: gather traced gradients, update on the servers."""

    opt = ""
    state_suffixes: tuple[str, ...] = ()

    def __init__(self, params: Sequence[DistEmbedding], lr: float) -> None:
        if not params or not all(isinstance(p, DistEmbedding) for p in params):
            raise ConfigError("sparse optimizers take a non-empty list of DistEmbedding")
        if lr <= 0:
            raise ConfigError(f"lr must be > 0, got {lr}")
        self._params = list(params)
        self._lr = float(lr)
        self._defaults: dict[str, float] = {"_lr": float(lr)}
        self._state: dict[str, Any] = {}
        self._clean_grad = False
        d = _dist()
        self._rank, self._world_size = d if d is not None else (0, 1)

    def _make_state(self, emb: DistEmbedding, suffix: str, row: tuple[int, ...]) -> DistTensor:
        return DistTensor(
            (emb.num_embeddings, *row),
            torch.float32,
            emb.name + suffix,
            "zeros",
            part_policy=emb.part_policy,
            is_gdata=False,
            ctx=emb.tensor.ctx,
        )

    def _states(self, emb: DistEmbedding) -> tuple[DistTensor, ...]:
        s = self._state[emb.name]
        return s if isinstance(s, tuple) else (s,)

    @property
    def params(self) -> list[DistEmbedding]:
        return self._params

    @property
    def lr(self) -> float:
        return self._lr

    def zero_grad(self) -> None:
        """DGL's: nothing to clear, ``step`` consumes the rows handed out since the last
        step. The rows stay traced, so DGL's loop order (forward, ``zero_grad()``,
        backward, ``step()``, as in its R-GCN example) updates them."""
        self._clean_grad = True

    def _hyper(self) -> dict[str, float]:
        return {"lr": self._lr}

    def step(self) -> None:
        """Apply this step's gradients (every trainer must call it when distributed)."""
        d = _dist()
        for emb in self._params:
            ids, grads = [], []
            for idx, rows in emb.trace:
                if rows.grad is not None:
                    ids.append(torch.as_tensor(idx, dtype=torch.int64))
                    grads.append(rows.grad.detach().cpu().to(torch.float32))
            emb.reset_trace()
            idx_t = torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)
            g_t = torch.cat(grads) if grads else torch.zeros(0, emb.embedding_dim)
            g_t = g_t.reshape(len(idx_t), emb.embedding_dim)
            if d is not None:
                rank, world = d
                idx_t, g_t = _all_gather(idx_t), _all_gather(g_t)
                mine = row_owner(emb.tensor.policy, idx_t.numpy(), world) == rank
                idx_t, g_t = idx_t[torch.from_numpy(mine)], g_t[torch.from_numpy(mine)]
            if len(idx_t):
                self._apply(emb, idx_t.numpy(), g_t.numpy())
        if d is not None:
            import torch.distributed as tdist

            tdist.barrier()

    def _apply(self, emb: DistEmbedding, ids: np.ndarray, grads: np.ndarray) -> None:
        uniq, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
        g = np.zeros((len(uniq), grads.shape[1]), dtype=np.float32)
        np.add.at(g, inv, grads)
        g /= cnt[:, None].astype(np.float32)  # the mean, as DGL
        t = emb.tensor
        parts, local = t.policy.locate(uniq)
        order, b = group(parts, len(t.policy.offsets) - 1)
        states = {s: st.key for s, st in zip(self.state_suffixes, self._states(emb), strict=True)}
        meta: dict[str, Any] = {"name": t.key, "opt": self.opt, "state": states, **self._hyper()}
        # one request per server, several where its rows exceed what one request carries
        # (the rows are unique, so each is still updated exactly once)
        batches: dict[int, list[np.ndarray]] = {}
        for p in range(len(b) - 1):
            if b[p + 1] > b[p]:
                sel = order[b[p] : b[p + 1]]
                lim = t.ctx.request_limits(p)
                step = len(sel) if lim is None else t.rows_per_request(lim)
                batches[p] = [sel[i : i + step] for i in range(0, len(sel), step)]
        for r in range(max((len(v) for v in batches.values()), default=0)):
            calls = {
                p: Call(MsgType.SPARSE_UPDATE, meta, [local[sels[r]], g[sels[r]]])
                for p, sels in batches.items()
                if r < len(sels)
            }
            t.ctx.call_many(calls)

    # --- checkpoints --------------------------------------------------------------
    def _tables(self, owned: bool = True) -> dict[str, rowshards.Table]:
        """Each table's state tensors, with the rows this trainer owns when ``owned``
        (saving; loading takes the rows from the files)."""
        ctx = self._params[0].tensor.ctx
        out = {}
        for emb in self._params:
            ids = (
                rowshards.owned_rows(
                    emb.tensor.policy, emb.num_embeddings, ctx.rank, ctx.world_size
                )
                if owned
                else None
            )
            out[emb.name] = rowshards.Table(
                emb.num_embeddings, ids, {st.name: st for st in self._states(emb)}
            )
        return out

    def _barrier(self) -> None:
        self._params[0].tensor.ctx.barrier()

    def save(self, f: str | os.PathLike[str]) -> None:
        """DGL's: every trainer writes the state rows it owns and the hyper-parameters to
        ``f"{f}_{rank}"`` (here a folder of ``.npy`` files and ``meta.json``, at any
        fsspec URL; :mod:`distgnn.distributed.rowshards`). All trainers call it."""
        ctx = self._params[0].tensor.ctx
        self._barrier()
        rowshards.write(
            rowshards.rank_url(f, ctx.rank),
            type(self).__name__,
            dict(self._defaults),
            ctx.world_size,
            self._tables(),
        )
        self._barrier()

    def _check_params(self, saved: rowshards.Saved) -> None:
        """ConfigError naming the hyper-parameter a saved state lacks, adds or holds a
        bad value of; a different value is taken (DGL's rule) and logged."""
        got, want = saved.params, self._defaults
        for k in sorted(set(got) | set(want)):
            if k not in got or k not in want:
                raise ConfigError(
                    f"{saved.where()}: hyper-parameter {k.lstrip('_')!r} "
                    + ("missing" if k not in got else f"unknown to {type(self).__name__}")
                )
            v = got[k]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ConfigError(f"{saved.where()}: hyper-parameter {k.lstrip('_')!r}={v!r}")
            if v != want[k]:
                log.warning(
                    "sparse optimizer takes the saved hyper-parameter",
                    extra=kv(name=k.lstrip("_"), saved=v, given=want[k]),
                )
        if got["_lr"] <= 0:
            raise ConfigError(f"{saved.where()}: hyper-parameter 'lr'={got['_lr']!r} must be > 0")

    def load(self, f: str | os.PathLike[str], saved_world: int | None = None) -> None:
        """DGL's: read what ``save`` wrote, hyper-parameters too; all trainers call it.

        Trainer ``r`` reads ``f"{f}_{r}"`` and, with fewer trainers than at save time,
        those of ranks ``r + world``, ``r + 2 * world``, ...; a missing ``f"{f}_{r}"``
        loads nothing (a warning: more trainers than at save time), unless
        ``saved_world`` (the number of trainers that saved) says it must be there.
        A file of another optimizer, other tables or shapes, or one that fails its
        checksum is refused naming what differs."""
        ctx = self._params[0].tensor.ctx
        self._barrier()
        saved = rowshards.load(
            f,
            ctx.rank,
            ctx.world_size,
            type(self).__name__,
            self._tables(owned=False),
            self._check_params,
            saved_world,
        )
        if saved is not None:
            params = {k: float(v) for k, v in saved.params.items()}
            self._defaults.update(params)
            self.__dict__.update(params)
        self._barrier()

    save_state_to = save
    load_state_from = load


class SparseAdagrad(SparseOptimizer):
    """``SparseAdagrad(params, lr, eps=1e-10)``: ``s += g*g``; ``x -= lr*g/(sqrt(s)+eps)``
    with ``g`` the mean gradient of the row in this step; state ``NAME_sum``."""

    opt = "adagrad"
    state_suffixes = ("sum",)

    def __init__(self, params: Sequence[DistEmbedding], lr: float, eps: float = 1e-10) -> None:
        super().__init__(params, lr)
        self._eps = float(eps)
        self._defaults = {"_lr": self._lr, "_eps": self._eps}
        for emb in self._params:
            if emb.name in self._state:
                raise ConfigError(f"embedding {emb.name!r} is registered twice")
            self._state[emb.name] = self._make_state(emb, "_sum", (emb.embedding_dim,))

    def _hyper(self) -> dict[str, float]:
        return {"lr": self._lr, "eps": self._eps}


class SparseAdam(SparseOptimizer):
    """``SparseAdam(params, lr, betas=(0.9, 0.999), eps=1e-08)`` with a per-row step count;
    state ``NAME_step``, ``NAME_mem``, ``NAME_power`` (DGL's names)."""

    opt = "adam"
    state_suffixes = ("step", "mem", "power")

    def __init__(
        self,
        params: Sequence[DistEmbedding],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-08,
    ) -> None:
        super().__init__(params, lr)
        self._eps = float(eps)
        self._beta1, self._beta2 = float(betas[0]), float(betas[1])
        self._defaults = {
            "_lr": self._lr,
            "_eps": self._eps,
            "_beta1": self._beta1,
            "_beta2": self._beta2,
        }
        for emb in self._params:
            if emb.name in self._state:
                raise ConfigError(f"embedding {emb.name!r} is registered twice")
            self._state[emb.name] = (
                self._make_state(emb, "_step", ()),
                self._make_state(emb, "_mem", (emb.embedding_dim,)),
                self._make_state(emb, "_power", (emb.embedding_dim,)),
            )

    def _hyper(self) -> dict[str, float]:
        return {"lr": self._lr, "eps": self._eps, "beta1": self._beta1, "beta2": self._beta2}
