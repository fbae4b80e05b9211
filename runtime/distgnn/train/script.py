"""``python -m distgnn.train.script SCRIPT [ARG ...]`` (or ``-m MODULE [ARG ...]``): a job's
user command (``trainers.command: [python, SCRIPT, ...]``) run as plain ``python`` runs it,
but for one exit status: a module missing from the environment exits
:data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2), as ``distgnn train`` does, so the operator
and ``distgnn run`` fail the job at once instead of restarting the trainer group up to
``backoffLimit`` (no restart installs it). :func:`distgnn.api.commands.trainer_command`
wraps a user command in it, for the operator and local mode alike.

The script sees what ``python SCRIPT ARG ...`` gives it: ``__name__ == "__main__"``,
``__file__`` its absolute path, ``sys.argv == [SCRIPT, ARG, ...]`` and ``sys.path[0]``
the script's folder (symbolic links resolved) in place of the working folder that
``python -m`` put there; with ``-m MODULE``, what ``python -m MODULE`` gives
(:func:`runpy.run_module`: ``sys.argv[0]`` the module's file, ``sys.path[0]`` the working
folder). Its exit status is its own (``sys.exit``, 1 for an uncaught exception, with the
traceback), but for a ``ModuleNotFoundError`` of a top-level module (``import tqdm``
where tqdm is not installed, or ``-m MODULE`` whose top-level package is not): the
traceback, one line ``distgnn script: error: No module
named 'tqdm' (not installed for PYTHON)``, the same as the JSON error record in the
termination log (``DISTGNN_TERMINATION_LOG``) that the operator reads, and exit 2.
Torch-free: it imports nothing the script does not.
"""

from __future__ import annotations

import builtins
import json
import os
import runpy
import sys
import traceback
import types
from importlib.machinery import SourceFileLoader

from distgnn import contract

USAGE = "usage: python -m distgnn.train.script (SCRIPT | -m MODULE) [ARG ...]"
PROG = "distgnn script"


def main(argv: list[str] | None = None) -> int:
    """Run the script or module of ``argv`` (default ``sys.argv[1:]``); its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or (args[0] == "-m" and len(args) < 2):
        print(USAGE, file=sys.stderr)
        return contract.EXIT_CONFIG_ERROR
    try:
        if args[0] == "-m":
            find_module(args[1])
            sys.argv[:] = [args[1], *args[2:]]  # run_module puts the module's file first
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            run_script(args[0], args[1:])
    except ModuleNotFoundError as e:
        if not missing_top_level(e):
            raise
        traceback.print_exception(e.with_traceback(_users_frames(e.__traceback__)))
        line = missing_module_line(e)
        print(f"{PROG}: error: {line}", file=sys.stderr)
        _termination_log(type(e).__name__, line)
        return contract.EXIT_CONFIG_ERROR
    return 0


def find_module(name: str) -> None:
    """ModuleNotFoundError (``name``: the missing top-level module) when ``name`` is not
    installed, as runpy's lookup would otherwise report it (an ImportError, exit 1)."""
    import importlib.util

    if importlib.util.find_spec(name) is None and "." not in name:  # a missing parent raises
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def run_script(path: str, args: list[str]) -> None:
    """Execute the file ``path`` as ``__main__`` with ``sys.argv == [path, *args]``, as
    ``python PATH ARGS`` does."""
    full = os.path.abspath(path)
    try:
        with open(full, "rb") as f:
            source = f.read()
    except OSError as e:  # as python: "can't open file ...", exit 2
        print(f"{sys.executable}: can't open file {full!r}: {e}", file=sys.stderr)
        raise SystemExit(contract.EXIT_CONFIG_ERROR) from None
    code = compile(source, full, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=full,
        __cached__=None,
        __package__=None,
        __spec__=None,
        __loader__=SourceFileLoader("__main__", full),
        __builtins__=builtins,
    )
    sys.modules["__main__"] = main  # multiprocessing's spawn re-runs it from __file__
    sys.argv[:] = [path, *args]
    here = os.getcwd()
    if sys.path and sys.path[0] in ("", here):  # what `python -m` put first
        sys.path[0] = os.path.dirname(os.path.realpath(full))
    exec(code, main.__dict__)


def _users_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback from the user's first frame on (this runner's and runpy's left out)."""
    ours = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def missing_top_level(e: ModuleNotFoundError) -> bool:
    """Whether the error is a top-level module that is not installed (``import tqdm``),
    not a submodule a package lacks or one raised by hand without a name."""
    return bool(e.name) and "." not in str(e.name)


def missing_module_line(e: ModuleNotFoundError) -> str:
    """The missing module, and the interpreter that lacks it."""
    return f"{e} (not installed for {sys.executable})"


def _termination_log(error: str, message: str) -> None:
    """The JSON error record ``distgnn train`` writes, one line (best effort)."""
    path = os.environ.get(contract.ENV_TERMINATION_LOG)
    if not path:
        return
    rank = contract.trainer_rank(os.environ) or "0"
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"error": error, "message": message, "rank": rank}))
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
