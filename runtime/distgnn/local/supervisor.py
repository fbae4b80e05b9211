"""Supervision of local processes: start, stream logs with a prefix, wait, stop cleanly.

Every child runs in its own session (process group), so stopping it also stops the
worker and sampler processes it spawned: SIGTERM to the group, then SIGKILL after a
grace period. On Linux each child also gets SIGTERM if the supervising process
dies without cleaning up (even by SIGKILL), so no server outlives a killed
``distgnn run``. Output (stdout and stderr merged) is streamed line by line to one
stream as ``NAME | line`` and the last lines are kept for error messages. With
``json_lines`` (the run logs JSON) every line stays one JSON object instead: a child's
JSON log line gets a ``process`` field, any other line (a print, a traceback) is
wrapped as the ``msg`` of a JSON object, so the whole run's output parses line by line.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import psutil

from distgnn.errors import JobFailed
from distgnn.log import kv

log = logging.getLogger("distgnn.local.supervisor")


_PR_SET_PDEATHSIG = 1


def _pdeathsig_hook() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux for SIGTERM when the parent dies; None elsewhere.

    libc's ``prctl`` is resolved here, in the parent, so the hook run in the forked
    child only makes one foreign call (no imports, no library loading).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGTERM)

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)

    return hook


@dataclass(frozen=True)
class ProcessSpec:
    """What to run: a name (the log prefix), the argv, the full environment, the folder."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None


@dataclass
class ManagedProcess:
    """One supervised child and the last lines of its output."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    tail: deque[str]
    reader: threading.Thread
    started: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        return self.popen.poll()

    def last_lines(self, n: int = 20) -> list[str]:
        return list(self.tail)[-n:]


class Supervisor:
    """Starts and stops a set of named processes; a context manager that stops all on exit."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tail_lines: int = 50,
        grace: float = 10.0,
        json_lines: bool = False,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.json_lines = json_lines
        self.fields = dict(fields or {})
        self.tail_lines = tail_lines
        self.grace = grace
        self.procs: dict[str, ManagedProcess] = {}
        self._lock = threading.Lock()
        self._pre_exec = _pdeathsig_hook()

    # -- starting ----------------------------------------------------------------
    def start(self, spec: ProcessSpec) -> ManagedProcess:
        """Start ``spec`` in a new session (JobFailed if it cannot be executed; ValueError if
        that name is already running)."""
        old = self.procs.get(spec.name)
        if old is not None and old.poll() is None:
            raise ValueError(f"process {spec.name!r} is already running (pid {old.pid})")
        if old is not None:
            self._reap(old)
        try:
            popen = subprocess.Popen(
                list(spec.argv),
                env=dict(spec.env) if spec.env is not None else None,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Started from the main thread only: PDEATHSIG follows the thread that
                # forked, which lives as long as the supervisor. The hook is one prctl call.
                preexec_fn=self._pre_exec,  # noqa: PLW1509
            )
        except OSError as e:
            raise JobFailed(
                f"cannot start {spec.name}: {spec.argv[0] if spec.argv else '(empty command)'}: "
                f"{e.strerror or e}"
            ) from e
        tail: deque[str] = deque(maxlen=self.tail_lines)
        reader = threading.Thread(
            target=self._pump, args=(spec.name, popen, tail), name=f"log-{spec.name}", daemon=True
        )
        proc = ManagedProcess(spec=spec, popen=popen, tail=tail, reader=reader)
        self.procs[spec.name] = proc
        reader.start()
        log.debug("started %s", spec.name, extra=kv(process=spec.name, pid=popen.pid))
        return proc

    def _pump(self, name: str, popen: subprocess.Popen[bytes], tail: deque[str]) -> None:
        assert popen.stdout is not None
        for raw in iter(popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            tail.append(line)
            out = self._json_line(name, line) if self.json_lines else f"{name} | {line}"
            with self._lock:
                try:
                    self.stream.write(out + "\n")
                    self.stream.flush()
                except (OSError, ValueError):  # our own stream closed: keep draining
                    pass

    def _json_line(self, name: str, line: str) -> str:
        """One JSON object per output line, tagged with the process name."""
        obj: Any = None
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
        if not isinstance(obj, dict) or "msg" not in obj:
            obj = {
                "ts": round(time.time(), 3),
                "level": "info",
                "logger": "distgnn.local.output",
                # a JSON object printed by the child (its final metrics) stays structured
                **({"msg": "output", "output": obj} if isinstance(obj, dict) else {"msg": line}),
            }
        obj.setdefault("process", name)
        for k, v in self.fields.items():
            obj.setdefault(k, v)
        return json.dumps(obj, default=str)

    # -- waiting -----------------------------------------------------------------
    def exited(self, names: Iterable[str] | None = None) -> list[ManagedProcess]:
        """The processes (among ``names``, default all) that have exited."""
        chosen = self.procs.values() if names is None else [self.procs[n] for n in names]
        return [p for p in chosen if p.poll() is not None]

    def wait_first(
        self,
        names: Iterable[str],
        timeout: float | None,
        *,
        interval: float = 0.05,
        failures_only: bool = False,
    ) -> ManagedProcess | None:
        """Wait until one of ``names`` exits (or, with ``failures_only``, exits non-zero,
        or all have exited); None on timeout."""
        wanted = list(names)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = self.exited(wanted)
            if failures_only:
                bad = [p for p in done if p.poll() != 0]
                if bad:
                    return bad[0]
                if len(done) == len(wanted) and done:
                    return done[0]
            elif done:
                return done[0]
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(interval)

    # -- stopping ----------------------------------------------------------------
    def stop(self, names: Iterable[str] | None = None, grace: float | None = None) -> None:
        """SIGTERM the process groups of ``names`` (default all), SIGKILL after ``grace``."""
        grace = self.grace if grace is None else grace
        chosen = list(self.procs.values()) if names is None else [self.procs[n] for n in names]
        for p in chosen:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in chosen:
            while time.monotonic() < deadline and _group_alive(p.pid):
                p.poll()
                time.sleep(0.05)
            if _group_alive(p.pid):
                log.warning(
                    "%s did not stop within %.0fs; killing it",
                    p.name,
                    grace,
                    extra=kv(process=p.name, pid=p.pid),
                )
                _signal_group(p.pid, signal.SIGKILL)
        for p in chosen:
            self._reap(p)

    def _reap(self, p: ManagedProcess) -> None:
        try:
            p.popen.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            _signal_group(p.pid, signal.SIGKILL)
            p.popen.wait(timeout=self.grace)
        # Grandchildren holding the pipe die with the group; bound the wait anyway.
        kill_deadline = time.monotonic() + self.grace
        while _group_alive(p.pid) and time.monotonic() < kill_deadline:
            _signal_group(p.pid, signal.SIGKILL)
            time.sleep(0.05)
        p.reader.join(timeout=self.grace)
        if p.popen.stdout is not None and not p.reader.is_alive():
            p.popen.stdout.close()

    def close(self) -> None:
        """Stop every process and release the pipes."""
        if self.procs:
            self.stop()
        for p in self.procs.values():
            if p.popen.stdout is not None and not p.popen.stdout.closed:
                p.reader.join(timeout=1.0)
                if not p.reader.is_alive():
                    p.popen.stdout.close()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while any non-zombie process remains in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def describe_exit(code: int | None) -> str:
    """``exit code 3`` or ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
