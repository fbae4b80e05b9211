"""SAMPLE_NEIGHBORS answers as runs: no per-edge destination (nor edge type on a graph
without types) on the wire, the same draw and blocks as the per-edge layout, malformed
answers refused with a clear error, and both layouts understood by either side."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.cora import handlers_on, partition_cora

from distgnn.distributed import DistGraph, sample_neighbors
from distgnn.distributed.sampling import _Columns, decode_sample_answer, sample_hop_edges
from distgnn.errors import ProtocolError
from distgnn.rpc.protocol import Frame, MsgType
from distgnn.sampling import NeighborSampler
from distgnn.sampling.source import source_for
from distgnn.server import sampling
from distgnn.server.handlers import Handlers

SAMPLE = MsgType.SAMPLE_NEIGHBORS


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(tmp_path_factory.mktemp("cora3w"), cora_path, 3)


@pytest.fixture()
def g(cora_parts: str) -> Iterator[DistGraph]:
    with DistGraph.standalone(cora_parts) as graph:
        yield graph


@pytest.fixture()
def h(cora_parts: str) -> Iterator[Handlers]:
    with handlers_on(cora_parts, 1) as h:
        yield h


def test_uniform_draw_is_the_one_of_the_per_edge_code() -> None:
    """Positions and seeds as the code before runs drew them (digest taken with it),
    for every bucket (degree <= fanout, <= 2 x fanout, above), all edges and replacement."""
    deg = np.random.default_rng(7).integers(0, 60, 3000)
    indptr = np.r_[0, np.cumsum(deg)]
    seeds = np.random.default_rng(8).permutation(3000)[:1200]
    digest = hashlib.sha256()
    for fanout in (-1, 0, 5, 15):
        for replace in (False, True):
            rng = np.random.default_rng(fanout + 10)
            pos, seg = sampling.sample_uniform(indptr, seeds, fanout, replace, rng)
            rng = np.random.default_rng(fanout + 10)
            p2, run_seed, run_len = sampling.sample_uniform_runs(
                indptr, seeds, fanout, replace, rng
            )
            np.testing.assert_array_equal(p2, pos)
            np.testing.assert_array_equal(np.repeat(run_seed, run_len), seg)
            assert len(run_seed) <= len(seeds)
            digest.update(pos.astype(np.int64).tobytes())
            digest.update(seg.astype(np.int64).tobytes())
    assert digest.hexdigest() == (
        "ab4a320ec43952da233620930704dcc2233ef7af8187408d1752341dbb496b01"
    )


def test_answer_carries_runs_not_per_edge_destinations(h: Handlers) -> None:
    seeds = np.arange(0, 600, 2)
    meta, bufs = h.handle(SAMPLE, {"fanout": 5, "seed": 3, "runs": True}, [seeds])
    assert meta == {"runs": True}
    src, eid, run_seed, run_len = bufs  # no dst, no edge type (homogeneous graph)
    assert len(src) == len(eid) == int(run_len.sum()) > len(seeds)
    assert len(run_seed) <= len(seeds) and run_seed.dtype == run_len.dtype == np.int32
    # the per-edge layout (clients that do not ask for runs): same edges, same order
    old_meta, (o_src, o_dst, o_eid, o_et) = h.handle(SAMPLE, {"fanout": 5, "seed": 3}, [seeds])
    assert old_meta == {}
    np.testing.assert_array_equal(o_src, src)
    np.testing.assert_array_equal(o_eid, eid)
    np.testing.assert_array_equal(o_dst, h.g.node_offset + seeds[np.repeat(run_seed, run_len)])
    assert not o_et.any()
    # computed edge IDs (contiguous partition) equal the partition's edge-ID array
    assert h.g.eid_contiguous
    pos = h.g.eidpos[eid - h.g.edge_offset]
    np.testing.assert_array_equal(h.g.eid[pos], eid)
    with pytest.raises(Exception, match="'runs' must be true or false"):
        h.handle(SAMPLE, {"fanout": 5, "runs": "yes"}, [seeds])


def _strip_runs(g: DistGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every server answer as one that does not know ``runs`` (per-edge layout)."""
    real = g.ctx.call_many

    def old_servers(calls: Any) -> Any:
        for c in calls.values():
            c.meta.pop("runs", None)
        return real(calls)

    monkeypatch.setattr(g.ctx, "call_many", old_servers)


