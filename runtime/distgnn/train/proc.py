"""Per-process tuning for trainers: torch threads and the C allocator.

* **Threads.** Trainers on one machine share its cores. ``OMP_NUM_THREADS`` (set by
  local mode and torchrun-like launchers) wins; otherwise each trainer takes
  ``max(1, cpus // LOCAL_WORLD_SIZE)`` threads (``LOCAL_WORLD_SIZE`` defaults to 1).
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

from distgnn.log import kv

log = logging.getLogger("distgnn.train")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 1 << 30


def trainer_threads(env: Mapping[str, str] | None = None, cpus: int | None = None) -> int:
    """Torch threads for this trainer (see the module docstring)."""
    e = os.environ if env is None else env
    omp = e.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    local = e.get("LOCAL_WORLD_SIZE", "").strip()
    n = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, (cpus if cpus is not None else os.cpu_count() or 1) // n)


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
    allocator = tune_allocator()
    log.info("trainer process", extra=kv(threads=threads, allocator_tuned=allocator))
    return threads
