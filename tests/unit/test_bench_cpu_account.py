"""bench/cpu_account.py: the whole-machine account bench_training.py prints per mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cpu_account

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/schedstat").exists(), reason="needs Linux /proc schedstat"
)

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_a_process_trees_cpu_counts_its_descendants_and_a_sleeping_thread_is_blocked() -> None:
    # the child only waits; its own child burns 0.3 s of CPU, then both wait for stdin
    grandchild = BURN + "print('burnt', flush=True)\nimport sys\nsys.stdin.read()\n"
    child = textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", {grandchild!r}],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        print(p.stdout.readline().strip(), flush=True)
        sys.stdin.read()
        p.stdin.close()
        p.wait()
    """)
    with subprocess.Popen(
        [sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as p:
        before = cpu_account.snapshot({"tree": [p.pid]})
        alone0 = cpu_account.proc_times(p.pid)
        assert p.stdout is not None and p.stdout.readline().strip() == "burnt"
        assert len(cpu_account.children(p.pid)) == 1
        time.sleep(0.2)  # this thread: off its core, not waiting for one
        after = cpu_account.snapshot({"tree": [p.pid]})
        alone = cpu_account.proc_times(p.pid) - alone0
        p.stdin.close()  # type: ignore[union-attr]
        p.wait(30)
    acc = cpu_account.account(before, after, cores=2)
    tree = acc.groups["tree"]
    assert tree.cpu_s >= 0.25, tree  # the grandchild's burn (it started after `before`)
    assert tree.cpu_s <= acc.wall_s + 0.05
    assert alone.cpu_s < 0.25  # without descendants: the waiting child only
    assert acc.thread.cpu_s < 0.1
    assert acc.thread_blocked_s >= 0.15
    assert acc.capacity_s == pytest.approx(2 * acc.wall_s)
    assert acc.machine_busy_s >= 0.8 * tree.cpu_s  # the machine saw that burn too
    assert acc.other_s >= 0.0


def test_a_process_that_is_gone_counts_zero() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    assert cpu_account.proc_times(p.pid) == cpu_account.ProcTimes()
    assert cpu_account.children(p.pid) == []
