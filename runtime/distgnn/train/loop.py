"""Pieces shared by the built-in apps: models, epochs with padded steps, checkpoints."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.nn import GAT, GraphSAGE
from distgnn.sampling.loader import prefetch
from distgnn.train import checkpoint
from distgnn.train.config import SPARSE_EMBEDDING, TrainConfig
from distgnn.train.ddp import DDPContext, barrier, broadcast_int, unwrap
from distgnn.train.gradsync import DeferredGradSync, use_deferred_allreduce
from distgnn.train.proc import use_prefetch
from distgnn.train.sparse_emb import NodeEmbeddings
from distgnn.train.telemetry import Telemetry

log = logging.getLogger("distgnn.train")


def autocast(cfg: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The forward pass's autocast context for ``cfg.precision``."""
    if cfg.precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build_model(cfg: TrainConfig, in_feats: int, out_feats: int) -> nn.Module:
    if cfg.model == "sage":
        return GraphSAGE(in_feats, cfg.hidden, out_feats, cfg.num_layers, cfg.dropout)
    if cfg.model == "gat":
        return GAT(in_feats, cfg.hidden, out_feats, cfg.num_layers, dropout=cfg.dropout)
    raise ConfigError(f"--model: {cfg.model!r} is not sage or gat")


def to_device(x: Any, device: torch.device) -> Any:
    """A tensor, or a dict of them per node type, on ``device``."""
    if isinstance(x, dict):
        return {k: v.to(device) for k, v in x.items()}
    return x.to(device)


FULL_NEIGHBOUR_EVAL_MAX_NODES = 200_000


def eval_fanouts(cfg: TrainConfig, num_nodes: int) -> list[int]:
    """All neighbours on small graphs; twice the training fanouts on large ones."""
    if num_nodes <= FULL_NEIGHBOUR_EVAL_MAX_NODES:
        return [-1] * cfg.num_layers
    return [-1 if f == -1 else 2 * f for f in cfg.fanouts]


class Steps:
    """An epoch's ``(batch, weight)`` pairs for a loop whose gradients may be all-reduced
    after the backward (:class:`~distgnn.train.gradsync.DeferredGradSync`). Each step::

        with steps.no_sync():          # DDP without its all-reduce when deferred
            loss = ...; opt.zero_grad(); loss.backward()
        steps.sync_gradients()         # deferred: all-reduce, next batch meanwhile, wait
        opt.step()

    Without a deferred sync both calls do nothing (DDP reduced inside the backward) and
    batches are made when the loop asks for the next one."""

    def __init__(self, pairs: Iterator[Any], sync: DeferredGradSync | None = None) -> None:
        self.pairs = pairs
        self.sync = sync
        self.ahead: list[Any] = []  # the next pair, made during the last step's all-reduce

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self.ahead.pop() if self.ahead else next(self.pairs, None)
            if item is None:
                return
            yield item

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        return self.sync.no_sync() if self.sync is not None else contextlib.nullcontext()

    def sync_gradients(self) -> None:
        """After the backward: with a deferred sync, start the all-reduce, make the next
        batch while it waits for the other trainers, then wait for it."""
        if self.sync is None:
            return
        self.sync.start()
        try:
            self.ahead = [next(self.pairs, None)]
        finally:
            self.sync.finish()


@contextlib.contextmanager
def epoch_batches(
    loader: Iterable[Any],
    steps: int,
    load: Callable[[Any], Any],
    telemetry: Telemetry | None = None,
    prefetch_thread: bool | None = None,
    sync: DeferredGradSync | None = None,
) -> Iterator[Steps]:
    """This epoch's ``steps`` ``(load(batch), weight)`` pairs (see :func:`padded`) as
    :class:`Steps`. With ``prefetch_thread`` each is loaded by a thread one batch ahead of
    training (the next batch's features are pulled while this one trains; the thread stops
    when the block exits), else in turn; None: :func:`distgnn.train.proc.use_prefetch`
    decides for CPU compute (``DISTGNN_PREFETCH``). With ``sync`` (deferred all-reduce)
    the next batch is made in :meth:`Steps.sync_gradients`. With ``telemetry`` the
    sample, pull and compute time of each step is measured."""
    tel = telemetry or Telemetry()
    if prefetch_thread is None:
        prefetch_thread = use_prefetch(torch.get_num_threads())
    src, fn = tel.sampled(iter(loader)), tel.pulled(load)
    batches = prefetch(src, fn) if prefetch_thread else (fn(b) for b in src)
    with contextlib.closing(batches):
        yield Steps(tel.computed(padded(batches, steps)), sync)


