"""The native kernels (``distgnn._native``) against their NumPy reference: uniform
neighbour sampling, ``to_block``'s relabelling and the mean aggregation's CSRs, on random
and edge-case inputs; the draw's uniformity; the NumPy path forced by ``DISTGNN_NATIVE=0``;
malformed input refused with an error, never a crash."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.cora import handlers_on, partition_cora

from distgnn import native
from distgnn.errors import ConfigError
from distgnn.nn.ops import MeanAdjacency, mean_aggregate
from distgnn.partition.loader import load_partition
from distgnn.rpc.protocol import MsgType
from distgnn.sampling.blocks import to_block
from distgnn.server import sampling


def _csc(rng: np.random.Generator, n: int, hi: int = 60) -> np.ndarray:
    return np.r_[0, np.cumsum(rng.integers(0, hi, n))].astype(np.int64)


# --- the switch ------------------------------------------------------------------------


def test_distgnn_native_0_selects_the_numpy_path_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DISTGNN_NATIVE", "0")
    native.kernels.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="distgnn.native"):
            assert native.kernels() is None and not native.available()
            native.kernels()
        assert [r.getMessage() for r in caplog.records] == ["native kernels off: NumPy path"]
    finally:
        native.kernels.cache_clear()


def test_a_bad_distgnn_native_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTGNN_NATIVE", "maybe")
    native.kernels.cache_clear()
    try:
        with pytest.raises(ConfigError, match="DISTGNN_NATIVE='maybe'"):
            native.kernels()
    finally:
        native.kernels.cache_clear()


def test_the_extension_is_used_by_default_when_built(
    k: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTGNN_NATIVE", raising=False)
    native.kernels.cache_clear()
    try:
        assert native.kernels() is k
    finally:
        native.kernels.cache_clear()


# --- sampling ---------------------------------------------------------------------------


def _check_draw(
    indptr: np.ndarray,
    seeds: np.ndarray,
    fanout: int,
    replace: bool,
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """The semantics of sample_uniform_runs, whatever the draw."""
    pos, run_seed, run_len = out
    assert pos.dtype == run_seed.dtype == run_len.dtype == np.int64
    assert int(run_len.sum()) == len(pos) and len(np.unique(run_seed)) == len(run_seed)
    deg = indptr[seeds + 1] - indptr[seeds]
    seg = np.repeat(run_seed, run_len)
    assert (pos >= indptr[seeds[seg]]).all() and (pos < indptr[seeds[seg] + 1]).all()
    want = np.bincount(seg, minlength=len(seeds))
    if fanout < 0:
        np.testing.assert_array_equal(want, deg)
    elif replace:
        np.testing.assert_array_equal(want, np.where(deg > 0, fanout, 0))
    else:
        np.testing.assert_array_equal(want, np.minimum(deg, fanout))
        assert len(np.unique(pos)) == len(pos)  # distinct per seed (seeds are distinct)


@pytest.mark.parametrize("fanout", [-1, 0, 1, 5, 15, 59, 200])
@pytest.mark.parametrize("replace", [False, True])
def test_sampling_kernel_has_the_reference_semantics(
    k: ModuleType, fanout: int, replace: bool
) -> None:
    rng = np.random.default_rng(fanout + 3)
    indptr = _csc(rng, 3000, 130)  # degrees 0..129: every bucket and membership test
    seeds = rng.permutation(3000)[:1200]
    got = native.sample_uniform_runs(k, indptr, seeds, fanout, replace, rng)
    ref = sampling.sample_uniform_runs(indptr, seeds, fanout, replace, rng)
    _check_draw(indptr, seeds, fanout, replace, got)
    _check_draw(indptr, seeds, fanout, replace, ref)
    if fanout < 0 or (fanout >= 130 and not replace):  # every edge: the same answer
        order = np.argsort(ref[1], kind="stable")
        np.testing.assert_array_equal(got[1], ref[1][order])
        np.testing.assert_array_equal(got[2], ref[2][order])
        np.testing.assert_array_equal(np.sort(got[0]), np.sort(ref[0]))


def test_sampling_kernel_edge_cases(k: ModuleType) -> None:
    rng = np.random.default_rng(0)
    empty = np.empty(0, np.int64)
    indptr = np.array([0, 0, 3, 3], np.int64)  # degrees 0, 3, 0
    for f in (-1, 2, 5):
        for rep in (False, True):
            got = native.sample_uniform_runs(k, indptr, empty, f, rep, rng)
            assert all(len(a) == 0 for a in got)
            got = native.sample_uniform_runs(k, indptr, np.array([0, 2]), f, rep, rng)
            assert len(got[0]) == 0  # only degree-0 seeds
            _check_draw(indptr, np.array([0, 2]), f, rep, got)
    # degree < fanout: all its edges; int32 seeds are converted
    got = native.sample_uniform_runs(k, indptr, np.array([1, 0], np.int32), 10, False, rng)
    np.testing.assert_array_equal(got[0], [0, 1, 2])
    # a fanout far above every degree: every edge, no set sized by the fanout
    got = native.sample_uniform_runs(k, indptr, np.array([1]), 2**63 - 1, False, rng)
    np.testing.assert_array_equal(got[0], [0, 1, 2])
    # huge degrees and positions (2**40 edges of one node, starting at 2**50)
    big = np.array([2**50, 2**50 + 2**40], np.int64)
    for f in (15, 60):
        pos, _, run_len = native.sample_uniform_runs(k, big, np.array([0]), f, False, rng)
        assert len(set(pos.tolist())) == f == int(run_len[0])
        assert pos.min() >= 2**50 and pos.max() < 2**50 + 2**40


@pytest.mark.parametrize(("fanout", "replace"), [(-1, False), (4, False), (15, False),
                                                (59, False), (7, True)])  # fmt: skip
def test_the_kernel_gathers_values_at_the_positions_of_the_same_draw(
    k: ModuleType, fanout: int, replace: bool
) -> None:
    """With ``values``, the same positions and runs as without (the same draw for the
    same seed) and ``values[pos]`` gathered in the same pass (behind a prefetch)."""
    rng = np.random.default_rng(fanout + 11)
    indptr = _csc(rng, 3000, 130)
    seeds = rng.permutation(3000)[:1500]
    values = rng.integers(0, 2**62, int(indptr[-1]))
    plain = native.sample_uniform_runs(k, indptr, seeds, fanout, replace, np.random.default_rng(4))
    got = native.sample_uniform_src(
        k, indptr, values, seeds, fanout, replace, np.random.default_rng(4), 2**40
    )
    assert not isinstance(got, int)
    for a, b in zip(plain, got[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[3], values[plain[0]])
    assert got[3].dtype == np.int64


@pytest.mark.parametrize(("fanout", "replace"), [(-1, False), (4, False), (15, False), (7, True)])
def test_the_kernel_draws_into_the_callers_arrays_the_same_sample(
    k: ModuleType, fanout: int, replace: bool
) -> None:
    """With ``out`` (the hop's columns of a co-located trainer), the same draw written to
    the first edges of the caller's arrays (nothing past them); too short, overlapping or
    a build without the option: fresh arrays, the same sample."""
    import types

    rng = np.random.default_rng(fanout + 5)
    indptr = _csc(rng, 2000, 90)
    seeds = rng.permutation(2000)[:900]
    values = rng.integers(0, 2**62, int(indptr[-1]))

    def draw(kern: Any, out: Any = None) -> Any:
        got = native.sample_uniform_src(
            kern, indptr, values, seeds, fanout, replace, np.random.default_rng(9), 2**40, out
        )
        assert not isinstance(got, int)
        return got

    want = draw(k)
    n = len(want[0])
    pos, src = np.full(n + 7, -5, np.int64), np.full(n + 7, -5, np.int64)
    got = draw(k, (pos, src))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    if hasattr(k, "SAMPLE_INTO"):
        assert np.shares_memory(got[0], pos) and np.shares_memory(got[3], src)
        assert (pos[n:] == -5).all() and (src[n:] == -5).all()
    both = np.zeros(2 * n, np.int64)
    for out in ((pos[: n - 1], src), (both[: n + 1], both[n - 1 :])):  # short, overlapping
        got = draw(k, out)
        assert not np.shares_memory(got[0], out[0]) and not np.shares_memory(got[3], out[1])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    stale = types.SimpleNamespace(sample_uniform=k.sample_uniform)  # no SAMPLE_INTO
    got = draw(stale, (pos.copy(), src.copy()))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    if not hasattr(k, "SAMPLE_INTO"):
        return  # a build before the option: the wrapper never passes the arrays
    with pytest.raises(TypeError, match="out_pos"):
        k.sample_uniform(indptr, seeds, fanout, replace, 3, values, -1, pos.astype(np.int32), src)


@pytest.mark.parametrize(("fanout", "replace"), [(-1, False), (5, False), (5, True)])
def test_the_kernel_counts_a_sample_over_max_edges_and_draws_nothing(
    k: ModuleType, fanout: int, replace: bool
) -> None:
    """Over ``max_edges``: the sample's edge count (the handler's limit, the same count
    as the NumPy check: min(degree, fanout), fanout per seed with edges, or the degree)."""
    rng = np.random.default_rng(2)
    indptr = _csc(rng, 500, 12)  # degrees 0..11
    seeds = rng.permutation(500)[:300]
    deg = indptr[seeds + 1] - indptr[seeds]
    if fanout < 0:
        work = int(deg.sum())
    elif replace:
        work = int(np.count_nonzero(deg)) * fanout
    else:
        work = int(np.minimum(deg, fanout).sum())
    values = np.arange(int(indptr[-1]), dtype=np.int64)
    r = np.random.default_rng(0)
    assert native.sample_uniform_src(k, indptr, values, seeds, fanout, replace, r, work - 1) == work
    got = native.sample_uniform_src(k, indptr, values, seeds, fanout, replace, r, work)
    assert not isinstance(got, int) and len(got[0]) == work


def test_a_seeded_draw_is_reproducible_and_seeds_differ(k: ModuleType) -> None:
    rng = np.random.default_rng(5)
    indptr = _csc(rng, 2000)
    seeds = rng.permutation(2000)[:800]

    def draw(seed: int, replace: bool) -> np.ndarray:
        r = np.random.default_rng(seed)
        return native.sample_uniform_runs(k, indptr, seeds, 7, replace, r)[0]

    for rep in (False, True):
        np.testing.assert_array_equal(draw(1, rep), draw(1, rep))
        assert not np.array_equal(draw(1, rep), draw(2, rep))


def _subset_counts(k: ModuleType, deg: int, f: int, n: int) -> np.ndarray:
    """How often each f-subset of a degree-``deg`` seed is drawn over ``n`` seeds."""
    indptr = np.arange(n + 1, dtype=np.int64) * deg
    pos, _, _ = native.sample_uniform_runs(
        k, indptr, np.arange(n), f, False, np.random.default_rng(deg * 100 + f)
    )
    off = np.sort((pos - np.repeat(indptr[:-1], f)).reshape(n, f), axis=1)
    code = np.zeros(n, np.int64)
    for j in range(f):
        code = code * deg + off[:, j]
    return np.unique(code, return_counts=True)[1]


@pytest.mark.parametrize(("deg", "f"), [(5, 2), (6, 3), (70, 2)])
def test_every_subset_is_equally_likely(k: ModuleType, deg: int, f: int) -> None:
    """Floyd's draw (bit mask for degree <= 64, scan above): each f-subset uniform."""
    import math

    subsets = math.comb(deg, f)
    n = 800 * subsets
    counts = _subset_counts(k, deg, f, n)
    assert len(counts) == subsets
    chi2 = float(((counts - 800) ** 2 / 800).sum())
    assert chi2 < subsets + 6 * math.sqrt(2 * subsets)  # mean dof, sd sqrt(2 dof)


