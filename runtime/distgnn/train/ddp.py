"""torch.distributed set-up for trainers: process group, DDP wrapping, collectives.

Trainers join from the contract environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``): gloo on CPU, NCCL when CUDA is available.
A single trainer runs without a process group.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distgnn.contract import TrainerEnv
from distgnn.errors import ConfigError
from distgnn.log import kv

log = logging.getLogger("distgnn.train")


@dataclass
class DDPContext:
    """This trainer's place in the job."""

    rank: int
    world_size: int
    device: torch.device
    joined: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_ddp(env: TrainerEnv | None = None, timeout_s: float = 600.0) -> DDPContext:
    """Join the process group (when ``world_size > 1``) and pick the device."""
    env = env or TrainerEnv.from_env()
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise ConfigError(f"RANK/WORLD_SIZE: rank {env.rank} of {env.world_size} is invalid")
    cuda = torch.cuda.is_available()
    device = (
        torch.device("cuda", env.rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    )
    ctx = DDPContext(env.rank, env.world_size, device)
    if env.world_size > 1:
        if cuda:
            torch.cuda.set_device(device)
        timeout = datetime.timedelta(seconds=timeout_s)
        backend = "nccl" if cuda else "gloo"
        if _is_loopback(env.master_addr):
            dist.init_process_group(
                backend=backend,
                store=rendezvous_store(env, timeout_s),
                rank=env.rank,
                world_size=env.world_size,
                timeout=timeout,
            )
        else:
            dist.init_process_group(
                backend=backend,
                init_method=f"tcp://{env.master_addr}:{env.master_port}",
                rank=env.rank,
                world_size=env.world_size,
                timeout=timeout,
            )
        ctx.joined = True
        log.info(
            "joined process group",
            extra=kv(rank=env.rank, world_size=env.world_size, backend=dist.get_backend()),
        )
    return ctx


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def rendezvous_store(env: TrainerEnv | None = None, timeout_s: float = 600.0) -> dist.TCPStore:
    """The rendezvous store of ``MASTER_ADDR:MASTER_PORT`` for ``init_process_group(store=)``.

    With a loopback ``MASTER_ADDR`` (local mode) rank 0's store listens on that address
    only: torch's own store server listens on every interface (``*:PORT``), so rank 0
    binds the socket itself and hands it over (``master_listen_fd``).
    """
    env = env or TrainerEnv.from_env()
    host, port = env.master_addr, env.master_port
    timeout = datetime.timedelta(seconds=timeout_s)
    if env.rank != 0 or not _is_loopback(host):
        return dist.TCPStore(host, port, env.world_size, env.rank == 0, timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = "127.0.0.1" if host == "localhost" else host
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(max(128, env.world_size))
        store = dist.TCPStore(
            addr, port, env.world_size, True, timeout, master_listen_fd=sock.fileno()
        )
    except OSError as e:
        with contextlib.suppress(OSError):
            sock.close()
        raise ConfigError(f"MASTER_PORT: cannot listen on {addr}:{port} ({e})") from e
    sock.detach()  # the store's server owns the descriptor now
    return store


def wrap(ctx: DDPContext, model: nn.Module) -> nn.Module:
    model = model.to(ctx.device)
    if not ctx.joined:
        return model
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: nn.Module) -> nn.Module:
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    assert isinstance(inner, nn.Module)
    return inner


def all_reduce(ctx: DDPContext, values: list[float], op: str = "sum") -> list[float]:
    """Reduce a few numbers over all trainers (``sum`` or ``max``)."""
    if not ctx.joined:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    if ctx.device.type == "cuda":
        t = t.to(ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return [float(v) for v in t.cpu().tolist()]


def agree_steps(ctx: DDPContext, local_steps: int) -> int:
    """Every trainer runs the same number of steps: the largest local count."""
    return int(all_reduce(ctx, [float(local_steps)], op="max")[0])


def broadcast_int(ctx: DDPContext, value: int) -> int:
    """Rank 0's value, everywhere."""
    if not ctx.joined:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.broadcast(t, src=0)
    return int(t.item())


def barrier(ctx: DDPContext) -> None:
    if ctx.joined:
        dist.barrier()


def shutdown(ctx: DDPContext) -> None:
    if ctx.joined and dist.is_initialized():
        dist.destroy_process_group()
        ctx.joined = False
