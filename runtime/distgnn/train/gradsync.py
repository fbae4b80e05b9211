"""DDP's gradient all-reduce, started after the backward and waited for before the step.

DDP all-reduces inside ``loss.backward()``: the backward returns only once every trainer
has reached the end of its own, so the faster trainer of a step sits blocked for the
slower one. :class:`DeferredGradSync` runs the backward under DDP's ``no_sync()`` (no
all-reduce), then starts one asynchronous all-reduce of every gradient (:meth:`start`)
and waits for it only before the optimizer step (:meth:`finish`): in between the trainer
produces its next batch (sampling, feature pull), which depends on no parameter, so the
wait for the slower trainer does that work instead of idling.

The gradients are DDP's: each is multiplied by ``1 / world_size`` (DDP's reducer scales
by the same factor before its all-reduce) and summed over the trainers by one all-reduce
of the flattened gradients, in DDP's bucket order (the parameters reversed). A parameter
without a gradient on a trainer in a step counts zeros there (DDP without
``find_unused_parameters`` would stop with an error).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distgnn import contract
from distgnn.errors import ConfigError

DEFER_MODES = ("auto", "on", "off")


def use_deferred_allreduce(
    world_size: int, prefetch_thread: bool, env: Mapping[str, str] | None = None
) -> bool:
    """Whether the built-in apps defer the all-reduce (``DISTGNN_DEFER_ALLREDUCE``):
    ``auto`` (default) with 2 or more trainers when batches are made in turn (a prefetch
    thread already makes them beside the step), ``on`` with 2 or more trainers, ``off``."""
    e = os.environ if env is None else env
    mode = e.get(contract.ENV_DEFER_ALLREDUCE, "").strip().lower() or "auto"
    if mode not in DEFER_MODES:
        raise ConfigError(
            f"{contract.ENV_DEFER_ALLREDUCE}={mode!r} is not one of {', '.join(DEFER_MODES)}"
        )
    if world_size < 2 or mode == "off":
        return False
    return mode == "on" or not prefetch_thread


class DeferredGradSync:
    """One trainer's deferred all-reduce of ``model``'s gradients (a DDP module: its
    ``no_sync()`` is entered by :meth:`no_sync`; a plain module when not joined)."""

    def __init__(self, model: nn.Module, world_size: int) -> None:
        self.model = model
        self.world_size = world_size
        inner = getattr(model, "module", model)
        # DDP's buckets take the parameters in reverse order of registration
        self.params = [p for p in reversed(list(inner.parameters())) if p.requires_grad]
        self.flat: torch.Tensor | None = None
        self.work: Any = None

    def no_sync(self) -> Any:
        """The context for forward + backward: DDP's without its all-reduce."""
        sync = getattr(self.model, "no_sync", None)
        return sync() if sync is not None else contextlib.nullcontext()

    def start(self) -> None:
        """Start the all-reduce of this step's gradients (after ``backward``)."""
        if self.work is not None:
            raise RuntimeError("DeferredGradSync.start: the previous all-reduce is unfinished")
        if self.world_size <= 1 or not self.params:
            return
        if self.flat is None:
            p0 = self.params[0]
            n = sum(p.numel() for p in self.params)
            self.flat = torch.empty(n, dtype=p0.dtype, device=p0.device)
        flat, off, scale = self.flat, 0, 1.0 / self.world_size
        for p in self.params:
            k = p.numel()
            if p.grad is None:
                flat[off : off + k].zero_()
            else:
                torch.mul(p.grad.reshape(-1), scale, out=flat[off : off + k])
            off += k
        self.work = dist.all_reduce(flat, async_op=True)

    def finish(self) -> None:
        """Wait for the all-reduce and write the averaged gradients back (before
        ``optimizer.step()``)."""
        work, self.work = self.work, None
        if work is None:
            return
        work.wait()
        flat = self.flat
        assert flat is not None
        off = 0
        for p in self.params:
            k = p.numel()
            avg = flat[off : off + k].view_as(p)
            if p.grad is None:
                p.grad = avg.clone()
            else:
                p.grad.copy_(avg)
            off += k
