"""The feature cache: servers' write generations (PULL ``gen`` opt-in, bumped by every
write), cached reads equal to uncached ones, hits, invalidation by writes, hostile
generations refused, and the budget's configuration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.cora import handlers_on, partition_cora

from distgnn.distributed import DistEmbedding, DistGraph, DistTensor, SparseAdagrad
from distgnn.distributed.context import initialize
from distgnn.distributed.featcache import FeatureCache, _Warmup, answer_gen, cache_budget
from distgnn.errors import ConfigError, ProtocolError
from distgnn.rpc.protocol import MsgType
from distgnn.server.handlers import Handlers
from distgnn.server.store import TensorError

PULL, PUSH = MsgType.PULL, MsgType.PUSH
FEAT = "node/_N/feat"


@pytest.fixture(scope="module")
def cora2(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(tmp_path_factory.mktemp("cora2fc"), cora_path, 2)


@pytest.fixture
def h(cora2: str) -> Iterator[Handlers]:
    with handlers_on(cora2) as h:
        yield h


@pytest.fixture
def g(cora2: str) -> Iterator[DistGraph]:
    with DistGraph.standalone(cora2) as graph:
        graph.ctx.feature_cache = FeatureCache(64 << 20, warmup=2, min_read=1)
        yield graph


def _gen(h: Handlers, name: str = FEAT) -> int:
    meta, _ = h.handle(PULL, {"name": name, "gen": True}, [np.zeros(0, np.int64)])
    assert type(meta["gen"]) is int
    return int(meta["gen"])


def test_every_write_moves_the_generation_a_pull_reports(h: Handlers) -> None:
    g0 = _gen(h)
    assert _gen(h) == g0  # reads change nothing
    meta, bufs = h.handle(PULL, {"name": FEAT}, [np.arange(3)])
    assert meta == {} and bufs[0].shape[0] == 3  # clients that do not ask: as before
    row = np.ones((1, bufs[0].shape[1]), np.float32)
    h.handle(PUSH, {"name": FEAT, "op": "set"}, [np.array([1]), row])
    g1 = _gen(h)
    h.handle(PUSH, {"name": FEAT, "op": "add"}, [np.array([1]), row])
    g2 = _gen(h)
    assert g0 < g1 < g2
    with pytest.raises(TensorError, match="'gen' must be true or false"):
        h.handle(PULL, {"name": FEAT, "gen": 1}, [np.arange(3)])


def test_sparse_updates_and_re_creation_move_the_generation(h: Handlers) -> None:
    spec = {"dtype": "float32", "shape": [8, 4], "init": {"kind": "zeros"}}
    for name in ("node/_N/emb", "node/_N/emb.sum"):
        h.handle(MsgType.INIT_TENSOR, {"name": name, **spec}, [])
    e0, s0 = _gen(h, "node/_N/emb"), _gen(h, "node/_N/emb.sum")
    h.handle(
        MsgType.SPARSE_UPDATE,
        {"name": "node/_N/emb", "opt": "adagrad", "lr": 0.1,
         "state": {"sum": "node/_N/emb.sum"}},
        [np.array([2]), np.ones((1, 4), np.float32)],
    )  # fmt: skip
    assert _gen(h, "node/_N/emb") != e0 and _gen(h, "node/_N/emb.sum") != s0
    # deleted and created again: a new random start, never the old generation
    before = _gen(h, "node/_N/emb")
    h.handle(MsgType.DELETE_TENSOR, {"name": "node/_N/emb"}, [])
    h.handle(MsgType.INIT_TENSOR, {"name": "node/_N/emb", **spec}, [])
    assert _gen(h, "node/_N/emb") not in (before, e0)


def _uncached(g: DistGraph, ids: np.ndarray) -> torch.Tensor:
    cache, g.ctx.feature_cache = g.ctx.feature_cache, None
    try:
        return g.ndata["feat"][ids]
    finally:
        g.ctx.feature_cache = cache


def _hot_reads(g: DistGraph, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    hot = np.arange(0, g.num_nodes(), 5)
    return [
        rng.permutation(np.concatenate([hot, rng.choice(g.num_nodes(), 300)])) for _ in range(n)
    ]


def test_cached_reads_equal_uncached_ones_and_hit(g: DistGraph, path: str) -> None:
    """Most rows cached (the rows placed in one pass: the native kernel, or torch's row
    copies): the same bytes as uncached reads, duplicates and any order included; the
    native path receives the pulled rows into the output itself (no scratch buffer)."""
    feat = g.ndata["feat"]
    reads = _hot_reads(g, 6)
    reads.append(np.r_[reads[0][:50], reads[0][:50], reads[1][::-1]])
    for ids in reads:
        assert torch.equal(feat[ids], _uncached(g, ids))
    st = g.ctx.feature_cache.stats
    assert st.hits > 1000 and st.bytes_saved == st.hits * 4 * feat.shape[1]
    assert st.invalidations == 0 and st.rows > 0
    tc = g.ctx.feature_cache._state[FEAT]
    assert not isinstance(tc, _Warmup) and tc is not None
    assert (not tc._bufs) == (path == "native")
    assert st.bytes == tc.nbytes
    # every row cached: nothing pulled (zero-row PULLs for the generations), the same rows
    f = tc.ids[tc.filled]  # ascending: the first of partition 0, the last of partition 1
    ids = np.r_[f[:150], f[-150:], f[:5]]
    assert ids[0] < feat.policy.offsets[1] <= ids[-6]
    hits, misses = st.hits, st.misses
    assert torch.equal(feat[ids], _uncached(g, ids))
    assert (st.hits - hits, st.misses - misses) == (len(ids), 0)
    # a write to every server, then the same all-cached read: the zero-row PULLs' new
    # generations drop the cached rows, which are read again
    feat[ids[[0, -6]]] = torch.full((2, feat.shape[1]), 7.0)
    got = feat[ids]
    assert (got[[0, -6, -5]] == 7.0).all() and torch.equal(got, _uncached(g, ids))
    assert st.invalidations >= 1 and st.refetched > 0


def test_a_write_is_seen_by_the_next_cached_read(g: DistGraph, path: str) -> None:
    feat = g.ndata["feat"]
    reads = _hot_reads(g, 5)
    for ids in reads[:4]:
        feat[ids]
    hits = g.ctx.feature_cache.stats.hits
    assert hits > 0
    rows = reads[4][:7]  # cached rows of both partitions
    feat[rows] = torch.full((7, feat.shape[1]), 3.0)
    got = feat[reads[4]]
    assert (got[:7] == 3.0).all()
    assert torch.equal(got, _uncached(g, reads[4]))
    feat.scatter_add_(rows[:2], torch.ones(2, feat.shape[1]))
    assert (feat[reads[4]][:2] == 4.0).all()
    assert g.ctx.feature_cache.stats.invalidations >= 2


def test_a_tensor_written_on_every_read_stops_being_cached(g: DistGraph) -> None:
    n = g.num_nodes()
    emb = DistEmbedding(n, 4, "emb", ("constant", {"value": 0.0}), ctx=g.ctx)
    opt = SparseAdagrad([emb], lr=0.1)
    t = DistTensor((n, 4), torch.float32, emb.name, part_policy="node", ctx=g.ctx)
    ids = np.arange(0, n, 3)
    before = t[ids]
    for _ in range(6):  # reads and updates, as training does
        emb(torch.from_numpy(ids)).sum().backward()
        opt.step()
        after = t[ids]
        assert not torch.equal(before, after)  # every update seen
        assert torch.equal(after, _uncached_t(g, t, ids))
        before = after
    assert g.ctx.feature_cache._state.get(t.key) is None  # given up: no more checks


def _uncached_t(g: DistGraph, t: DistTensor, ids: np.ndarray) -> torch.Tensor:
    cache, g.ctx.feature_cache = g.ctx.feature_cache, None
    try:
        return t[ids]
    finally:
        g.ctx.feature_cache = cache


def _rewrite_gen(g: DistGraph, monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    real = g.ctx.call_many

    def lying(calls: Any, between: Any = None) -> Any:
        out = real(calls)
        for f in out.values():
            if "gen" in f.meta:
                if value is None:
                    del f.meta["gen"]
                else:
                    f.meta["gen"] = value
        return out

    monkeypatch.setattr(g.ctx, "call_many", lying)


@pytest.mark.parametrize("bad", [True, -1, 1 << 64, "7", 1.5, [1]])
def test_a_hostile_generation_is_a_protocol_error(bad: Any) -> None:
    with pytest.raises(ProtocolError, match="PULL answer of server 3: field 'gen'"):
        answer_gen(3, {"gen": bad})


def test_a_hostile_generation_fails_the_cached_read(
    g: DistGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _hot_reads(g, 3)
    for ids in reads[:2]:
        g.ndata["feat"][ids]
    _rewrite_gen(g, monkeypatch, "x" * 100)
    with pytest.raises(ProtocolError, match=r"PULL answer of server [01]: field 'gen'"):
        g.ndata["feat"][reads[2]]


def test_servers_without_generations_are_read_uncached(
    g: DistGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    _rewrite_gen(g, monkeypatch, None)  # as an older server answers
    for ids in _hot_reads(g, 5):
        assert torch.equal(g.ndata["feat"][ids], _uncached(g, ids))
    assert g.ctx.feature_cache.stats.hits == 0


def test_the_budget_comes_from_the_environment_and_a_wrong_one_names_it() -> None:
    assert cache_budget({}) == 0
    assert cache_budget({"DISTGNN_FEATURE_CACHE_MB": "1.5"}) == 3 << 19
    for bad in ("lots", "-1", "nan", "inf"):
        with pytest.raises(ConfigError, match="DISTGNN_FEATURE_CACHE_MB"):
            cache_budget({"DISTGNN_FEATURE_CACHE_MB": bad})
    with pytest.raises(ConfigError, match="DISTGNN_FEATURE_CACHE_MB"):
        initialize(servers="127.0.0.1:1", token="t", env={"DISTGNN_FEATURE_CACHE_MB": "x"})


def test_cache_counters_are_trainer_metrics(g: DistGraph) -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from distgnn.train.telemetry import Telemetry, TrainerMetrics

    tel = Telemetry(metrics=TrainerMetrics())
    tel.attach(None, cache=g.ctx.feature_cache.stats)
    assert tel.metrics is not None
    for ids in _hot_reads(g, 4):
        g.ndata["feat"][ids]
    st = g.ctx.feature_cache.stats
    got = {  # read at scrape time
        s.name: s.value
        for fam in text_string_to_metric_families(generate_latest(tel.metrics.registry).decode())
        for s in fam.samples
    }
    assert st.hits > 0 and got["distgnn_trainer_cache_hits_total"] == st.hits
    assert got["distgnn_trainer_cache_misses_total"] == st.misses
    assert got["distgnn_trainer_cache_saved_bytes_total"] == st.bytes_saved
    assert got["distgnn_trainer_cache_invalidations_total"] == 0


def test_few_hits_are_placed_around_rows_received_in_place(g: DistGraph, path: str) -> None:
    """Under a quarter of hits (a co-located trainer's case): the other rows are received
    in place and the hits written around them; the same rows as uncached, writes seen."""
    feat = g.ndata["feat"]
    n = g.num_nodes()
    row = 4 * feat.shape[1]  # room for 150 rows: the hot ones and a few read twice
    g.ctx.feature_cache = FeatureCache(4 * n + 150 * (row + 13), warmup=2, min_read=1)
    rng = np.random.default_rng(5)
    hot = np.arange(0, n, 40)
    reads = [np.sort(np.r_[hot, rng.choice(n, 1200, replace=False)]) for _ in range(6)]
    for ids in reads:
        assert torch.equal(feat[ids], _uncached(g, ids))
    st = g.ctx.feature_cache.stats
    assert st.hits > 0 and st.hits * 4 < st.hits + st.misses
    feat[hot[:3]] = torch.full((3, feat.shape[1]), 9.0)
    got = feat[reads[0]]
    assert (got[np.isin(reads[0], hot[:3])] == 9.0).all()
    assert torch.equal(got, _uncached(g, reads[0]))


@pytest.mark.parametrize(("step", "extra"), [(7, 300), (40, 20)])
@pytest.mark.parametrize("local_part", [None, 0])
def test_the_warm_up_chooses_the_most_read_rows(
    g: DistGraph, step: int, extra: int, local_part: int | None
) -> None:
    """The rows read most in the warm-up fill the budget, counted per row of the table
    (step 7: reads of ~1000 rows) or over the reads alone (step 40: reads far smaller
    than the table): the same choice; a co-located trainer's own partition is left out
    however often it is read."""
    feat = g.ndata["feat"]
    n = g.num_nodes()
    o1 = int(feat.policy.offsets[1])
    rng = np.random.default_rng(step)
    own = np.empty(0, np.int64)
    if local_part is None:
        hot = np.arange(0, n, step)
    else:  # the own partition's rows read even more often
        hot, own = np.arange(o1, n, step // 2), np.arange(0, o1, step)
    row = 4 * feat.shape[1]
    cache = FeatureCache(4 * n + len(hot) * (row + 13), local_part, warmup=2, min_read=1)
    g.ctx.feature_cache = cache
    for _ in range(2):  # the hot rows twice in every read, other rows at most once
        ids = np.r_[hot, hot, own, own, own, rng.choice(n, extra, replace=False)]
        assert torch.equal(feat[ids], _uncached(g, ids))
    tc = cache._state[FEAT]
    assert not isinstance(tc, _Warmup) and tc is not None
    np.testing.assert_array_equal(tc.ids, hot)
    assert cache.left >= 0 and cache.stats.bytes == tc.nbytes