@pytest.mark.parametrize(
    ("deg", "f", "replace"), [(200, 60, False), (100, 10, False), (7, 3, True)]
)
def test_every_edge_is_equally_likely(k: ModuleType, deg: int, f: int, replace: bool) -> None:
    """Each position drawn with probability f/deg (the hash-set path: fanout > 48)."""
    import math

    n = 4000
    indptr = np.arange(n + 1, dtype=np.int64) * deg
    pos, _, _ = native.sample_uniform_runs(
        k, indptr, np.arange(n), f, replace, np.random.default_rng(deg)
    )
    counts = np.bincount(pos - np.repeat(indptr[:-1], f), minlength=deg)
    expect = n * f / deg
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < deg + 6 * math.sqrt(2 * deg)


@pytest.mark.parametrize(
    ("args", "err", "match"),
    [
        ((np.zeros(3), np.array([0]), 2, False, 1), TypeError, "indptr: expected a 1-D int64"),
        ((np.zeros((2, 2), np.int64), np.array([0]), 2, False, 1), TypeError, "1-D int64"),
        ((np.array([0, 2]), np.array([0], np.int32), 2, False, 1), TypeError, "seeds"),
        ((np.array([0, 2]), np.array([1]), 2, False, 1), ValueError, "out of the CSC"),
        ((np.array([0, 2]), np.array([-1]), 2, False, 1), ValueError, "out of the CSC"),
        ((np.array([0, 2]), np.array([2**62]), 2, False, 1), ValueError, "out of the CSC"),
        ((np.array([5, 2]), np.array([0]), 2, False, 1), ValueError, "not ascending"),
        ((np.array([-4, 2]), np.array([0]), 2, False, 1), ValueError, "not ascending"),
        ((np.empty(0, np.int64), np.array([0]), 2, False, 1), ValueError, "empty"),
        (("abc", np.array([0]), 2, False, 1), TypeError, "indptr"),
        ((np.array([0, 2]), np.array([0]), 2**70, False, 1), OverflowError, "too big|overflow"),
        ((np.array([0, 2**61]), np.array([0, 0, 0, 0]), -1, False, 1), ValueError, "too large"),
        ((np.array([0, 2]), np.array([0] * 5), 2**62, True, 1), ValueError, "too large"),
        (
            (np.array([0, 3]), np.array([0]), 2, False, 1, np.zeros(2, np.int64)),
            ValueError,
            "values are shorter",
        ),
        ((np.array([0, 3]), np.array([0]), 2, False, 1, np.zeros(3)), TypeError, "values"),
    ],
)
def test_sampling_kernel_refuses_bad_input(
    k: ModuleType, args: tuple[object, ...], err: type[Exception], match: str
) -> None:
    with pytest.raises(err, match=match):
        k.sample_uniform(*args)


