"""Co-located trainers (``trainers.colocate``): the local partition's rows come from the
server's shared memory, the others over TCP, with the same values either way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn.distributed import DistGraph, DistTensor, initialize
from distgnn.distributed.context import DistContext
from distgnn.errors import ConfigError
from distgnn.train.graph import TrainGraph


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora2colo"), num_parts=2)
    with running_servers(url, num_parts=2, workers=2) as s:
        yield s
    assert s.returncodes == [0, 0]


def _colocated(srv: Servers, part: int, store: str) -> DistContext:
    env = {"DISTGNN_LOCAL_PARTITION": str(part), "DISTGNN_LOCAL_STORE": store}
    return initialize(servers=srv.addrs, token=srv.token, env=env)


def _pulls(ctx: DistContext) -> int:
    return int(ctx.backend.stats.pull_requests)  # type: ignore[attr-defined]


def test_local_rows_come_from_shared_memory_not_the_network(srv: Servers) -> None:
    # the folder the server creates its store in: the reader finds the store by the
    # name the server gives in HELLO (as in a pod sharing a memory volume)
    parent = os.path.dirname(srv.ready[0]["shm_dir"])
    with initialize(servers=srv.addrs, token=srv.token) as tcp, _colocated(srv, 0, parent) as co:
        assert co.local_reader is not None and tcp.local_reader is None
        assert co.local_reader.root == srv.ready[0]["shm_dir"]
        # what the trainer's metrics report as local rows (distgnn_trainer_local_rows_total)
        assert TrainGraph(DistGraph(ctx=co), cast(Any, None)).local_stats() is (
            co.local_reader.stats
        )
        assert TrainGraph(DistGraph(ctx=tcp), cast(Any, None)).local_stats() is None
        f_tcp = DistGraph("cora", ctx=tcp).ndata["feat"]
        f_co = DistGraph("cora", ctx=co).ndata["feat"]
        off = f_co.policy.offsets
        local = np.random.default_rng(0).permutation(np.arange(off[0], off[1]))[:500]

        before, rows0 = _pulls(co), co.local_reader.stats.rows
        got = f_co[local]
        assert _pulls(co) == before  # no PULL went to any server
        assert co.local_reader.stats.rows == rows0 + len(local)
        np.testing.assert_array_equal(got.numpy(), f_tcp[local].numpy())

        # mixed: one PULL for the remote partition only, same values as over TCP
        mixed = np.random.default_rng(1).integers(0, len(f_co), 3000)
        assert ((mixed >= off[0]) & (mixed < off[1])).any() and (mixed >= off[1]).any()
        before = _pulls(co)
        np.testing.assert_array_equal(f_co[mixed].numpy(), f_tcp[mixed].numpy())
        assert _pulls(co) == before + 1
        # sampled-input order (long ascending runs per partition): received in place
        runs = np.r_[off[1] : off[1] + 300, off[0] : off[0] + 300, 7, off[1] + 5]
        np.testing.assert_array_equal(f_co[runs].numpy(), f_tcp[runs].numpy())


def test_writes_through_the_server_are_seen_by_the_local_map(srv: Servers) -> None:
    store = srv.ready[1]["shm_dir"]  # the store folder itself (local mode)
    with initialize(servers=srv.addrs, token=srv.token) as tcp, _colocated(srv, 1, store) as co:
        assert co.local_reader is not None
        n = co.manifest.num_nodes
        # created at run time: not in the partition's files, found in the folder anyway
        t_co = DistTensor((n, 16), torch.float32, "colo-w", "zeros", ctx=co)
        t_tcp = DistTensor((n, 16), torch.float32, "colo-w", ctx=tcp)
        off = t_co.policy.offsets
        rows = np.arange(off[1], off[1] + 64)
        t_tcp[rows] = torch.full((64, 16), 3.5)
        t_tcp.scatter_add_(rows[:8], torch.ones(8, 16))
        before = _pulls(co)
        got = t_co[rows].numpy()
        assert _pulls(co) == before
        assert (got[:8] == 4.5).all() and (got[8:] == 3.5).all()
        # a write by the co-located trainer goes through the server, and reads back locally
        t_co[rows[:4]] = torch.zeros(4, 16)
        assert (t_tcp[rows[:4]].numpy() == 0).all() and (t_co[rows[:4]].numpy() == 0).all()
        del t_tcp, t_co


def test_a_store_of_another_partition_is_refused_and_reads_go_over_tcp(
    srv: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    with _colocated(srv, 1, srv.ready[0]["shm_dir"]) as co:
        assert co.local_reader is None
        assert "co-located store not usable" in caplog.text
        f = DistGraph("cora", ctx=co).ndata["feat"]
        off = f.policy.offsets
        before = _pulls(co)
        f[np.arange(off[1], off[1] + 10)]
        assert _pulls(co) == before + 1


def test_a_mapped_file_that_disagrees_with_its_header_is_not_read(tmp_path: Path) -> None:
    from distgnn.distributed.localread import map_readonly

    path = tmp_path / "t.npy"
    np.save(path, np.ones((10, 4), np.float32))
    m = map_readonly(str(path))
    assert not m.array.flags.writeable and m.array.shape == (10, 4)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 16)
    with pytest.raises(ValueError, match="data bytes"):
        map_readonly(str(path))


def test_a_trainers_feature_read_makes_no_request_but_its_pulls(srv: Servers) -> None:
    """``TrainGraph.read`` (two per training step) asks the servers for rows only: no
    tensor-list round trip per read (it used to ask server 0 for its tensor list each
    time); co-located, a read of local rows makes no request at all."""
    store = srv.ready[0]["shm_dir"]
    with initialize(servers=srv.addrs, token=srv.token) as tcp, _colocated(srv, 0, store) as co:
        for ctx, local in ((tcp, False), (co, True)):
            tg = TrainGraph(DistGraph(ctx=ctx), cast(Any, None))
            off = tg.g.ndata["feat"].policy.offsets
            ids = torch.arange(off[0], off[0] + 200)
            tg.read("feat", ids)  # the first read may list the tensors
            stats = ctx.backend.stats  # type: ignore[attr-defined]
            requests, pulls = stats.requests, stats.pull_requests
            for _ in range(3):
                assert tg.read("feat", ids).shape[0] == 200
                assert tg.read("label", ids).shape == (200,)
            assert stats.requests - requests == stats.pull_requests - pulls
            assert stats.requests - requests == (0 if local else 6)
            with pytest.raises(ConfigError, match="'nope' not found"):
                tg.read("nope", ids)


def test_reads_return_exact_rows_in_the_callers_order_both_topologies(srv: Servers) -> None:
    """Mixed local/remote, duplicate, empty, one-partition and random ID sets give the
    stored rows in the caller's order, over TCP and co-located alike (the reference is
    the servers' store files, read directly)."""
    with (
        initialize(servers=srv.addrs, token=srv.token) as tcp,
        _colocated(srv, 0, srv.ready[0]["shm_dir"]) as co,
    ):
        f_tcp = DistGraph("cora", ctx=tcp).ndata["feat"]
        f_co = DistGraph("cora", ctx=co).ndata["feat"]
        name = f_tcp.key.encode().hex() + ".npy"
        table = np.concatenate([np.load(os.path.join(r["shm_dir"], name)) for r in srv.ready])
        off = f_tcp.policy.offsets
        rng = np.random.default_rng(7)
        seeds = rng.integers(0, off[-1], 150)  # both partitions, random
        hop1 = np.unique(rng.integers(0, off[-1], 900))  # ascending: one long run each
        hop2 = np.unique(rng.integers(0, off[-1], 1200))
        sampled = np.concatenate([seeds, hop1, hop2])
        cases = {
            "sampled": sampled,
            "sampled, duplicates": np.concatenate([sampled, sampled[::-3], hop1[:100]]),
            "empty": np.empty(0, np.int64),
            "one": np.array([off[1]]),
            "local only": np.arange(off[0], off[1])[::-1],
            "remote only": np.repeat(np.arange(off[1], off[1] + 80), 2),
            "random, duplicates": rng.integers(0, off[-1], 4000),
            "runs of 64 and short": np.concatenate(
                [np.arange(off[1], off[1] + 64), [0, off[1] + 70, 3], np.arange(0, 64)]
            ),
        }
        for what, ids in cases.items():
            for f in (f_tcp, f_co):
                got = f[torch.from_numpy(np.ascontiguousarray(ids))]
                assert got.shape == (len(ids), table.shape[1]), what
                np.testing.assert_array_equal(got.numpy(), table[ids], err_msg=what)
        assert co.local_reader is not None and co.local_reader.stats.rows > 0
