"""The local-mode supervisor with stand-in processes (real ``python -c`` children)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from distgnn.local.supervisor import ProcessSpec, Supervisor, describe_exit


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_streams_prefixed_output_and_keeps_tail() -> None:
    out = io.StringIO()
    with Supervisor(out, tail_lines=3) as sup:
        sup.start(ProcessSpec("worker-0", py("for i in range(5): print('line', i)")))
        p = sup.wait_first(["worker-0"], timeout=60)
        assert p is not None and p.poll() == 0
        sup.stop(["worker-0"])
        assert p.last_lines() == ["line 2", "line 3", "line 4"]
    lines = out.getvalue().splitlines()
    assert lines == [f"worker-0 | line {i}" for i in range(5)]


def test_wait_first_reports_the_failing_process() -> None:
    with Supervisor(io.StringIO(), grace=5) as sup:
        sup.start(ProcessSpec("slow", py("import time; time.sleep(60)")))
        sup.start(ProcessSpec("bad", py("import sys; print('boom'); sys.exit(3)")))
        p = sup.wait_first(["slow", "bad"], timeout=60, failures_only=True)
        assert p is not None and p.name == "bad"
        assert p.poll() == 3
        assert describe_exit(p.poll()) == "exit code 3"
        assert "boom" in p.last_lines()
        assert sup.procs["slow"].poll() is None


def test_wait_first_failures_only_returns_when_all_succeed() -> None:
    with Supervisor(io.StringIO()) as sup:
        for i in range(2):
            sup.start(ProcessSpec(f"ok-{i}", py("pass")))
        p = sup.wait_first(["ok-0", "ok-1"], timeout=60, failures_only=True)
        assert p is not None and p.poll() == 0
        assert all(q.poll() == 0 for q in sup.procs.values())


def test_wait_first_times_out() -> None:
    with Supervisor(io.StringIO(), grace=5) as sup:
        sup.start(ProcessSpec("sleeper", py("import time; time.sleep(60)")))
        assert sup.wait_first(["sleeper"], timeout=0.2) is None


def test_stop_kills_grandchildren_and_escalates_to_sigkill() -> None:
    # The child ignores SIGTERM and spawns a grandchild that does too.
    code = """
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        g = subprocess.Popen([sys.executable, '-c',
            'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])
        print('grandchild', g.pid, flush=True)
        time.sleep(120)
    """
    with Supervisor(io.StringIO(), grace=1.0) as sup:
        p = sup.start(ProcessSpec("stubborn", py(code)))
        deadline = time.monotonic() + 60
        while not any(ln.startswith("grandchild") for ln in p.last_lines()):
            assert time.monotonic() < deadline, "child never started its grandchild"
            time.sleep(0.05)
        gpid = int(next(ln for ln in p.last_lines() if ln.startswith("grandchild")).split()[1])
        sup.stop(["stubborn"])
        assert p.poll() == -9
        assert describe_exit(p.poll()) == "killed by SIGKILL"
        assert not _alive(gpid)


def test_restart_under_the_same_name() -> None:
    with Supervisor(io.StringIO()) as sup:
        sup.start(ProcessSpec("t", py("print('first')")))
        sup.wait_first(["t"], timeout=60)
        with pytest.raises(ValueError, match="already running"):
            sup.start(ProcessSpec("s", py("import time; time.sleep(30)")))
            sup.start(ProcessSpec("s", py("pass")))
        p = sup.start(ProcessSpec("t", py("print('second')")))
        sup.wait_first(["t"], timeout=60)
        sup.stop(["t"])
        assert p.last_lines() == ["second"]


def test_env_and_cwd_are_passed(tmp_path: os.PathLike[str]) -> None:
    env = dict(os.environ, STANDIN_VALUE="42")
    with Supervisor(io.StringIO()) as sup:
        p = sup.start(
            ProcessSpec(
                "envy",
                py("import os; print(os.environ['STANDIN_VALUE'], os.getcwd())"),
                env=env,
                cwd=str(tmp_path),
            )
        )
        sup.wait_first(["envy"], timeout=60)
        sup.stop(["envy"])
        assert p.last_lines() == [f"42 {os.path.realpath(tmp_path)}"]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_command_that_cannot_start_is_a_clear_error(tmp_path: os.PathLike[str]) -> None:
    from distgnn.errors import JobFailed

    with Supervisor(io.StringIO()) as sup, pytest.raises(JobFailed, match=r"cannot start t.*nope"):
        sup.start(ProcessSpec("t", [os.path.join(str(tmp_path), "nope")]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PDEATHSIG is Linux-only")
def test_children_die_when_the_supervisor_is_killed() -> None:
    """A SIGKILLed ``distgnn run`` must not leave servers behind."""
    script = textwrap.dedent(
        """
        import sys, time
        from distgnn.local.supervisor import ProcessSpec, Supervisor
        sup = Supervisor()
        argv = [sys.executable, "-c", "import time; time.sleep(120)"]
        p = sup.start(ProcessSpec("sleeper", argv))
        print(p.pid, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(child_pid)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"child {child_pid} outlived its killed supervisor")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
