"""Clients stay within the limits a server announces in HELLO: a DistTensor created with
initial data (or written) larger than one request goes in several requests, and a read
larger than one request or answer in several PULLs, reassembled in order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn.distributed import DistEmbedding, DistTensor, SparseAdam, initialize, rowshards
from distgnn.distributed.context import DistContext
from distgnn.errors import ConfigError

LIMIT = 64 << 10  # bytes of one request, and of one answer: a small pod's server
MAX_IDS = 1000  # IDs of one request


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora-small"), num_parts=2)
    env = {
        "DISTGNN_SERVER_MAX_REQUEST_BYTES": str(LIMIT),
        "DISTGNN_SERVER_MAX_REPLY_BYTES": str(LIMIT),
        "DISTGNN_SERVER_MAX_IDS": str(MAX_IDS),
    }
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


def _pulls(ctx: DistContext) -> int:
    return int(ctx.backend.stats.pull_requests)  # type: ignore[attr-defined]


def test_reads_beyond_one_request_or_answer_arrive_whole_in_order(small: Servers) -> None:
    with initialize(servers=small.addrs, token=small.token) as ctx:
        lim = ctx.request_limits(0)
        assert lim is not None and (lim.max_reply_bytes, lim.max_ids) == (LIMIT, MAX_IDS)
        n = ctx.manifest.num_nodes
        want = np.arange(n, dtype=np.float32)[:, None] + np.arange(64, dtype=np.float32) / 64
        t = DistTensor((n, 64), torch.float32, "wide-read", ctx=ctx)
        for i in range(0, n, 200):  # writes of 200 rows fit one request
            t[np.arange(i, min(i + 200, n))] = want[i : i + 200]
        off = t.policy.offsets
        per_answer = LIMIT // (64 * 4)  # 256 rows of 256 bytes

        # small reads stay one PULL per server (the training path's feature reads)
        before = _pulls(ctx)
        np.testing.assert_array_equal(t[np.arange(100)].numpy(), want[:100])
        mixed = np.r_[off[1] : off[1] + 100, 0:50]
        np.testing.assert_array_equal(t[mixed].numpy(), want[mixed])
        assert _pulls(ctx) == before + 1 + 2

        # the whole tensor (consecutive rows per server: received in place)
        before = _pulls(ctx)
        np.testing.assert_array_equal(t[0:n].numpy(), want)
        sizes = np.diff(off)
        assert _pulls(ctx) - before == sum(-(-int(s) // per_answer) for s in sizes)
        # random order over both servers (received aside, scattered), duplicates included
        ids = np.random.default_rng(0).integers(0, n, 3 * n)
        np.testing.assert_array_equal(t[ids].numpy(), want[ids])
        # one server's rows only
        one = np.arange(off[1], off[2])[::-1].copy()
        np.testing.assert_array_equal(t[one].numpy(), want[one])

        # narrow rows: the ID limit splits them (2 partitions of > MAX_IDS rows)
        assert min(sizes) > MAX_IDS
        ids_t = DistTensor((n,), torch.int64, "narrow-read", ctx=ctx)
        for i in range(0, n, MAX_IDS):
            ids_t[np.arange(i, min(i + MAX_IDS, n))] = np.arange(i, min(i + MAX_IDS, n))
        np.testing.assert_array_equal(ids_t[0:n].numpy(), np.arange(n))
        del t, ids_t


def test_sparse_optimizer_steps_and_saves_a_large_embedding(small: Servers, tmp_path: Path) -> None:
    with initialize(servers=small.addrs, token=small.token) as ctx:
        n = ctx.manifest.num_nodes
        emb = DistEmbedding(n, 64, "big-emb", ctx=ctx)
        opt = SparseAdam([emb], lr=0.1)
        # a step touching more rows of each server than one request carries
        rows = torch.arange(0, n, 2)
        assert len(rows) // 2 * (64 * 4 + 8) > LIMIT
        emb(rows).sum().backward()
        opt.step()
        opt.save(str(tmp_path / "opt"))  # each state is n x 64 floats: many answers
        saved = rowshards.read(str(tmp_path / "opt_0"))  # one trainer: every row is its own
        assert saved is not None and saved.kind == "SparseAdam"
        table = saved.tables["big-emb"]
        folder = tmp_path / "opt_0"
        assert (np.load(folder / table["ids"]["path"], allow_pickle=False) == np.arange(n)).all()
        states = {
            k.rsplit("_", 1)[-1]: np.load(folder / a["path"], allow_pickle=False)
            for k, a in table["arrays"].items()
        }
        assert {s.shape[0] for s in states.values()} == {n}
        assert states["mem"].shape == (n, 64)  # Adam's first moment
        touched = np.zeros(n, dtype=bool)
        touched[rows.numpy()] = True
        mem = states["mem"]
        assert (mem[touched] != 0).all() and (mem[~touched] == 0).all()
        del opt, emb
