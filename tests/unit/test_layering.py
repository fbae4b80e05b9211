"""Layering that production relies on: the operator image has no torch.

Each check imports modules in a fresh interpreter and asserts torch was not loaded, so
a stray import (even an indirect one) fails here rather than in a running cluster.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCH_FREE = [
    "distgnn",
    "distgnn.cli",
    "distgnn.contract",
    "distgnn.api",
    "distgnn.api.generate",
    "distgnn.graph.io",
    "distgnn.partition.partitioner",
    "distgnn.partition.loader",
    "distgnn.partition.cli_partition",
    "distgnn.rpc.client",
    "distgnn.server.server",
    "distgnn.server.cli",
    "distgnn.local.runner",
    "distgnn_operator.desired",
    "distgnn_operator.reconcile",
    "distgnn_operator.handlers",
    "distgnn_operator.__main__",
]


def _loaded_after_import(module: str) -> list[str]:
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        "print(','.join(m for m in ('torch', 'kopf') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return [m for m in out.stdout.strip().split(",") if m]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_module_does_not_import_torch(module: str) -> None:
    assert "torch" not in _loaded_after_import(module)


@pytest.mark.parametrize("module", ["distgnn.api", "distgnn.contract", "distgnn.partition.book"])
def test_shared_contract_does_not_import_kopf(module: str) -> None:
    """The runtime image needs no operator dependencies for the shared modules."""
    assert "kopf" not in _loaded_after_import(module)


def test_cli_help_lists_every_subcommand() -> None:
    from distgnn.cli import COMMANDS

    out = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for name in COMMANDS:
        assert name in out


def test_building_the_cli_parser_does_not_import_torch() -> None:
    """``distgnn --help`` and ``distgnn serve`` stay fast and torch-free."""
    code = (
        "import sys; from distgnn.cli import build_parser; build_parser(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False"
