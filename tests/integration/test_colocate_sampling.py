"""Co-located trainers sample their own partition's seeds in-process from the server's
shared-memory graph (``distgnn.distributed.localsample``): the same draw as the server's,
no SAMPLE_NEIGHBORS request to the local server, TCP whenever the store is unusable."""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from servers import Servers, partition_cora, running_servers

from distgnn import native
from distgnn.distributed import DistGraph, DistTensor, initialize, sample_neighbors
from distgnn.distributed.context import DistContext
from distgnn.errors import ConfigError, ServerError
from distgnn.sampling.batches import NodeBatcher
from distgnn.sampling.loader import BatchLoader
from distgnn.sampling.neighbor import NeighborSampler
from distgnn.sampling.source import DistSource
from distgnn.train.graph import TrainGraph


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> Iterator[Servers]:
    url = partition_cora(cora_path, tmp_path_factory.mktemp("cora2colos"), num_parts=2)
    with running_servers(url, num_parts=2, extra_args=["--metrics-port", "0"]) as s:
        yield s
    assert s.returncodes == [0, 0]


def _env(srv: Servers, part: int = 0, store: str | None = None, **extra: str) -> dict[str, str]:
    return {
        "DISTGNN_LOCAL_PARTITION": str(part),
        "DISTGNN_LOCAL_STORE": store if store is not None else srv.ready[part]["shm_dir"],
        **extra,
    }


def _co(srv: Servers, **kw: Any) -> DistContext:
    return initialize(servers=srv.addrs, token=srv.token, env=_env(srv, **kw))


def samples_served(srv: Servers, part: int) -> int:
    """SAMPLE_NEIGHBORS requests server ``part`` answered (its Prometheus counter)."""
    port = srv.ready[part]["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(
        r'^distgnn_server_requests_total\{outcome="ok",type="sample_neighbors"\} (\S+)$',
        text,
        re.M,
    )
    return int(float(m.group(1))) if m else 0


def served_becomes(srv: Servers, part: int, want: int) -> int:
    """The counter once it reached ``want`` (a worker counts a request just after
    answering it), or what it is after 30 s."""
    deadline = time.monotonic() + 30
    while (n := samples_served(srv, part)) < want and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


def _cols(s: Any) -> list[np.ndarray]:
    return [s.src.numpy(), s.dst.numpy(), s.eid.numpy(), s.etype.numpy()]


def test_local_seeds_are_sampled_in_process_with_the_servers_draw(srv: Servers) -> None:
    with initialize(servers=srv.addrs, token=srv.token) as tcp, _co(srv) as co:
        assert tcp.local_sampler is None
        local = co.local_sampler
        assert local is not None and local.part == 0
        gt, gc = DistGraph(ctx=tcp), DistGraph(ctx=co)
        # what the trainer's metrics report (distgnn_trainer_local_sample_requests_total)
        assert TrainGraph(gc, cast(Any, None)).local_sample_stats() is local.stats
        assert TrainGraph(gt, cast(Any, None)).local_sample_stats() is None
        off = co.book.node_offsets
        w = DistTensor((gt.num_edges(),), torch.float32, "w", "zeros", "edge", ctx=tcp)
        heavy = np.arange(0, gt.num_edges(), 3)
        w[heavy] = torch.ones(len(heavy))  # created at run time: a file of the same store
        rng = np.random.default_rng(0)
        own = rng.permutation(np.arange(off[0], off[1]))[:400]
        mixed = rng.integers(0, off[-1], 600)
        cases: list[dict[str, Any]] = [
            {"fanout": 5},
            {"fanout": 1},
            {"fanout": 3, "replace": True},
            {"fanout": -1},
            {"fanout": {"_N:_E:_N": 4}},
            {"fanout": 2, "prob": "w"},
            {"fanout": 2, "prob": "w", "replace": True},
            {"fanout": -1, "exclude_edges": np.arange(0, gt.num_edges(), 2)},  # link prediction
        ]
        for i, kw in enumerate(cases):
            for seeds in (own, mixed):
                before, served = local.stats.requests, samples_served(srv, 0)
                got = sample_neighbors(gc, seeds, seed=100 + i, **kw)
                assert local.stats.requests == before + 1, kw  # answered here ...
                want = sample_neighbors(gt, seeds, seed=100 + i, **kw)
                # ... and not by the local server: it answered the TCP trainer only
                assert served_becomes(srv, 0, served + 1) == served + 1, kw
                for a, b in zip(_cols(got), _cols(want), strict=True):
                    np.testing.assert_array_equal(a, b)
                # real edges of the graph, into the seeds, in global IDs
                src, dst, eid, _ = _cols(got)
                fs, fd = gt.find_edges(torch.from_numpy(eid))
                np.testing.assert_array_equal(fs.numpy(), src)
                np.testing.assert_array_equal(fd.numpy(), dst)
                assert np.isin(dst, seeds).all()
                if "prob" in kw:
                    assert len(eid) and (eid % 3 == 0).all()
                if "exclude_edges" in kw:
                    assert len(eid) and (eid % 2 == 1).all()
        # without a seed the draw is random, but still real in-edges of the seeds
        s = sample_neighbors(gc, own, 4)
        src, dst, eid, _ = _cols(s)
        assert np.bincount(np.searchsorted(np.sort(own), dst)).max() <= 4
        np.testing.assert_array_equal(gt.find_edges(torch.from_numpy(eid))[1].numpy(), dst)
        # a request the server refuses is sent to it: its error is the one raised
        fallbacks = local.stats.fallbacks
        with pytest.raises(ServerError, match="prob"):
            sample_neighbors(gc, own[:5], 2, prob="missing")
        assert local.stats.fallbacks == fallbacks + 1
        del w