def _blocks(g: DistGraph) -> list[list[np.ndarray]]:
    src = source_for(g)
    out = []
    for fan in ([4, 3], [15, 10, 5], [-1, 2]):
        for i in range(3):
            seeds = np.random.default_rng(i).choice(g.num_nodes(), 300, replace=False)
            rng = np.random.default_rng(100 + i)
            _, _, blocks = NeighborSampler(fan).sample_blocks(src.one_hop(rng), seeds)
            for b in blocks:
                out.append([b.src_nid, b.dst_nid, b.edge_src, b.edge_dst, b.eid, b.etype])
    return out


def test_blocks_and_subgraphs_equal_those_of_the_per_edge_layout(
    g: DistGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = np.random.default_rng(5).choice(g.num_nodes(), 500, replace=False)
    new_blocks = _blocks(g)
    new_sg = sample_neighbors(g, seeds, 4, seed=11)
    assert new_sg.etype.dtype.is_floating_point is False
    _strip_runs(g, monkeypatch)
    old_blocks = _blocks(g)
    old_sg = sample_neighbors(g, seeds, 4, seed=11)
    for new, old in zip(new_blocks, old_blocks, strict=True):
        for a, b in zip(new, old, strict=True):
            np.testing.assert_array_equal(a, b)
    for name in ("src", "dst", "eid", "etype"):
        np.testing.assert_array_equal(getattr(new_sg, name).numpy(), getattr(old_sg, name).numpy())
    assert new_sg.etype.dtype == old_sg.etype.dtype


def test_destinations_index_the_callers_seeds_across_servers(g: DistGraph) -> None:
    seeds = np.random.default_rng(2).permutation(g.num_nodes())[:400]
    e = sample_hop_edges(g, seeds, 3, seed=4)
    assert e.etype is None and e.dst_index.dtype == np.int64
    src, dst = (x.numpy() for x in g.find_edges(e.eid))
    np.testing.assert_array_equal(seeds[e.dst_index], dst)
    np.testing.assert_array_equal(e.src, src)


def _frame(meta: dict[str, Any], *bufs: np.ndarray) -> Frame:
    return Frame(SAMPLE, 1, meta, list(bufs), 1)


I64 = np.arange(6, dtype=np.int64)
RUNS = {"runs": True}


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (_frame(RUNS, I64, I64, np.array([0, 1], np.int32)), "3 buffers"),
        (_frame({}, I64, I64, I64), "3 buffers"),
        (_frame(RUNS, I64, I64, np.array([0, 1]), np.array([3, 2])), "do not add up"),
        (_frame(RUNS, I64, I64, np.array([0, 1]), np.array([7, -1])), "do not add up"),
        (_frame(RUNS, I64, I64, np.array([0, 9]), np.array([3, 3])), "outside the 4 seeds"),
        (_frame(RUNS, I64, I64, np.array([-1, 0]), np.array([3, 3])), "outside the 4 seeds"),
        (_frame(RUNS, I64, I64, np.array([0, 1, 2]), np.array([3, 3])), "3 run seeds for 2"),
        (_frame(RUNS, I64, I64, np.empty(0, np.int32), np.empty(0, np.int32)), "edges without"),
        (_frame(RUNS, I64, I64[:5], np.array([0, 1]), np.array([3, 3])), "different lengths"),
        (
            _frame(RUNS, I64, I64, np.array([0]), np.array([6]), np.zeros(5, np.int32)),
            "different lengths",
        ),
        (_frame(RUNS, I64.astype(float), I64, np.array([0]), np.array([6])), "src must be a 1-D"),
        (_frame(RUNS, I64, I64.reshape(2, 3), np.array([0]), np.array([6])), "eid must be a 1-D"),
        (_frame({}, I64, I64, I64[:2], I64), "different lengths"),
    ],
)
def test_malformed_answers_are_a_protocol_error(frame: Frame, match: str) -> None:
    with pytest.raises(ProtocolError, match=f"answer of server 2: .*{match}"):
        decode_sample_answer(frame, 4, 2)


