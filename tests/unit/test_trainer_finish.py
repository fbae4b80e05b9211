"""``end_process``: a finished trainer's exit is decided before interpreter teardown.

``GLOO_CHILD`` is the cause caught in the 1M-node benchmark's core dump, made
deterministic: a gloo worker thread that needs the GIL while the interpreter finalizes
(there: dropping the last reference to a finished all-reduce; here: a completion
callback that takes the GIL back every 10 ms until finalizing has begun). It used to
wait on a lock that a ``__del__`` released in module teardown; when the worker was
already waiting, that ``__del__`` never ran before the wait's 20 s timeout (finalizing
stalled on the waiting worker first), so the test took 21 s about half the time, and
ended on another abort. ``CHILD`` plants a crash in module
teardown and leaves stdout block-buffered (a pipe, ``PYTHONUNBUFFERED`` unset) to show
that nothing a finished trainer wrote is lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

GLOO_CHILD = """
import _thread, datetime, resource, sys, time
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves no core file
import torch, torch.distributed as dist
from distgnn.train.finish import end_process

store = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
main, ran_in = _thread.get_ident(), []

def until_teardown(f, finalizing=sys.is_finalizing, sleep=time.sleep, t0=time.monotonic()):
    # in gloo's worker: takes the GIL back every 10 ms until the interpreter finalizes
    ran_in.append(_thread.get_ident())
    while ran_in[-1] != main and not finalizing() and time.monotonic() - t0 < 60:
        sleep(0.01)

for _ in range(10000):  # a callback added to a finished future runs at once, in this thread
    ran_in.clear()
    fut = dist.all_reduce(torch.ones(4), async_op=True).get_future().then(until_teardown)
    if main not in ran_in:
        break
else:
    sys.exit("no callback ran in a gloo worker")
print("results: 42")
if sys.argv[1] == "end_process":
    end_process(0)
"""


def _gloo_child(how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", GLOO_CHILD, how],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_end_process_outlives_a_gloo_thread_that_needs_the_gil() -> None:
    p = _gloo_child("end_process")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["results: 42"]


@pytest.mark.skipif(
    sys.version_info >= (3, 14), reason="CPython 3.14 hangs such threads instead of ending them"
)
def test_without_end_process_that_gloo_thread_aborts_a_finished_run() -> None:
    """What the benchmark saw (torch 2.13, CPython 3.11): taking the GIL in a finalizing
    interpreter ends the worker with ``pthread_exit``; its forced unwind through a
    ``noexcept`` frame calls ``std::terminate``."""
    p = _gloo_child("exit")
    assert p.returncode == -signal.SIGABRT, p.stderr
    assert "results: 42" in p.stdout
    assert "terminate called" in p.stderr, p.stderr  # std::terminate, not another abort


CHILD = """
import atexit, ctypes, logging, os, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the planted abort leaves no core file
from distgnn import log as dlog
from distgnn.log import kv
from distgnn.train.finish import end_process

class TeardownCrash:
    def __del__(self):
        os.abort()

CRASH = TeardownCrash()  # freed, and aborts, only in interpreter teardown
dlog.setup(level="INFO", fmt="json")
atexit.register(lambda: print("atexit callback ran"))
print("results: 42")  # block-buffered
ctypes.CDLL(None).printf(b"native line\\n")  # C stdio: block-buffered too
logging.getLogger("distgnn.train").info("published", extra=kv(step=7))
code = int(sys.argv[2])
if sys.argv[1] == "end_process":
    end_process(code)
sys.exit(code)
"""


def _run(how: str, code: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", CHILD, how, str(code)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("code", [0, 3])
def test_end_process_skips_a_teardown_crash_and_loses_no_output(code: int) -> None:
    p = _run("end_process", code)
    assert p.returncode == code, p.stderr
    assert p.stdout.splitlines() == ["results: 42", "atexit callback ran", "native line"]
    lines = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    assert [(r["msg"], r.get("step"), r.get("code")) for r in lines] == [
        ("published", 7, None),
    ]


def test_without_end_process_the_teardown_crash_fails_a_finished_run() -> None:
    """The planted crash is real: a plain exit reports a finished run as SIGABRT."""
    p = _run("sys.exit", 0)
    assert p.returncode == -signal.SIGABRT
    assert "results: 42" in p.stdout
