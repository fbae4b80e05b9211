"""``python hung_operator.py ARGS``: the operator (``distgnn_operator.__main__.main``) with
one more clean-up handler, one that never returns, standing in for any shutdown step that
hangs; used to show that ``--exit-timeout`` still ends the process."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import kopf

from distgnn_operator import __main__ as op

_setup = op.setup


def setup_with_hung_cleanup(args: Any) -> Any:
    registry, settings, octx = _setup(args)

    @kopf.on.cleanup(registry=registry)
    async def never_returns(**_: Any) -> None:
        await asyncio.Event().wait()

    return registry, settings, octx


if __name__ == "__main__":
    op.setup = setup_with_hung_cleanup
    sys.exit(op.main(sys.argv[1:]))
