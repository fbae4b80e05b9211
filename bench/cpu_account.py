"""Where a machine's cores went during a timed window (Linux ``/proc``; benchmarks only).

A :class:`Snapshot` holds, at one instant, the CPU time of chosen processes (user +
system of every thread, finished ones included: ``/proc/PID/stat``), the time their
live threads spent runnable but waiting for a core (``/proc/PID/task/*/schedstat``),
the CPU and run-queue wait of one thread, and the whole machine's busy / idle / steal
time (``/proc/stat``). The difference of two snapshots (:func:`account`) gives, over the
window: every group's CPU, the rest of the machine's (other processes), the idle
core-seconds, and for the watched thread its CPU, its wait for a core and its blocked
time (sleeping on a socket, a lock or a peer: wall less the other two).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcTimes:
    """One process tree's CPU seconds (all threads) and live threads' run-queue wait."""

    cpu_s: float = 0.0
    runq_s: float = 0.0
    sys_s: float = 0.0
    """Of ``cpu_s``, in the kernel (system calls, page faults)."""
    faults: int = 0
    """Minor page faults (first touches of fresh memory, among others)."""

    def __sub__(self, other: ProcTimes) -> ProcTimes:
        return ProcTimes(
            self.cpu_s - other.cpu_s,
            self.runq_s - other.runq_s,
            self.sys_s - other.sys_s,
            self.faults - other.faults,
        )

    def __add__(self, other: ProcTimes) -> ProcTimes:
        return ProcTimes(
            self.cpu_s + other.cpu_s,
            self.runq_s + other.runq_s,
            self.sys_s + other.sys_s,
            self.faults + other.faults,
        )


@dataclass(frozen=True)
class Snapshot:
    """CPU counters at one instant (see the module docstring)."""

    wall: float
    groups: dict[str, ProcTimes] = field(default_factory=dict)
    thread: ProcTimes = ProcTimes()
    busy_s: float = 0.0
    idle_s: float = 0.0
    steal_s: float = 0.0


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return ""


def _stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/.../stat`` line after the ``(comm)`` (which may hold spaces)."""
    return text[text.rfind(")") + 2 :].split() if text else []


def children(pid: int) -> list[int]:
    """``pid``'s descendants (a scan of ``/proc``)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat_fields(_read(f"/proc/{name}/stat"))
            if len(f) > 2:
                parent[int(name)] = int(f[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def proc_times(pid: int) -> ProcTimes:
    """CPU (utime + stime of the process: its finished threads count) and the summed
    run-queue wait of its live threads; zeros for a process that is gone."""
    f = _stat_fields(_read(f"/proc/{pid}/stat"))
    if len(f) < 13:
        return ProcTimes()
    cpu = (int(f[11]) + int(f[12])) / CLK_TCK
    runq = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        s = _read(f"/proc/{pid}/task/{tid}/schedstat").split()
        if len(s) >= 2:
            runq += int(s[1])
    return ProcTimes(cpu, runq / 1e9, int(f[12]) / CLK_TCK, int(f[7]))


def thread_times() -> ProcTimes:
    """The calling thread's CPU and run-queue wait (``/proc/thread-self/schedstat``),
    kernel time and minor faults (``getrusage(RUSAGE_THREAD)``)."""
    s = _read("/proc/thread-self/schedstat").split()
    ru = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    if len(s) < 2:
        return ProcTimes(time.thread_time(), 0.0, ru.ru_stime, ru.ru_minflt)
    return ProcTimes(int(s[0]) / 1e9, int(s[1]) / 1e9, ru.ru_stime, ru.ru_minflt)


def tree_times(pids: list[int]) -> ProcTimes:
    """:func:`proc_times` summed over ``pids`` and all their descendants."""
    total = ProcTimes()
    for pid in pids:
        for p in [pid, *children(pid)]:
            total = total + proc_times(p)
    return total


def machine_times() -> tuple[float, float, float]:
    """``(busy, idle, steal)`` seconds summed over the machine's CPUs (``/proc/stat``;
    iowait counts as idle, steal as neither)."""
    first = _read("/proc/stat").split("\n", 1)[0].split()
    if not first or first[0] != "cpu":
        return 0.0, 0.0, 0.0
    v = [int(x) for x in first[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v + [0] * (8 - len(v))
    busy = user + nice + system + irq + softirq
    return busy / CLK_TCK, (idle + iowait) / CLK_TCK, steal / CLK_TCK


def snapshot(groups: dict[str, list[int]] | None = None) -> Snapshot:
    """Counters now: each named group's process trees, this thread, the machine."""
    busy, idle, steal = machine_times()
    return Snapshot(
        wall=time.perf_counter(),
        groups={k: tree_times(v) for k, v in (groups or {}).items()},
        thread=thread_times(),
        busy_s=busy,
        idle_s=idle,
        steal_s=steal,
    )


@dataclass(frozen=True)
class Account:
    """A window's accounting (seconds; core-seconds for the machine's figures)."""

    wall_s: float
    cores: int
    groups: dict[str, ProcTimes]
    thread: ProcTimes
    machine_busy_s: float
    machine_idle_s: float
    steal_s: float

    @property
    def capacity_s(self) -> float:
        return self.cores * self.wall_s

    @property
    def ours_s(self) -> float:
        return sum(g.cpu_s for g in self.groups.values())

    @property
    def other_s(self) -> float:
        """Busy time of processes outside the groups (never below 0: tick rounding)."""
        return max(0.0, self.machine_busy_s - self.ours_s)

    @property
    def thread_blocked_s(self) -> float:
        """The watched thread's time neither on a core nor waiting for one."""
        return max(0.0, self.wall_s - self.thread.cpu_s - self.thread.runq_s)


def account(a: Snapshot, b: Snapshot, cores: int | None = None) -> Account:
    """The window from ``a`` to ``b`` (groups present in both)."""
    return Account(
        wall_s=b.wall - a.wall,
        cores=cores or os.cpu_count() or 1,
        groups={k: b.groups[k] - a.groups[k] for k in a.groups if k in b.groups},
        thread=b.thread - a.thread,
        machine_busy_s=b.busy_s - a.busy_s,
        machine_idle_s=b.idle_s - a.idle_s,
        steal_s=b.steal_s - a.steal_s,
    )
