"""How many CPUs this process may use (affinity, capped by a cgroup v2 CPU quota)."""

from __future__ import annotations

import math
import os

CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"


def available_cpus(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a pod's or
    container's ``limits.cpu``, rounded up); at least 1."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)