def deferred_sync(
    ctx: DDPContext, model: nn.Module, prefetch_thread: bool
) -> DeferredGradSync | None:
    """The built-in apps' all-reduce after the backward, when
    :func:`~distgnn.train.gradsync.use_deferred_allreduce` says so (``DISTGNN_DEFER_ALLREDUCE``).
    Never for a model with buffers (batch norm statistics): DDP broadcasts rank 0's in
    every forward that syncs, and under ``no_sync()`` it would not."""
    if not ctx.joined or not use_deferred_allreduce(ctx.world_size, prefetch_thread):
        return None
    if any(True for _ in unwrap(model).buffers()):
        return None
    return DeferredGradSync(model, ctx.world_size)


def padded(batches: Iterator[Any], steps: int) -> Iterator[tuple[Any, float]]:
    """``steps`` items of ``(batch, weight)``: when this trainer runs out of batches, its
    last batch is repeated with weight 0 so every trainer joins every all-reduce."""
    last: Any = None
    for _ in range(steps):
        b = next(batches, None)
        if b is None:
            if last is None:
                raise ConfigError("this trainer has no training seeds (empty split)")
            yield last, 0.0
        else:
            last = b
            yield b, 1.0


def resume(
    cfg: TrainConfig,
    ctx: DDPContext,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sparse: NodeEmbeddings | None = None,
) -> int:
    """Load the latest checkpoint (if any); returns the first epoch to run. ``sparse``:
    the model's embedding tables on the servers and their optimizer's state, written
    back from the checkpoint by every trainer (each the rows saved by trainers ``rank,
    rank + world, ...``) before the first step."""
    if not cfg.checkpoint_url:
        return 0
    url = checkpoint.latest(cfg.checkpoint_url) if ctx.is_main else None
    # every rank loads the same file rank 0 found
    found = broadcast_int(ctx, -1 if url is None else checkpoint_epoch(url))
    if found < 0:
        return 0
    url = checkpoint.checkpoint_url(cfg.checkpoint_url, found)
    ck = checkpoint.load(url)
    check_same_embedding(ck, sparse)
    if sparse:
        sparse.check(ck.sparse)
    unwrap(model).load_state_dict(ck.model)
    opt.load_state_dict(ck.optimizer)
    if sparse:
        sparse.restore(ck.sparse, url, ctx.is_main)
    barrier(ctx)
    log.info("resumed from checkpoint", extra=kv(epoch=ck.epoch, next_epoch=ck.epoch + 1))
    return ck.epoch + 1


def check_same_embedding(ck: checkpoint.Checkpoint, sparse: NodeEmbeddings | None) -> None:
    """ConfigError naming the field when a checkpoint's featureless-type embeddings were
    kept the other way (sparse tables vs dense weights) than this run's."""
    cfg = ck.extra.get("rgcn")
    if not isinstance(cfg, dict) or not cfg.get("num_nodes"):
        return
    saved = bool(cfg.get("sparse_embedding", False))
    if saved != bool(sparse):
        kept = "DistEmbedding tables" if saved else "dense nn.Embedding weights"
        raise ConfigError(
            f"{SPARSE_EMBEDDING}: the checkpoint keeps the featureless types' embeddings as "
            f"{kept}; resume with the same setting"
        )


def checkpoint_epoch(url: str) -> int:
    return int(url.rsplit("ckpt-epoch-", 1)[1].split(".", 1)[0])


def save_epoch(
    cfg: TrainConfig,
    ctx: DDPContext,
    epoch: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    extra: Callable[[], dict[str, Any]] | None = None,
    sparse: NodeEmbeddings | None = None,
) -> None:
    """This epoch's checkpoint: with ``sparse``, every trainer first writes the table and
    optimizer-state rows it owns beside it; then rank 0 writes the checkpoint file
    (written last, so a checkpoint that exists is complete)."""
    if not cfg.checkpoint_url:
        return
    part: dict[str, Any] = {}
    if sparse:
        part = sparse.save(checkpoint.checkpoint_url(cfg.checkpoint_url, epoch))
        barrier(ctx)
    if ctx.is_main:
        checkpoint.save(
            cfg.checkpoint_url,
            checkpoint.Checkpoint(
                epoch=epoch,
                model=unwrap(model).state_dict(),
                optimizer=opt.state_dict(),
                sparse=part,
                extra={"app": cfg.app, "model": cfg.model} | (extra() if extra else {}),
            ),
        )
