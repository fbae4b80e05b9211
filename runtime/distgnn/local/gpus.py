"""``trainers.gpus`` in local mode: one GPU per trainer, as a pod's ``nvidia.com/gpu: 1``.

With ``gpus: 1`` trainer *i* gets ``CUDA_VISIBLE_DEVICES`` of one CUDA device, round-robin
over the devices this process sees (its own ``CUDA_VISIBLE_DEVICES`` list when set, else
``0..N-1``), so a trainer's ``cuda:0`` is its own GPU; more trainers than GPUs share them.
No CUDA device with ``gpus: 1`` is a :class:`~distgnn.errors.ConfigError` (exit 2) before
anything starts. ``gpus: 0`` leaves the trainers' environment as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from distgnn.errors import ConfigError

VISIBLE = "CUDA_VISIBLE_DEVICES"


def cuda_device_count() -> int:
    """CUDA devices torch sees in this process (0 without torch or without CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def visible_devices(env: Mapping[str, str], count: int) -> list[str]:
    """The ``count`` devices torch sees, as ``CUDA_VISIBLE_DEVICES`` names them: the first
    ``count`` entries of the environment's list when it has one, else ``0..count-1``."""
    listed = env.get(VISIBLE)
    if listed is not None and listed.strip():
        return [d.strip() for d in listed.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


def assign(replicas: int, devices: list[str]) -> list[str]:
    """Trainer *i*'s ``CUDA_VISIBLE_DEVICES``: ``devices[i % len(devices)]``."""
    if not devices:
        raise ValueError("no devices to assign")
    return [devices[i % len(devices)] for i in range(replicas)]


def trainer_devices(
    gpus: int,
    replicas: int,
    env: Mapping[str, str] | None = None,
    count: int | None = None,
) -> list[str] | None:
    """Each trainer's ``CUDA_VISIBLE_DEVICES`` for ``trainers.gpus`` (None: ``gpus: 0``,
    nothing set); ``count``: the CUDA devices (default: :func:`cuda_device_count`)."""
    if gpus <= 0:
        return None
    env = os.environ if env is None else env
    n = cuda_device_count() if count is None else count
    devices = visible_devices(env, n)
    if not devices:
        shown = f" (CUDA_VISIBLE_DEVICES={env[VISIBLE]!r})" if VISIBLE in env else ""
        raise ConfigError(
            f"spec.trainers.gpus: {gpus} asks for a GPU per trainer, but this machine has no "
            f"CUDA device torch can use{shown}: set trainers.gpus to 0 to train on the CPU, "
            "or run where a GPU and a CUDA build of torch are"
        )
    return assign(replicas, devices)