def test_the_servers_handler_samples_on_either_path(
    path: str, cora_path: Path, tmp_path: Path
) -> None:
    """SAMPLE_NEIGHBORS answered by the path's kernel: the reference semantics, seeded
    requests reproducible."""
    manifest = partition_cora(tmp_path, cora_path, 1)
    part = load_partition(manifest, 0)
    l2g, indices = np.asarray(part.local2global), np.asarray(part.indices)
    with handlers_on(manifest, 0) as h:
        assert (h.native is not None) == (path == "native")
        g = h.g
        seeds = np.arange(0, 900, 3)
        for f in (-1, 4):
            _, (src, eid, run_seed, run_len) = h.handle(
                MsgType.SAMPLE_NEIGHBORS, {"fanout": f, "runs": True, "seed": 9}, [seeds]
            )
            deg = g.indptr[seeds + 1] - g.indptr[seeds]
            seg = np.repeat(run_seed, run_len)
            want = deg if f < 0 else np.minimum(deg, f)
            np.testing.assert_array_equal(np.bincount(seg, minlength=len(seeds)), want)
            # each edge is an in-edge of its seed
            pos = g.eidpos[eid - g.edge_offset]
            assert (pos >= g.indptr[seeds[seg]]).all()
            assert (pos < g.indptr[seeds[seg] + 1]).all()
            np.testing.assert_array_equal(src, l2g[indices[pos]])
            again = h.handle(
                MsgType.SAMPLE_NEIGHBORS, {"fanout": f, "runs": True, "seed": 9}, [seeds]
            )[1]
            np.testing.assert_array_equal(again[1], eid)  # seeded: reproducible


