"""How a trainer process ends: a deterministic exit once its work is done.

A finished trainer's outcome is decided before the interpreter is torn down: its results
are published, its logs written and its process group destroyed. Interpreter teardown
can still abort it. Caught in a core dump (torch 2.13, CPython 3.11): a gloo worker
thread marks a collective complete, which wakes the main thread, before it drops its own
reference to the work object. If the main thread reaches ``Py_FinalizeEx`` first (the
worker descheduled on a loaded machine), the worker drops the last reference;
``~AsyncWork`` destroys the thread-local state captured when the work was queued, whose
Python object needs the GIL; in a finalizing interpreter, taking the GIL ends a non-main
thread with ``pthread_exit``, whose forced unwind through that ``noexcept`` destructor
calls ``std::terminate``: "terminate called without an active exception", SIGABRT, a
finished run reported as failed (rank 0 of the 1M-node training benchmark, ~1 run in
40). Destroying the group does not stop its threads: once DDP has run, the default group
stays referenced by ``torch.distributed.nn.functional``'s default arguments, and its gloo
threads (and rank 0's TCP store server) are only stopped in teardown.

:func:`end_process` ends the process the way a normal exit would, up to that point:
non-daemon threads are joined and ``atexit`` callbacks run (logging is shut down,
``weakref.finalize`` callbacks and multiprocessing clean-up run), Python's and C's stdio
buffers are flushed; then ``os._exit(code)`` skips interpreter teardown and static
destructors: a native thread that still needs the GIL waits for it and never meets a
finalizing interpreter. It logs nothing itself:
a trainer's last output line stays its own (``distgnn run`` reads metrics from it).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import sys
import threading
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """Run what a normal exit runs before interpreter teardown
    (join non-daemon threads, ``atexit`` callbacks, flush stdio), then ``os._exit(code)``.
    Call from the main thread, after the process group is destroyed."""
    join_threads = getattr(threading, "_shutdown", None)  # what Py_Finalize calls first
    if join_threads is not None and threading.current_thread() is threading.main_thread():
        join_threads()
    atexit._run_exitfuncs()  # logging.shutdown() flushes and closes every handler
    logging.shutdown()  # again: a handler added by an atexit callback
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
    with contextlib.suppress(Exception):  # C stdio buffers of native code, too
        ctypes.CDLL(None).fflush(None)
    os._exit(code)


def write_termination_log(path: str, text: str) -> None:
    """Best effort: the termination log must never mask the real outcome. Torch-free, so
    a trainer whose environment lacks torch still leaves its root cause there."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:4000])
    except OSError:
        pass
