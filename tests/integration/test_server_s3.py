"""Servers loading their partitions from a real S3 server (SeaweedFS) with credentials."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from servers import running_servers

from distgnn.distributed import DistGraph, initialize, sample_neighbors
from distgnn.partition.loader import load_partition
from distgnn.partition.partitioner import partition_graph

pytestmark = pytest.mark.s3


def test_servers_read_partitions_from_s3(s3, cora_path: Path) -> None:  # type: ignore[no-untyped-def]
    opts = s3.storage_options()
    out = s3.url("servers-cora")
    partition_graph(str(cora_path), 2, out, "cora", storage_options=opts, progress=False)
    url = out + "/cora.json"
    orig = np.concatenate([load_partition(url, p, storage_options=opts).orig_nid for p in range(2)])
    data = np.load(cora_path)
    with (
        running_servers(url, num_parts=2, workers=1, env=s3.env()) as srv,
        initialize(servers=srv.addrs, token=srv.token) as ctx,
    ):
        g = DistGraph(ctx=ctx)
        ids = np.arange(g.num_nodes())
        np.testing.assert_array_equal(g.ndata["feat"][ids].numpy(), data["feat"][orig])
        assert len(sample_neighbors(g, ids[:100], 3).eid) > 0
    assert srv.returncodes == [0, 0]


def test_server_with_wrong_credentials_fails_clearly(s3, cora_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = s3.url("servers-cora", "cora.json")
    env = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret"}
    # refused credentials may be a policy being applied: exit 1, the kubelet retries
    # (no credentials at all, a missing bucket: exit 2, test_exit_statuses.py)
    with (
        pytest.raises(RuntimeError, match="exited with 1"),
        running_servers(url, num_parts=1, env=env, timeout=60),
    ):
        pass
