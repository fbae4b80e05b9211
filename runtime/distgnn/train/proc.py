"""Per-process tuning for trainers: torch threads and the C allocator.

* **Threads.** Trainers on one machine share its cores. ``OMP_NUM_THREADS`` (set by
  local mode and torchrun-like launchers) wins; otherwise each trainer takes its share,
  ``max(1, cpus // LOCAL_WORLD_SIZE)`` threads (``LOCAL_WORLD_SIZE`` defaults to 1), where
  ``cpus`` is what the process may use: its affinity capped by the container's CPU limit
  (cgroup v2 quota), not the node's core count.
* **Prefetch.** The built-in apps can pull the next batch's features in a thread while
  the current one trains. On the CPU that only pays with a CPU the torch threads leave
  idle: otherwise the thread takes turns with compute, and measured slower than pulling
  in turn (1M-node GraphSAGE, 2 cores: 2 trainers x 1 thread 0.47 vs 0.44 s per step,
  1 trainer x 2 threads 0.30-0.34 vs 0.27-0.34 s). ``DISTGNN_PREFETCH=auto`` (default)
  prefetches when compute runs on a GPU or the trainer's CPU share exceeds its torch
  threads; ``on``/``off`` force it.
* **Gather threads.** A co-located trainer gathers its partition's rows from shared
  memory; its gatherer gets as many threads as its torch threads (``DISTGNN_GATHER_THREADS``
  wins), not every CPU of the host, which the trainers beside it compute on.
* **Allocator.** A GNN step allocates and frees tensors of tens of MiB (one row per
  sampled node). glibc returns such memory to the kernel after every free, so every
  step pays page faults on fresh memory (measured: ~40% of a GraphSAGE step on CPU).
  ``mallopt`` keeps up to 1 GiB of freed heap and serves large tensors from the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Mapping

import torch

from distgnn import contract
from distgnn.cpus import available_cpus
from distgnn.errors import ConfigError
from distgnn.log import kv
from distgnn.rpc.gather import set_default_threads

log = logging.getLogger("distgnn.train")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 1 << 30


def trainer_cpus(env: Mapping[str, str] | None = None, cpus: int | None = None) -> int:
    """This trainer's share of the CPUs: ``cpus`` (default: :func:`available_cpus`)
    divided among the ``LOCAL_WORLD_SIZE`` trainers that share them; at least 1."""
    e = os.environ if env is None else env
    local = e.get(contract.ENV_LOCAL_WORLD_SIZE, "").strip()
    n = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, (cpus if cpus is not None else available_cpus()) // n)


def trainer_threads(env: Mapping[str, str] | None = None, cpus: int | None = None) -> int:
    """Torch threads for this trainer (see the module docstring)."""
    e = os.environ if env is None else env
    omp = e.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return trainer_cpus(e, cpus)


PREFETCH_MODES = ("auto", "on", "off")


def use_prefetch(
    threads: int,
    env: Mapping[str, str] | None = None,
    cpus: int | None = None,
    accelerator: bool = False,
) -> bool:
    """Whether the built-in apps pull features in a prefetch thread (``DISTGNN_PREFETCH``;
    ``auto``, the default: when compute runs on an ``accelerator``, or when this trainer's
    CPU share exceeds its ``threads`` torch threads, i.e. a CPU would otherwise idle)."""
    e = os.environ if env is None else env
    mode = e.get(contract.ENV_PREFETCH, "").strip().lower() or "auto"
    if mode not in PREFETCH_MODES:
        raise ConfigError(
            f"{contract.ENV_PREFETCH}={mode!r} is not one of {', '.join(PREFETCH_MODES)}"
        )
    if mode != "auto":
        return mode == "on"
    return accelerator or trainer_cpus(e, cpus) > threads


def tune_allocator() -> bool:
    """Keep freed memory in the process (glibc only; a no-op elsewhere)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = True
    for opt, val in (
        (_M_MMAP_THRESHOLD, KEEP_FREED_BYTES),
        (_M_TRIM_THRESHOLD, KEEP_FREED_BYTES),
        (_M_TOP_PAD, 256 << 20),
    ):
        ok = bool(mallopt(ctypes.c_int(opt), ctypes.c_int(val))) and ok
    return ok


def configure_trainer_process(env: Mapping[str, str] | None = None) -> int:
    """Set torch's thread count and tune the allocator; returns the thread count."""
    threads = trainer_threads(env)
    torch.set_num_threads(threads)
    # a co-located trainer's shared-memory gathers run on its own CPUs: a second thread
    # only takes a core from the trainer beside it (measured with 2 trainers on 2 CPUs:
    # a step's read 25.5-26.4 ms of process CPU with 2 threads, 24.5-24.9 ms with 1)
    set_default_threads(threads)
    allocator = tune_allocator()
    log.info(
        "trainer process",
        extra=kv(
            threads=threads,
            cpu_share=trainer_cpus(env),
            prefetch_on_cpu=use_prefetch(threads, env),
            allocator_tuned=allocator,
        ),
    )
    return threads
