"""``end_process``: a finished trainer's exit is decided before interpreter teardown.

The child processes plant a crash in module teardown (an object whose ``__del__`` aborts,
standing in for a native static-destructor race such as "terminate called without an
active exception") and leave stdout block-buffered (a pipe, ``PYTHONUNBUFFERED`` unset).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

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
        ("trainer exit", None, code),
    ]


def test_without_end_process_the_teardown_crash_fails_a_finished_run() -> None:
    """The planted crash is real: a plain exit reports a finished run as SIGABRT."""
    p = _run("sys.exit", 0)
    assert p.returncode == -signal.SIGABRT
    assert "results: 42" in p.stdout
