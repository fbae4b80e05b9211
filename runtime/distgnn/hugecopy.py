"""A private copy of a read-only array on transparent huge pages (Linux).

A co-located trainer's in-process sampling draws from its server's CSC in shared memory,
which ``/dev/shm`` backs with 4 KiB pages (a tmpfs mount without ``huge=``): a step's
draw reads the seeds' ``indptr`` entries and their sampled sources across 52 MB of the
benchmark's partition, a TLB miss for most of them. The same draw over a copy of those
two arrays on 2 MiB pages takes 3.6 instead of 4.3 ms a step (the captured draws of 4
steps, thread time, caches flushed between calls; without huge pages the copy is no
faster). :func:`huge_copy` makes that copy: anonymous memory, 2 MiB-aligned, advised
``MADV_HUGEPAGE``, written once, then read-only.
"""

from __future__ import annotations

import mmap

import numpy as np

HUGE = 2 << 20
"""The huge page size the copy is aligned to (x86-64 and arm64 with 4 KiB base pages)."""
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_available(path: str = THP_ENABLED) -> bool:
    """Whether ``MADV_HUGEPAGE`` memory can get transparent huge pages here (the kernel's
    setting is ``always`` or ``madvise``, and Python can advise it)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open(path, encoding="ascii") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def huge_copy(a: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous copy of ``a`` in its own anonymous mapping, 2 MiB-aligned
    and advised ``MADV_HUGEPAGE`` before it is written (so the kernel backs it with huge
    pages where it can; the same values either way). OSError when the mapping fails."""
    a = np.ascontiguousarray(a)
    m = mmap.mmap(-1, a.nbytes + HUGE)
    whole = np.frombuffer(m, np.uint8)
    start = -whole.ctypes.data % HUGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    out = np.frombuffer(m, a.dtype, a.size, start).reshape(a.shape)
    out[...] = a
    out.flags.writeable = False
    return out
