"""Fixtures of the unit tier: the typed Cora of examples/dgl/prepare_data.py, as arrays and
as a standalone DistGraph (one per test module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.hetero import standalone_graph, typed_cora

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
