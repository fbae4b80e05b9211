"""How a trainer process ends: a deterministic exit once its work is done.

A finished trainer's outcome is decided before the interpreter is torn down: its results
are published, its logs written and its process group destroyed. What CPython and the
C++ libraries loaded into it do afterwards is not: module teardown frees the torch
objects still alive (the default process group stays referenced by
``torch.distributed.nn.functional``'s default arguments once DDP has run, so
``destroy_process_group`` does not free it; its gloo worker and transport threads and,
on rank 0, the TCP store's server thread are only stopped during teardown), and then
C++ static destructors run beside whatever native threads are left. A race there ends
the process with ``std::terminate`` ("terminate called without an active exception",
SIGABRT): a finished run reported as a failure (seen once in ~40 runs of the 1M-node
training benchmark on rank 0).

:func:`end_process` ends the process the way a normal exit would, up to that point:
non-daemon threads are joined and ``atexit`` callbacks run (logging is shut down,
``weakref.finalize`` callbacks and multiprocessing clean-up run), Python's and C's stdio
buffers are flushed;
then ``os._exit(code)`` skips module teardown and static destructors. The last line a
trainer logs is ``trainer exit`` with its exit code.
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

from distgnn.log import kv

log = logging.getLogger("distgnn.train")


def end_process(code: int) -> NoReturn:
    """Log ``trainer exit``, run what a normal exit runs before interpreter teardown
    (join non-daemon threads, ``atexit`` callbacks, flush stdio), then ``os._exit(code)``.
    Call from the main thread, after the process group is destroyed."""
    log.info("trainer exit", extra=kv(code=code))
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
