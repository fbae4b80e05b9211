"""Fixtures of the unit tier: the typed Cora of examples/dgl/prepare_data.py, as arrays and
as a standalone DistGraph (one per test module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from tests.support.hetero import standalone_graph, typed_cora

from distgnn import native
from distgnn.train.graph import TrainGraph


@pytest.fixture(scope="module")
def typed_arrays(cora_path: Path) -> dict[str, np.ndarray]:
    return typed_cora(cora_path)


@pytest.fixture(scope="module")
def typed_graph(
    typed_arrays: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainGraph]:
    with standalone_graph(typed_arrays, tmp_path_factory.mktemp("cora-hetero")) as tg:
        yield tg


# the C kernels (distgnn._native) and their NumPy path: test_native, test_rpc_gather
@pytest.fixture()
def k() -> ModuleType:
    """The built extension (skips where it was not built: no compiler)."""
    try:
        from distgnn import _native
    except ImportError:
        pytest.skip("distgnn._native is not built (python setup.py build_ext --inplace)")
    mod: ModuleType = _native
    return mod


@pytest.fixture(params=["native", "numpy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test on the C kernels and on the NumPy path (``DISTGNN_NATIVE=0``)."""
    monkeypatch.setenv("DISTGNN_NATIVE", "1" if request.param == "native" else "0")
    native.kernels.cache_clear()
    if request.param == "native" and not native.available():
        pytest.skip("distgnn._native is not built")
    yield request.param
    native.kernels.cache_clear()
