"""The ``distgnn`` command: one entry point, one subcommand per capability.

Each subcommand lives in its own module exposing ``HELP: str``,
``add_arguments(parser)`` and ``main(args) -> int``; those modules import heavy
dependencies (torch, pymetis) inside ``main`` so ``distgnn --help`` stays fast.
A :class:`~distgnn.errors.DistGNNError` is printed as one clear line (exit 2),
never as a traceback; so is a mistyped command line (an unknown subcommand, choice or
option: one line with the closest valid name, not argparse's usage block). A module
that sets ``END_PROCESS = True`` (``train``) ends the process itself when it is the
process's entry (``main()`` reading ``sys.argv``: the ``distgnn`` command,
``python -m distgnn.cli``): see :mod:`distgnn.train.finish`. A module with
``error_status(error) -> int`` (``train``, ``partition``, ``serve``) picks the exit status of its
errors (an object-store failure that no DistGNN error names comes to it as a
:class:`~distgnn.errors.StorageError`).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import select
import sys
from collections.abc import Sequence
from typing import NoReturn

from distgnn import __version__, contract
from distgnn import log as dlog
from distgnn.errors import DistGNNError, StorageError

# subcommand -> module implementing it
COMMANDS: dict[str, str] = {
    "partition": "distgnn.partition.cli_partition",
    "inspect": "distgnn.partition.cli_inspect",
    "generate": "distgnn.graph.cli_generate",
    "serve": "distgnn.server.cli",
    "train": "distgnn.train.cli",
    "score": "distgnn.train.score",
    "run": "distgnn.local.cli",
}


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE (did you mean 'X'?; see
    'PROG --help')``, exit 2. Subparsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}{self.hint(message)}\n")

    def hint(self, message: str) -> str:
        """The closest valid choice or option to what ``message`` refuses, and --help."""
        close: list[str] = []
        m = _INVALID_CHOICE.search(message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
        elif message.startswith("unrecognized arguments: "):
            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            for word in message.split(": ", 1)[1].split():
                if word.startswith("-"):
                    close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                    break
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{mean}; see '{self.prog} --help'"


def build_parser() -> Parser:
    parser = Parser(
        prog="distgnn", description="Distributed GNN training: partition, serve, train, run jobs."
    )
    parser.add_argument("--version", action="version", version=f"distgnn {__version__}")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=dlog.LEVELS,
        default=None,
        help="DEBUG, INFO (default), WARNING, ERROR (any case; env DISTGNN_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="log line format (default: text on a terminal, json otherwise)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:  # a subcommand not built yet in this checkout
            if e.name and modname.startswith(e.name):
                continue
            raise
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; ``argv`` None: this is the process's entry (``sys.argv``)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the subcommand's parser, whose options the hint searches
        sub = _subparsers(parser).get(getattr(args, "command", None) or "", parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        dlog.setup(level=args.log_level, fmt=args.log_format)
    except DistGNNError as e:  # DISTGNN_LOG_LEVEL (--log-level is checked by its parser)
        print(f"distgnn {args.command}: error: {e}", file=sys.stderr)
        return 2
    rc = _run(args)
    if argv is None and getattr(args._module, "END_PROCESS", False):
        from distgnn.train.finish import end_process

        end_process(rc)
    return rc


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has closed it."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _run(args: argparse.Namespace) -> int:
    try:
        rc: int = args._module.main(args)
        return rc
    except DistGNNError as e:
        logging.getLogger("distgnn").debug("error", exc_info=True)
        print(f"distgnn {args.command}: error: {e}", file=sys.stderr)
        status = getattr(args._module, "error_status", None)
        return int(status(e)) if status is not None else contract.EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        print(f"distgnn {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a socket's, not the reader of our output
        # `distgnn inspect ... | head`: the reader has gone, as a shell tool killed by
        # SIGPIPE; stdout goes to /dev/null so the exit's flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        # an object-store failure from a path that does not name its URL itself
        from distgnn import storage

        if not storage.is_remote_failure(e):
            raise
        logging.getLogger("distgnn").debug("error", exc_info=True)
        msg = storage.describe_error(e, "object storage")
        print(f"distgnn {args.command}: error: {msg}", file=sys.stderr)
        status = getattr(args._module, "error_status", None)
        err = StorageError(str(msg))
        err.__cause__ = e
        return int(status(err)) if status is not None else contract.EXIT_CONFIG_ERROR


if __name__ == "__main__":
    sys.exit(main())
