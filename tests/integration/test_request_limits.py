"""Clients stay within the request limit a server announces in HELLO: a DistTensor created
with initial data (or written) larger than one request goes in several requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn.distributed import DistTensor, initialize
from distgnn.errors import ConfigError

LIMIT = 64 << 10  # bytes of one request: a small pod's server


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora-small"), num_parts=2)
    env = {"DISTGNN_SERVER_MAX_REQUEST_BYTES": str(LIMIT)}
    with running_servers(url, num_parts=2, workers=1, env=env) as s:
        yield s
    assert s.returncodes == [0, 0]


def test_initial_data_beyond_one_request_arrives_whole(small: Servers) -> None:
    with initialize(servers=small.addrs, token=small.token) as ctx:
        lim = ctx.request_limits(0)
        assert lim is not None and lim.max_bytes == LIMIT  # announced in HELLO
        n = ctx.manifest.num_nodes
        sizes = []

        def init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            sizes.append(shape[0])
            base = sum(sizes[:-1])  # partitions are created in order, rows are contiguous
            rows = torch.arange(base, base + shape[0], dtype=torch.float32)
            return rows[:, None] + torch.arange(64, dtype=torch.float32) / 64

        t = DistTensor((n, 64), torch.float32, "big-init", init_func=init, ctx=ctx)
        assert min(sizes) * 64 * 4 > 2 * LIMIT  # each partition's slice needs 3+ requests
        got = t[np.arange(n)].numpy()
        want = np.arange(n, dtype=np.float32)[:, None] + np.arange(64, dtype=np.float32) / 64
        np.testing.assert_array_equal(got, want)

        # another handle attaches: the data stays (it is not written again)
        zeros = lambda shape, dtype: torch.zeros(shape, dtype=dtype)  # noqa: E731
        again = DistTensor((n, 64), torch.float32, "big-init", init_func=zeros, ctx=ctx)
        np.testing.assert_array_equal(again[np.arange(n)].numpy(), want)

        # writes and atomic adds of whole partitions are split the same way
        t[np.arange(n)] = torch.ones(n, 64)
        t.scatter_add_(np.arange(n), torch.full((n, 64), 2.0))
        assert (t[np.arange(n)].numpy() == 3.0).all()
        del t, again


def test_a_row_beyond_one_request_is_refused_by_name(small: Servers) -> None:
    with initialize(servers=small.addrs, token=small.token) as ctx:
        n = ctx.manifest.num_nodes
        with pytest.raises(ConfigError, match="DISTGNN_SERVER_MAX_REQUEST_BYTES"):
            DistTensor(
                (n, LIMIT // 4),
                torch.float32,
                "wide",
                init_func=lambda shape, dtype: torch.ones(shape, dtype=dtype),
                ctx=ctx,
            )
