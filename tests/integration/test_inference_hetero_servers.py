"""Typed layer-wise inference with real servers (2 partitions) and 2 trainer processes:
the per-type output equals the single-process full-graph forward pass."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import running_servers
from tests.unit.test_inference_hetero import RGCN, N, arrays, reference
from trainers import run_trainers

from distgnn.graph.io import graph_from_arrays
from distgnn.partition.partitioner import partition_graph
from distgnn.train.infer_output import read_index, read_output

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_two_trainers_on_servers_write_every_type_like_a_full_forward(tmp_path: Path) -> None:
    partition_graph(graph_from_arrays(arrays(), "het"), 2, str(tmp_path / "p"), "het",
                    method="random", progress=False)  # fmt: skip
    manifest = str(tmp_path / "p" / "het.json")
    out = str(tmp_path / "out")
    script = [sys.executable, str(ROOT / "tests/integration/hetero_infer_trainer.py"), out]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    with running_servers(manifest, num_parts=2, workers=1) as srv:
        res = run_trainers(
            [], 2, srv.env() | {"PYTHONPATH": path}, tmp_path, per_rank_argv=[script] * 2
        )
    assert res.returncodes == [0, 0], res.explain()
    torch.manual_seed(0)
    ref = reference(RGCN().eval())
    idx = read_index(out)
    assert sorted(idx["node_types"]) == sorted(N)
    assert {s["part"] for s in idx["node_types"]["paper"]["shards"]} == {0, 1}
    for t, count in N.items():
        got = read_output(out, t)
        assert np.array_equal(np.sort(got["orig_id"]), np.arange(count)), t
        order = np.argsort(got["orig_id"])
        np.testing.assert_allclose(got["embedding"][order], ref[t], atol=1e-5, rtol=0, err_msg=t)
