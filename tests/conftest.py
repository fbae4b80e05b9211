"""Fixtures shared by every tier."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORA = REPO.parent / "shared" / "datasets" / "cora.npz"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def cora_path() -> Path:
    """The real Cora graph (``../shared/datasets/cora.npz`` beside the checkout)."""
    if not CORA.exists():
        pytest.fail(f"{CORA} is missing: the shared datasets must sit beside the checkout")
    return CORA