def test_the_sample_limit_counts_the_same_edges_on_either_path(
    path: str, cora_path: Path, tmp_path: Path
) -> None:
    """A uniform request over ``max_sample_edges`` is refused naming the same edge count
    on both paths (the kernel counts it, NumPy checks the degrees); at the limit it is
    answered."""
    from distgnn.server.limits import ServerLimits
    from distgnn.server.store import TensorError

    manifest = partition_cora(tmp_path, cora_path, 1)
    with handlers_on(manifest, 0) as h:
        seeds = np.arange(0, 1500, 2)
        deg = h.g.indptr[seeds + 1] - h.g.indptr[seeds]
        for f, rep, work in (
            (3, False, int(np.minimum(deg, 3).sum())),
            (3, True, 3 * int(np.count_nonzero(deg))),
            (-1, False, int(deg.sum())),
        ):
            meta = {"fanout": f, "replace": rep, "runs": True}
            h.lim = ServerLimits(max_sample_edges=work - 1)
            with pytest.raises(TensorError, match=f"{len(seeds)} seeds would touch {work} edges"):
                h.handle(MsgType.SAMPLE_NEIGHBORS, dict(meta), [seeds])
            h.lim = ServerLimits(max_sample_edges=work)
            assert len(h.handle(MsgType.SAMPLE_NEIGHBORS, dict(meta), [seeds])[1][0]) == work


