"""Several client processes writing and updating the same rows at once lose no update."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn.distributed import DistTensor, initialize

CLIENTS = 3
STEPS = 15

CLIENT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch
    from distgnn.distributed import DistEmbedding, DistTensor, SparseAdagrad, initialize

    k = int(sys.argv[1])
    steps = int(sys.argv[2])
    rows = np.r_[0:40, 1330:1380]  # both partitions
    with initialize() as ctx:
        n = ctx.manifest.num_nodes
        counter = DistTensor((n, 8), torch.int64, "counter", ctx=ctx, persistent=True)
        rowset = DistTensor((n, 64), torch.float32, "rowset", ctx=ctx, persistent=True)
        emb = DistEmbedding(n, 4, "emb", ("constant", {"value": 0.0}), ctx=ctx)
        opt = SparseAdagrad([emb], lr=0.01)
        for _ in range(steps):
            counter.scatter_add_(rows, torch.ones(len(rows), 8, dtype=torch.int64))
            rowset[rows] = torch.full((len(rows), 64), float(k))
            emb(torch.from_numpy(rows)).sum().backward()
            opt.step()
    print("ok", k)
    """
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora2c"), num_parts=2)
    with running_servers(url, num_parts=2, workers=2) as s:
        yield s
    assert s.returncodes == [0, 0]


def test_concurrent_writers_lose_no_update(srv: Servers, tmp_path: Path) -> None:
    with initialize(servers=srv.addrs, token=srv.token) as ctx:
        n = ctx.manifest.num_nodes
        DistTensor((n, 8), torch.int64, "counter", "zeros", ctx=ctx, persistent=True)
        DistTensor((n, 64), torch.float32, "rowset", "zeros", ctx=ctx, persistent=True)
        # persistent, so they outlive the clients (a DistEmbedding and its optimizer state
        # are released when their last holder goes, as DGL's)
        DistTensor((n, 4), torch.float32, "emb", "zeros", ctx=ctx, persistent=True)
        DistTensor((n, 4), torch.float32, "emb_sum", "zeros", ctx=ctx, persistent=True)
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**__import__("os").environ, **srv.env()}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(k + 1), str(STEPS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for k in range(CLIENTS)
    ]
    outs = [p.communicate(timeout=240)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * CLIENTS, outs
    rows = np.r_[0:40, 1330:1380]
    with initialize(servers=srv.addrs, token=srv.token) as ctx:
        n = ctx.manifest.num_nodes
        counter = DistTensor((n, 8), torch.int64, "counter", ctx=ctx, persistent=True)
        got = counter[rows].numpy()
        assert (got == CLIENTS * STEPS).all(), np.unique(got)
        assert (counter[[100, 2000]].numpy() == 0).all()
        # concurrent `set`s of whole rows never tear: each row holds one writer's value
        rs = DistTensor((n, 64), torch.float32, "rowset", ctx=ctx, persistent=True)[rows].numpy()
        assert (rs == rs[:, :1]).all() and set(np.unique(rs)) <= {1.0, 2.0, 3.0}
        # Adagrad state lives on the servers (DGL's name NAME_sum): sum of g^2 over every step
        # of every client (independent processes without torch.distributed: separate updates)
        state = DistTensor((n, 4), torch.float32, "emb_sum", ctx=ctx, persistent=True)
        np.testing.assert_array_equal(state[rows].numpy(), CLIENTS * STEPS)
        emb = DistTensor((n, 4), torch.float32, "emb", ctx=ctx, persistent=True)[rows].numpy()
        # x_t = -lr * sum_{i=1..T} 1/sqrt(i), whatever the interleaving
        want = -0.01 * np.sum(1.0 / np.sqrt(np.arange(1, CLIENTS * STEPS + 1)))
        np.testing.assert_allclose(emb, want, rtol=1e-4)