def test_a_malformed_answer_from_a_server_fails_the_sampling_call(
    g: DistGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = g.ctx.call_many

    def lying(calls: Any) -> Any:
        out = real(calls)
        for f in out.values():
            if f.meta.get("runs"):
                f.bufs[3] = f.bufs[3] + 1  # run lengths no longer add up to the edges
        return out

    monkeypatch.setattr(g.ctx, "call_many", lying)
    with pytest.raises(ProtocolError, match="run lengths do not add up"):
        sample_neighbors(g, np.arange(50), 3)


def test_columns_received_back_to_back_or_concatenated() -> None:
    cols = _Columns({0: 4, 1: 6})
    a0 = cols.into(0)(0, np.dtype(np.int64), (4,))
    a1 = cols.into(0)(1, np.dtype(np.int64), (4,))
    assert cols.into(0)(2, np.dtype(np.int32), (4,)) is None  # run columns: codec's own
    b0 = cols.into(1)(0, np.dtype(np.int64), (6,))
    b1 = cols.into(1)(1, np.dtype(np.int64), (6,))
    assert cols.into(2)(0, np.dtype(np.int64), (1,)) is None  # over the bound
    assert a0 is not None and b0 is not None and a1 is not None and b1 is not None
    a0[:], b0[:] = 1, 2
    frames = [(0, _frame(RUNS, a0, a1)), (1, _frame(RUNS, b0, b1))]
    np.testing.assert_array_equal(cols.joined(frames, 0), [1] * 4 + [2] * 6)
    assert cols.joined(frames[::-1], 0) is None  # out of order (a retried answer)
    assert cols.joined([(0, _frame(RUNS, a0.copy(), a1)), frames[1]], 0) is None


def test_columns_around_a_local_answer_put_every_answer_in_partition_order() -> None:
    """A co-located trainer of partition 2 of 4: its answer in its slot (after the lower
    partitions' bounds), the higher answer after it, the lower ones right-aligned before
    it (received in descending order): one array in partition order, no concatenation."""
    i64 = np.dtype(np.int64)
    cols = _Columns({0: 5, 1: 3, 2: 6, 3: 4}, local=2)
    assert cols.order([0, 1, 2, 3]) == [2, 3, 1, 0]
    src, eid = cols.slot()
    assert len(src) == 6 and np.shares_memory(src, cols.cols[0][8:14])
    src[:4], eid[:4] = 20, 21  # the draw wrote 4 edges
    mine = _frame(RUNS, src[:4], eid[:4])
    cols.adopt(2, mine)
    got = {}
    for p, n in ((3, 2), (1, 3), (0, 1)):  # the receive order of cols.order
        got[p] = [cols.into(p)(i, i64, (n,)) for i in (0, 1)]
    for p, (a, b) in got.items():
        assert a is not None and b is not None
        a[:], b[:] = 10 * p, 10 * p + 1
    frames = [(p, _frame(RUNS, *got[p])) for p in (0, 1)] + [(2, mine), (3, _frame(RUNS, *got[3]))]
    np.testing.assert_array_equal(cols.joined(frames, 0), [0] + [10] * 3 + [20] * 4 + [30] * 2)
    np.testing.assert_array_equal(cols.joined(frames, 1), [1] + [11] * 3 + [21] * 4 + [31] * 2)
    # an in-process answer outside its slot (the NumPy draw's own arrays) is not adopted:
    # the columns are then concatenated by the caller
    other = _Columns({0: 5, 1: 3}, local=1)
    fresh = _frame(RUNS, np.arange(3), np.arange(3))
    other.adopt(1, fresh)
    a = [other.into(0)(i, i64, (2,)) for i in (0, 1)]
    assert a[0] is not None and a[1] is not None
    assert other.joined([(0, _frame(RUNS, *a)), (1, fresh)], 0) is None
    # a lower answer larger than the room before the slot: received as usual
    assert _Columns({0: 2, 1: 3}, local=1).into(0)(0, i64, (3,)) is None