@pytest.mark.parametrize("part", [0, 1])
def test_the_in_process_answer_is_drawn_into_the_hops_columns(
    srv: Servers, part: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The co-located partition's answer is written by the draw into its place in the
    hop's receive columns (the other server's answer received beside it): the hop's
    ``src`` and ``eid`` are those columns, not a concatenation, the same edges as over
    TCP, whichever partition is local (the lower one's answer is placed before it)."""
    from distgnn.distributed.sampling import sample_hop_edges

    with initialize(servers=srv.addrs, token=srv.token) as tcp, _co(srv, part=part) as co:
        local = co.local_sampler
        assert local is not None and local.part == part
        gt, gc = DistGraph(ctx=tcp), DistGraph(ctx=co)
        answers: list[Any] = []
        real = local.answer

        def recorded(call: Any, out: Any = None) -> Any:
            answers.append(real(call, out))
            return answers[-1]

        monkeypatch.setattr(local, "answer", recorded)
        rng = np.random.default_rng(part)
        off = co.book.node_offsets
        seeds = rng.permutation(np.r_[
            rng.choice(np.arange(off[0], off[1]), 300, replace=False),
            rng.choice(np.arange(off[1], off[2]), 200, replace=False),
        ])  # fmt: skip
        for fanout in (1, 4, 9):
            got = sample_hop_edges(gc, seeds, fanout, seed=fanout)
            want = sample_hop_edges(gt, seeds, fanout, seed=fanout)
            for a, b in zip(got[:2] + got[3:], want[:2] + want[3:], strict=True):
                np.testing.assert_array_equal(a, b)
            f = answers[-1]
            assert f is not None and len(f.bufs[0]) > 0
            # the native draw writes into the hop's columns (not a build before the option)
            k = native.kernels()
            native_on = k is not None and hasattr(k, "SAMPLE_INTO")
            for i in (0, 1):  # src, eid: the answer's arrays are views of the hop's
                assert np.shares_memory(got[i], f.bufs[i]) == native_on
        # a seed set of the local partition only: one request, its answer as it is
        got = sample_hop_edges(gc, seeds[np.searchsorted(off, seeds, "right") - 1 == part], 3)
        assert got.src is answers[-1].bufs[0]


def test_a_training_loader_and_its_sampler_process_send_no_sampling_to_the_local_server(
    srv: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in {**srv.env(), **_env(srv, part=1)}.items():
        monkeypatch.setenv(k, v)  # what a sampler process of a co-located trainer inherits
    monkeypatch.delenv("DISTGNN_LOCAL_SAMPLING", raising=False)
    with initialize(servers=srv.addrs, token=srv.token, env={}) as tcp, _co(srv, part=1) as co:
        assert tcp.local_sampler is None
        off = co.book.node_offsets
        seeds = np.arange(off[1], off[2])[::3]
        batcher = NodeBatcher(seeds, NeighborSampler([5, 10]), 100, seed=7)
        ref = [
            [b.eid for b in bl]
            for _, _, bl in BatchLoader(DistSource(DistGraph(ctx=tcp), None), batcher, 0)
        ]
        served = samples_served(srv, 1), samples_served(srv, 0)
        spec = {"kind": "dist"}
        inproc = [
            [b.eid for b in bl]
            for _, _, bl in BatchLoader(DistSource(DistGraph(ctx=co), spec), batcher, 0)
        ]
        with BatchLoader(DistSource(DistGraph(ctx=co), spec), batcher, 1, timeout=120) as ld:
            procs = [[b.eid for b in bl] for _, _, bl in ld]
        # both hops' local seeds sampled in the trainer and in its sampler process (the
        # one TCP request below is all server 1 answered); the second hop's remote seeds
        # still went to the other server
        sample_neighbors(DistGraph(ctx=tcp), seeds[:10], 2)
        assert served_becomes(srv, 1, served[0] + 1) == served[0] + 1
        assert served_becomes(srv, 0, served[1] + 1) > served[1]
        assert co.local_sampler is not None and co.local_sampler.stats.requests >= 2 * len(ref)
        for got in (inproc, procs):
            assert len(got) == len(ref)
            for a, b in zip(got, ref, strict=True):
                assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_unusable_store_or_switch_off_samples_over_tcp(
    srv: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own = np.arange(0, 50)
    # switched off
    with _co(srv, DISTGNN_LOCAL_SAMPLING="0") as co:
        assert co.local_reader is not None and co.local_sampler is None
        served = samples_served(srv, 0)
        sample_neighbors(DistGraph(ctx=co), own, 3)
        assert served_becomes(srv, 0, served + 1) == served + 1
    with pytest.raises(ConfigError, match="DISTGNN_LOCAL_SAMPLING"):
        _co(srv, DISTGNN_LOCAL_SAMPLING="maybe")
    # a folder with the server's store name and info.json but no graph files
    real = srv.ready[0]["shm_dir"]
    fake = tmp_path / os.path.basename(real)
    fake.mkdir()
    shutil.copy(os.path.join(real, "info.json"), fake / "info.json")
    with _co(srv, store=str(fake)) as co:
        assert co.local_reader is not None and co.local_sampler is None
        assert "co-located graph not usable" in caplog.text
        served = samples_served(srv, 0)
        s = sample_neighbors(DistGraph(ctx=co), own, 3)
        assert served_becomes(srv, 0, served + 1) == served + 1 and len(s.eid.numpy()) > 0
    # the server names another store (it restarted): local sampling turns off for good
    with _co(srv) as co:
        local = co.local_sampler
        assert local is not None
        g = DistGraph(ctx=co)
        sample_neighbors(g, own, 3)
        assert local.stats.requests == 1
        co.backend.conns[0].server_info["store"] = "distgnn-p0-restarted"  # type: ignore[attr-defined]
        served = samples_served(srv, 0)
        sample_neighbors(g, own, 3)
        assert served_becomes(srv, 0, served + 1) == served + 1
        assert not local.enabled and local.stats.requests == 1 and local.stats.fallbacks == 1
        assert "local sampling off" in caplog.text


def test_typed_graph_local_sampling_draws_what_the_server_draws(tmp_path: Path) -> None:
    """Edge-type fanouts on a graph with several node and edge types: the local answer
    carries the edge types and is the server's draw."""
    from tests.unit.test_inference_hetero import arrays

    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph

    partition_graph(graph_from_arrays(arrays(), "het"), 2, str(tmp_path / "p"), "het",
                    method="random", progress=False)  # fmt: skip
    with (
        running_servers(str(tmp_path / "p" / "het.json"), num_parts=2) as s,
        initialize(servers=s.addrs, token=s.token, env={}) as tcp,
        _co(s, part=1) as co,
    ):
        local = co.local_sampler
        assert local is not None
        gt, gc = DistGraph(ctx=tcp), DistGraph(ctx=co)
        papers = {"paper": np.arange(40)}
        for i, kw in enumerate(
            [
                {"fanout": {("paper", "cite", "paper"): 2, "author:writes:paper": 1}},
                {"fanout": 2},  # every edge type
                {"fanout": 1, "replace": True},
                {"fanout": -1},
            ]
        ):
            before = local.stats.requests
            got = _cols(sample_neighbors(gc, papers, seed=i, **kw))
            want = _cols(sample_neighbors(gt, papers, seed=i, **kw))
            assert local.stats.requests == before + 1
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
            # every paper has in-edges of both types that end at papers (written by
            # authors, cited by papers): both types in the answer
            assert len(np.unique(got[3])) == 2, kw
