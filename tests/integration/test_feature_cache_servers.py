"""The feature cache against real servers (two workers each): a write acknowledged by a
server, from another trainer process, is seen by the next cached read; cached reads
equal uncached ones and send fewer rows."""

from __future__ import annotations

import os
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
from distgnn.distributed.context import DistContext
from distgnn.distributed.featcache import FeatureCache

WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch
    from distgnn.distributed import DistEmbedding, DistTensor, SparseAdagrad, initialize

    rows = np.array([int(x) for x in sys.argv[1].split(",")])
    with initialize() as ctx:
        n = ctx.manifest.num_nodes
        feat = DistTensor((n, 16), torch.float32, "cached", ctx=ctx, persistent=True)
        feat[rows] = torch.full((len(rows), 16), 5.0)
        feat.scatter_add_(rows[:3], torch.ones(3, 16))
        emb = DistEmbedding(n, 16, "cemb", ctx=ctx)
        opt = SparseAdagrad([emb], lr=1.0)
        emb(torch.from_numpy(rows)).sum().backward()
        opt.step()
    print("ok")
    """
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora2fc"), num_parts=2)
    with running_servers(url, num_parts=2, workers=2) as s:
        yield s
    assert s.returncodes == [0, 0]


def _write_from_another_trainer(srv: Servers, tmp_path: Path, rows: np.ndarray) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    out = subprocess.run(
        [sys.executable, str(script), ",".join(map(str, rows.tolist()))],
        env={**os.environ, **srv.env()},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]


def _uncached(ctx: DistContext, t: DistTensor, ids: np.ndarray) -> torch.Tensor:
    cache, ctx.feature_cache = ctx.feature_cache, None
    try:
        return t[ids]
    finally:
        ctx.feature_cache = cache


def test_another_trainers_writes_are_seen_by_cached_reads(srv: Servers, tmp_path: Path) -> None:
    with initialize(servers=srv.addrs, token=srv.token) as ctx:
        ctx.feature_cache = cache = FeatureCache(16 << 20, warmup=2, min_read=1)
        n = ctx.manifest.num_nodes
        feat = DistTensor((n, 16), torch.float32, "cached", "uniform", ctx=ctx, persistent=True)
        emb = DistTensor((n, 16), torch.float32, "cemb", "zeros", ctx=ctx, persistent=True)
        rng = np.random.default_rng(1)
        hot = np.arange(0, n, 4)  # rows of both partitions
        reads = [rng.permutation(np.r_[hot, rng.choice(n, 200)]) for _ in range(5)]
        for ids in reads:
            assert torch.equal(feat[ids], _uncached(ctx, feat, ids))
            emb[ids]
        assert cache.stats.hits > 0
        # a hit costs no row on the wire: the pool pulls fewer rows than were read
        stats = ctx.backend.stats
        before, hits = stats.rows_pulled, cache.stats.hits
        feat[reads[0]]
        hit = cache.stats.hits - hits
        assert hit >= len(hot)  # every hot row, and random ones read twice before
        assert stats.rows_pulled - before == len(reads[0]) - hit

        rows = hot[[1, 2, 3, 400, 500, 600]]  # cached, on both servers
        _write_from_another_trainer(srv, tmp_path, rows)
        got = feat[reads[0]]
        where = {int(v): i for i, v in enumerate(reads[0])}
        at = np.array([where[int(r)] for r in rows])
        assert (got[at[:3]] == 6.0).all() and (got[at[3:]] == 5.0).all()
        assert torch.equal(got, _uncached(ctx, feat, reads[0]))
        e = emb[reads[0]]  # the sparse optimizer's update is seen too
        assert (e[at] != 0).all()
        assert torch.equal(e, _uncached(ctx, emb, reads[0]))
        assert cache.stats.invalidations >= 2 and cache.stats.refetched > 0