# --- block CSRs -------------------------------------------------------------------------


def _edges(
    rng: np.random.Generator, nd: int, ns: int, e: int, grouped: bool
) -> tuple[np.ndarray, np.ndarray]:
    dst = rng.integers(0, nd, e)
    if grouped:
        dst = np.sort(dst)
    return rng.integers(0, ns, e), dst


@pytest.mark.parametrize(
    ("nd", "ns", "e", "grouped"),
    [(50, 300, 2000, True), (50, 300, 2000, False), (7, 9, 0, False), (400, 30, 90, False)],
)
def test_block_csrs_equal_on_both_paths(
    path: str, nd: int, ns: int, e: int, grouped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = _edges(np.random.default_rng(nd + e), nd, ns, e, grouped)
    a = MeanAdjacency(src, dst, ns, nd)
    at = a.transpose()
    # the reference: the NumPy path
    monkeypatch.setenv("DISTGNN_NATIVE", "0")
    native.kernels.cache_clear()
    ref = MeanAdjacency(src, dst, ns, nd)
    for x, y in ((a.a, ref.a), (at, ref.transpose())):
        assert x.crow_indices().dtype == y.crow_indices().dtype == torch.int32
        np.testing.assert_array_equal(x.crow_indices().numpy(), y.crow_indices().numpy())
        np.testing.assert_array_equal(x.col_indices().numpy(), y.col_indices().numpy())
        np.testing.assert_array_equal(x.values().numpy(), y.values().numpy())
    np.testing.assert_array_equal(a.inv_deg, ref.inv_deg)
    h = torch.randn(ns, 4, requires_grad=True)
    out = mean_aggregate(a, h)
    want = torch.zeros(nd, 4).index_add_(0, torch.from_numpy(dst), h.detach()[src])
    want /= torch.bincount(torch.from_numpy(dst), minlength=nd).clamp(min=1)[:, None]
    torch.testing.assert_close(out, want)
    out.sum().backward()


@pytest.mark.parametrize(
    ("args", "err", "match"),
    [
        ((np.array([0, 3]), np.array([0, 1]), 3, 5, None, False), ValueError, "out of range"),
        ((np.array([0, -1]), np.array([0, 1]), 3, 5, None, False), ValueError, "out of range"),
        ((np.array([0, 1]), np.array([0, 9]), 3, 5, None, False), ValueError, "out of range"),
        ((np.array([0, 1]), np.array([0]), 3, 5, None, False), ValueError, "differ in length"),
        ((np.array([0.0]), np.array([0]), 3, 5, None, False), TypeError, "keys"),
        ((np.array([0]), np.array([0]), 3, 5, np.ones(2, np.float32), False), ValueError, "inv"),
        ((np.array([0]), np.array([0]), 3, 5, np.ones(5), False), TypeError, "float32"),
        ((np.array([0]), np.array([0]), -3, 5, None, False), ValueError, ">= 0"),
    ],
)
def test_csr_kernel_refuses_bad_input(
    k: ModuleType, args: tuple[object, ...], err: type[Exception], match: str
) -> None:
    with pytest.raises(err, match=match):
        k.mean_csr(*args)


# --- to_block's relabelling -----------------------------------------------------------------


def _block_fields(b: object) -> list[np.ndarray]:
    return [getattr(b, f) for f in ("src_nid", "dst_nid", "edge_src", "edge_dst", "eid")]


@pytest.mark.parametrize(("nd", "e", "span"), [(300, 5000, 10**6), (5, 0, 100), (40, 400, 2**40)])
def test_to_block_equal_on_both_paths(
    path: str, nd: int, e: int, span: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dense relabelling (1M IDs) and the sorted one (IDs up to 2**40) alike."""
    rng = np.random.default_rng(nd)
    ids = rng.choice(span, nd + 3 * e + 1, replace=False)
    dst_nid = ids[:nd]
    idx = rng.integers(0, nd, e) if nd else np.empty(0, np.int64)
    src = ids[rng.integers(0, len(ids), e)]
    got = [
        to_block(dst_nid, src, dst_nid[idx], np.arange(e)),
        to_block(dst_nid, src, None, np.arange(e), dst_index=idx),
    ]
    monkeypatch.setenv("DISTGNN_NATIVE", "0")
    native.kernels.cache_clear()
    ref = to_block(dst_nid, src, dst_nid[idx], np.arange(e))
    for b in got:
        for x, y in zip(_block_fields(b), _block_fields(ref), strict=True):
            assert x.dtype == y.dtype == np.int64
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(("n", "nd", "e"), [(65, 10, 300), (1000, 64, 5000), (200_003, 900, 9000)])
def test_the_relabel_kernel_gives_the_tables_local_ids(
    k: ModuleType, n: int, nd: int, e: int
) -> None:
    """The bit maps' ranks give the same local IDs as a table over the range: IDs at word
    edges (0, 63, 64, n - 1), sources that are destinations, repeated sources."""
    from distgnn.sampling.blocks import _relabel_dense

    rng = np.random.default_rng(n)
    edges_ = np.array([0, 63, 64, n - 1])
    dst_nid = rng.permutation(np.unique(np.r_[edges_[:2], rng.choice(n, nd, replace=False)]))
    src = np.r_[edges_, dst_nid[:5], rng.integers(0, n, e), rng.integers(0, n, 5).repeat(9)]
    idx = rng.integers(0, len(dst_nid), len(src))
    got = native.relabel(k, dst_nid, src, dst_nid[idx], n)
    want = _relabel_dense(dst_nid, src, dst_nid[idx], n)
    for x, y in zip(got, want, strict=True):
        assert x is not None
        np.testing.assert_array_equal(x, y)
    if not hasattr(k, "HW_POPCNT"):
        pytest.skip("an extension built before the hardware popcount")
    # the ranks by the CPU's popcount (where it has one) and by the SWAR one, alike
    ids = (np.ascontiguousarray(dst_nid, np.int64), np.ascontiguousarray(src, np.int64))
    for swar in (False, True):
        got = k.relabel(*ids, np.ascontiguousarray(dst_nid[idx], np.int64), n, swar)
        for x, y in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.frombuffer(x, np.int64), y)
    with pytest.raises(ValueError, match="not among the seeds"):
        k.relabel(*ids, np.r_[dst_nid[idx][:-1], n - 2 if n - 2 not in dst_nid else n - 3], n)


def test_the_extension_says_whether_it_uses_the_cpus_popcount(k: ModuleType) -> None:
    if not hasattr(k, "HW_POPCNT"):
        pytest.skip("an extension built before the hardware popcount")
    import platform

    flags = ""
    with contextlib.suppress(OSError):
        flags = Path("/proc/cpuinfo").read_text()
    if platform.machine() in ("x86_64", "AMD64") and " popcnt" in flags:
        assert k.HW_POPCNT == 1
    else:
        assert k.HW_POPCNT in (0, 1)


def test_with_the_kernel_to_block_relabels_densely_up_to_400x_the_work(
    k: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's first hop (5k edges over 1M IDs: 175x) takes the kernel, not the sort;
    IDs spread over more than 400x the work are sorted."""
    calls: list[int] = []
    real = native.relabel

    def counted(*a: object) -> object:
        calls.append(1)
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(native, "relabel", counted)
    monkeypatch.delenv("DISTGNN_NATIVE", raising=False)
    native.kernels.cache_clear()
    rng = np.random.default_rng(0)
    try:
        for span, want in ((10**6, 1), (10**7, 0)):
            calls.clear()
            dst_nid = rng.choice(span - 1, 1000, replace=False)
            src = np.r_[rng.integers(0, span - 1, 4700), span - 1]
            b = to_block(
                dst_nid, src, None, np.arange(len(src)), dst_index=np.zeros(len(src), np.int64)
            )
            assert len(calls) == want
            np.testing.assert_array_equal(b.src_nid[b.edge_src], src)
    finally:
        native.kernels.cache_clear()


def test_to_block_errors_are_the_same_on_both_paths(path: str) -> None:
    with pytest.raises(ConfigError, match="destination node IDs must be unique"):
        to_block(np.array([4, 7, 4]), np.array([1]), np.array([4]), np.array([0]))
    with pytest.raises(ConfigError, match="a destination is not among the seeds"):
        to_block(np.array([4, 7]), np.array([1, 2]), np.array([4, 5]), np.array([0, 1]))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.array([3]), np.array([1]), np.array([3]), 3), "destination node ID is out of range"),
        ((np.array([0]), np.array([5]), None, 3), "edge's node ID is out of range"),
        ((np.array([0]), np.array([-1]), None, 3), "edge's node ID is out of range"),
        ((np.array([0]), np.array([1]), np.array([7]), 3), "not among the seeds"),
        ((np.array([0]), np.array([1, 2]), np.array([0]), 3), "differ in length"),
    ],
)
def test_relabel_kernel_refuses_bad_input(
    k: ModuleType, args: tuple[object, ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        k.relabel(*args)


def test_malformed_sample_requests_are_refused_before_any_kernel(
    path: str, cora_path: Path, tmp_path: Path
) -> None:
    """The handler validates seeds and fields first: an ERROR answer (TensorError) on
    either path, never a crash; unusual but valid input is answered."""
    from distgnn.server.store import TensorError

    with handlers_on(partition_cora(tmp_path, cora_path, 1), 0) as h:
        s, n = MsgType.SAMPLE_NEIGHBORS, h.g.n_owned
        bad_seeds = [
            np.array([0.5, 1.0]),
            np.zeros((2, 2), np.int64),
            np.array([-1, 3]),
            np.array([n]),
            np.array([2**62]),
            np.array([2**64 - 1], np.uint64),
        ]
        for seeds in bad_seeds:
            with pytest.raises(TensorError, match="seeds"):
                h.handle(s, {"fanout": 5, "runs": True}, [seeds])
        with pytest.raises(TensorError, match="missing buffer"):
            h.handle(s, {"fanout": 5}, [])
        # valid: small integer types, the largest fanout, nothing to sample
        for seeds, f in ((np.array([3, 1], np.int8), 2**31 - 1), (np.empty(0, np.int64), 4)):
            _, (_, eid, _, run_len) = h.handle(s, {"fanout": f, "runs": True}, [seeds])
            deg = h.g.indptr[seeds.astype(np.int64) + 1] - h.g.indptr[seeds.astype(np.int64)]
            assert len(eid) == int(run_len.sum()) == int(deg.sum())
