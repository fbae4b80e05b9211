"""The trainer API in standalone mode (every partition in-process, no servers) on real Cora."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.support.cora import partition_cora

from distgnn.distributed import (
    DistEmbedding,
    DistGraph,
    DistTensor,
    SparseAdagrad,
    SparseAdam,
    edge_split,
    node_split,
    sample_neighbors,
)
from distgnn.errors import ConfigError, ServerError
from distgnn.partition.loader import load_partition


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory: pytest.TempPathFactory, cora_path: Path) -> str:
    return partition_cora(tmp_path_factory.mktemp("cora3"), cora_path, 3)


@pytest.fixture(scope="module")
def new2orig(cora_parts: str) -> tuple[np.ndarray, np.ndarray]:
    """(orig node ID, orig edge ID) of every new global ID."""
    parts = [load_partition(cora_parts, p) for p in range(3)]
    return (
        np.concatenate([p.orig_nid for p in parts]),
        np.concatenate([p.orig_eid for p in parts]),
    )


@pytest.fixture()
def g(cora_parts: str):
    with DistGraph.standalone(cora_parts) as graph:
        yield graph


def test_schema_and_features_match_input(g: DistGraph, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    assert g.num_nodes() == len(data["feat"]) and g.num_edges() == len(data["src"])
    assert g.ntypes == ["_N"] and g.canonical_etypes == [("_N", "_E", "_N")]
    assert set(g.ndata) >= {"feat", "label", "train_mask"}
    nid = np.random.default_rng(0).permutation(g.num_nodes())
    feat = g.ndata["feat"][torch.from_numpy(nid)]
    assert feat.dtype == torch.float32
    np.testing.assert_array_equal(feat.numpy(), data["feat"][new2orig[0][nid]])
    np.testing.assert_array_equal(g.ndata["label"][nid].numpy(), data["label"][new2orig[0][nid]])
    # sampler order: seeds, then ascending runs (the segmented receive plan)
    mixed = np.concatenate([nid[:200], np.sort(nid[200:1500]), np.sort(nid[1500:])])
    np.testing.assert_array_equal(g.ndata["feat"][mixed].numpy(), data["feat"][new2orig[0][mixed]])


def _check_plan(parts: np.ndarray, nparts: int):
    """Mark every destination row of a read plan with its partition: each row of the
    output (or of the scratch, scattered) exactly once, skipped rows never."""
    from distgnn.distributed.readplan import plan_read

    offsets = np.arange(nparts + 1, dtype=np.int64) * 1000
    ids = offsets[np.minimum(parts, nparts - 1)] + np.arange(parts.size) % 1000
    out = np.zeros((parts.size, 2))
    plan = plan_read(ids, parts, offsets, out)
    if plan.scratch is not None:
        plan.scratch[...] = 0  # scratch comes uninitialised
    for p, dests in plan.dests.items():
        assert p < nparts and sum(d.shape[0] for d in dests) == plan.ids[p].size
        at = 0
        for d in dests:  # each destination gets the rows of its IDs
            assert np.shares_memory(d, out) or np.shares_memory(d, plan.scratch)
            d[:, 0] += 1
            d[:, 1] = plan.ids[p][at : at + d.shape[0]] + offsets[p]
            at += d.shape[0]
    plan.scatter_rows(out)
    read = parts < nparts
    assert np.all(out[read, 0] == 1) and np.array_equal(out[read, 1], ids[read])
    assert not out[~read].any()  # skipped positions untouched
    return plan


def test_read_plan_puts_every_row_in_its_place_once() -> None:
    from distgnn.distributed.readplan import MIN_DIRECT_RUN

    rng = np.random.default_rng(5)
    # sampler order: random seeds, then ascending runs per partition
    parts = np.concatenate(
        [rng.integers(0, 3, 100), np.repeat([0, 1, 2], 500), np.repeat([0, 2], [3, 700])]
    ).astype(np.int8)
    plan = _check_plan(parts, 3)
    assert plan.scatter.size < 100 + MIN_DIRECT_RUN  # the long runs went in place
    # rows skipped (a 4th, never-asked partition), also inside long runs
    skipped = parts.copy()
    skipped[rng.random(parts.size) < 0.01] = 3
    skipped[600:700] = 3
    _check_plan(skipped, 3)
    # no long runs: every row through the scratch array, one destination per partition
    plan = _check_plan(rng.integers(0, 3, 5000).astype(np.int8), 3)
    assert plan.scratch is not None and plan.scatter.size == 5000
    assert all(len(d) == 1 for d in plan.dests.values()) and len(plan.dests) == 3
    _check_plan(np.where(rng.random(5000) < 0.2, 3, rng.integers(0, 3, 5000)).astype(np.int8), 3)
    # many partitions (a stable sort), one ID, one partition in long runs
    _check_plan(rng.integers(0, 9, 3000).astype(np.int32), 9)
    _check_plan(np.zeros(1, np.int8), 2)
    _check_plan(np.repeat([1, 0], [300, 200]).astype(np.int8), 2)


def test_skipped_rows_leave_the_other_partitions_long_runs_in_place() -> None:
    """A co-located trainer's cached read: its own partition in long runs, the other one
    interleaved with cached (skipped) rows, more runs than ``MAX_SEGMENTS``: the long
    runs are still received (gathered) in place, only the short ones go through the
    scratch array."""
    from distgnn.distributed.readplan import MAX_SEGMENTS

    local = np.zeros(30_000, np.int8)
    remote = np.where(np.arange(2 * MAX_SEGMENTS + 10) % 2 == 0, 1, 2).astype(np.int8)
    parts = np.concatenate([local, remote, local[:5000]])
    plan = _check_plan(parts, 2)
    assert plan.scatter.size == int((remote == 1).sum())  # the remote misses only
    assert sum(d.shape[0] for d in plan.dests[0]) == 35_000  # in place, in 2 segments
    assert len(plan.dests[0]) == 2


def test_read_plan_asks_with_int32_local_ids_where_the_partition_fits() -> None:
    """A PULL carries int32 local IDs (half the request's bytes) unless the partition has
    more rows than int32 holds; the same local IDs either way, grouped or in runs."""
    from distgnn.distributed.readplan import INT32_ROWS, plan_read

    big = INT32_ROWS + 10
    offsets = np.array([0, 1000, 1000 + big, 2000 + big], dtype=np.int64)
    ids = np.r_[np.arange(0, 1000, 3), 1000 + big - np.arange(600, 0, -1), 1000 + big + 7]
    parts = np.repeat(np.array([0, 1, 2], np.int8), [334, 600, 1])
    rng = np.random.default_rng(0)
    for order in (np.arange(ids.size), rng.permutation(ids.size)):  # runs, then grouped
        plan = plan_read(ids[order], parts[order], offsets, np.zeros((ids.size, 1)))
        assert [plan.ids[p].dtype for p in (0, 1, 2)] == [np.int32, np.int64, np.int32]
        for p in (0, 1, 2):
            got = np.sort(plan.ids[p].astype(np.int64) + offsets[p])
            np.testing.assert_array_equal(got, np.sort(ids[parts == p]))


def test_a_read_from_one_partition_asks_with_int32_local_ids(g: DistGraph) -> None:
    """The one-partition path (every ID in one server's partition) sends int32 local IDs
    too, as the plan does for reads over several, and reads the same rows."""
    t = g.ndata["feat"]
    asked: list[np.ndarray] = []
    real = t.ctx.call

    def record(part: int, call: Any) -> Any:
        asked.append(call.bufs[0])
        return real(part, call)

    t.ctx.call = record  # type: ignore[method-assign]
    try:
        n0 = int(t.policy.offsets[1])
        ids = np.random.default_rng(1).permutation(n0)[:300]
        want = np.concatenate([t[torch.from_numpy(ids[i : i + 1])].numpy() for i in range(3)])
        got = t[torch.from_numpy(ids)].numpy()
    finally:
        del t.ctx.call
    assert [a.dtype for a in asked] == [np.dtype(np.int32)] * 4
    np.testing.assert_array_equal(asked[-1], ids.astype(np.int32))
    np.testing.assert_array_equal(got[:3], want)


def test_owners_are_the_partition_search() -> None:
    from distgnn.distributed.readplan import SCAN_PARTS, owners

    rng = np.random.default_rng(3)
    for nparts in (1, 2, SCAN_PARTS, SCAN_PARTS + 3):
        offsets = np.r_[0, np.cumsum(rng.integers(0, 50, nparts))].astype(np.int64)
        offsets[-1] = max(1, offsets[-1])
        ids = rng.integers(0, offsets[-1], 2000)
        want = np.searchsorted(offsets, ids, side="right") - 1  # empty partitions too
        np.testing.assert_array_equal(owners(ids, offsets, "node", "_N"), want)
        with pytest.raises(ConfigError, match="node IDs out of range"):
            owners(np.array([int(offsets[-1])]), offsets, "node", "_N")


def test_group_is_the_stable_sort_by_partition() -> None:
    """Both ways of grouping (a scan per partition up to GROUP_SCAN_PARTS, a stable sort
    beyond) give the stable sort's order and bounds, empty partitions and IDs included."""
    from distgnn.distributed.readplan import SCAN_PARTS as GROUP_SCAN_PARTS
    from distgnn.distributed.readplan import group

    rng = np.random.default_rng(11)
    for nparts in range(1, GROUP_SCAN_PARTS + 3):
        for n in (0, 1, 7, 5000):
            parts = rng.integers(0, max(1, nparts - 1), n).astype(np.int16)  # last one empty
            order, b = group(parts, nparts)
            np.testing.assert_array_equal(order, np.argsort(parts, kind="stable"))
            np.testing.assert_array_equal(
                b, np.r_[0, np.cumsum(np.bincount(parts, minlength=nparts))]
            )
            assert order.dtype == np.int64 and b.dtype == np.int64


def test_structure_matches_input(g: DistGraph, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    orig_n, orig_e = new2orig
    old2new = np.empty_like(orig_n)
    old2new[orig_n] = np.arange(len(orig_n))
    eids = np.arange(g.num_edges())
    src, dst = g.find_edges(eids)
    np.testing.assert_array_equal(orig_n[src.numpy()], data["src"][orig_e])
    np.testing.assert_array_equal(orig_n[dst.numpy()], data["dst"][orig_e])
    indeg = np.bincount(data["dst"], minlength=g.num_nodes())
    outdeg = np.bincount(data["src"], minlength=g.num_nodes())
    np.testing.assert_array_equal(g.in_degrees().numpy(), indeg[orig_n])
    some = old2new[[0, 5, 100]]
    np.testing.assert_array_equal(g.out_degrees(some).numpy(), outdeg[[0, 5, 100]])


def test_sample_neighbors_returns_real_in_edges(g: DistGraph, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    orig_n, orig_e = new2orig
    seeds = np.arange(0, g.num_nodes(), 3)
    indeg = g.in_degrees(seeds).numpy()
    for replace in (False, True):
        s = sample_neighbors(g, torch.from_numpy(seeds), 4, replace=replace)
        # every sampled edge is a real edge, ending at a seed
        np.testing.assert_array_equal(orig_n[s.src.numpy()], data["src"][orig_e[s.eid.numpy()]])
        np.testing.assert_array_equal(orig_n[s.dst.numpy()], data["dst"][orig_e[s.eid.numpy()]])
        counts = np.bincount(np.searchsorted(seeds, s.dst.numpy()), minlength=len(seeds))
        assert set(np.unique(s.dst.numpy())) <= set(seeds.tolist())
        if replace:
            np.testing.assert_array_equal(counts, np.where(indeg > 0, 4, 0))
        else:
            np.testing.assert_array_equal(counts, np.minimum(indeg, 4))
            pairs = s.dst.numpy() * g.num_edges() + s.eid.numpy()
            assert len(np.unique(pairs)) == len(pairs)  # distinct edges per seed
    full = sample_neighbors(g, seeds, -1)
    assert len(full.eid) == indeg.sum()


def test_sample_neighbors_with_prob_never_picks_zero_weight(g: DistGraph) -> None:
    w = DistTensor((g.num_edges(),), torch.float32, "w", "zeros", "edge", ctx=g)
    heavy = np.arange(0, g.num_edges(), 2)
    w[heavy] = torch.ones(len(heavy))
    seeds = np.arange(g.num_nodes())
    for replace in (False, True):
        s = sample_neighbors(g, seeds, 2, replace=replace, prob="w")
        assert len(s.eid) > 0 and (s.eid.numpy() % 2 == 0).all()


def test_dist_tensor_create_write_read_and_release(cora_parts: str) -> None:
    with DistGraph.standalone(cora_parts) as g:
        t = DistTensor((g.num_nodes(), 3), torch.int64, "t", "zeros", ctx=g)
        ids = torch.tensor([5, 2000, 7, 5])
        t[ids] = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 2, 3]])
        assert t[torch.tensor([7, 5, 2000])].tolist() == [[7, 8, 9], [1, 2, 3], [4, 5, 6]]
        t.scatter_add_(torch.tensor([7, 7]), torch.ones(2, 3, dtype=torch.int64))
        assert t[[7]].tolist() == [[9, 10, 11]]
        # attaching with another shape is refused; attaching with the same one shares data
        with pytest.raises(ServerError, match="exists"):
            DistTensor((g.num_nodes(), 4), torch.int64, "t", ctx=g)
        t2 = DistTensor((g.num_nodes(), 3), torch.int64, "t", ctx=g)
        assert t2[[7]].tolist() == [[9, 10, 11]]
        u = DistTensor(
            (g.num_nodes(), 2), torch.float32, "u", ("uniform", {"low": 2, "high": 3}), ctx=g
        )
        vals = u[np.arange(g.num_nodes())]
        assert ((vals >= 2) & (vals < 3)).all() and vals.std() > 0
        with pytest.raises(ConfigError, match="out of range"):
            t[[g.num_nodes()]]
        # a callable init_func is called once per partition with that partition's shape
        shapes: list[tuple[int, ...]] = []

        def init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            shapes.append(tuple(shape))
            return torch.full(shape, 2.5, dtype=dtype)

        f = DistTensor((g.num_nodes(), 2), torch.float32, "f", init, ctx=g)
        assert shapes == [(n, 2) for n in np.diff(g.book.node_offsets).tolist()]
        assert (f[np.arange(g.num_nodes())] == 2.5).all()
        DistTensor((g.num_nodes(), 2), torch.float32, "f", init, ctx=g)  # attaches
        assert len(shapes) == 3
        ctx = g.ctx
    assert ctx.closed


def test_sparse_adagrad_and_adam_match_reference(g: DistGraph) -> None:
    emb = DistEmbedding(g.num_nodes(), 4, "emb", ("constant", {"value": 0.5}), ctx=g)
    opt = SparseAdagrad([emb], lr=0.1)
    ids = torch.tensor([3, 2000, 3])
    for _ in range(2):
        out = emb(ids)
        (out * torch.tensor([[1.0], [2.0], [3.0]])).sum().backward()
        opt.step()
    # reference: row 3 gets grad 1+3=4 per step, row 2000 gets 2
    ref = {}
    for row, gr in ((3, 4.0), (2000, 2.0)):
        x, s = 0.5, 0.0
        for _ in range(2):
            s += gr * gr
            x -= 0.1 * gr / (np.sqrt(s) + 1e-10)
        ref[row] = x
    got = emb.tensor[[3, 2000]].numpy()
    np.testing.assert_allclose(got[:, 0], [ref[3], ref[2000]], rtol=1e-5)
    assert emb.tensor[[4]].tolist() == [[0.5] * 4]

    adam_emb = DistEmbedding(g.num_nodes(), 2, "adam", ("constant", {"value": 0.0}), ctx=g)
    adam = SparseAdam([adam_emb], lr=0.01)
    adam_emb(torch.tensor([10])).sum().backward()
    adam.step()
    # first Adam step moves by -lr * sign(g)
    np.testing.assert_allclose(adam_emb.tensor[[10]].numpy(), [[-0.01, -0.01]], rtol=1e-4)


def test_zero_grad_between_forward_and_backward_keeps_the_rows(g: DistGraph) -> None:
    """DGL's R-GCN example calls ``emb_optimizer.zero_grad()`` after the forward pass: the
    step still updates the rows that forward pulled (DGL's zero_grad only sets a flag)."""
    emb = DistEmbedding(g.num_nodes(), 2, "zg", ("constant", {"value": 0.0}), ctx=g)
    opt = SparseAdam([emb], lr=0.01)
    out = emb(torch.tensor([7]))
    opt.zero_grad()
    out.sum().backward()
    opt.step()
    np.testing.assert_allclose(emb.tensor[[7]].numpy(), [[-0.01, -0.01]], rtol=1e-4)
    assert emb.trace == []  # consumed by the step


def test_bad_inputs_raise_clear_errors(g: DistGraph) -> None:
    with pytest.raises(ConfigError, match="fanout"):
        sample_neighbors(g, [0], "ten")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown edge type"):
        sample_neighbors(g, [0], {"a:b:c": 3})
    with pytest.raises(ConfigError, match="out of range"):
        sample_neighbors(g, [g.num_nodes()], 3)
    with pytest.raises(ConfigError, match="part_policy"):
        DistTensor((7,), torch.float32, "x", ctx=g)
    with pytest.raises(ServerError, match="prob"):
        sample_neighbors(g, [0, 1], 3, prob="missing")


def test_node_and_edge_split_over_a_dist_graph(g: DistGraph, cora_path: Path, new2orig) -> None:
    data = np.load(cora_path)
    book = g.get_partition_book()
    mask = g.ndata["train_mask"]
    shares = [node_split(mask, book, rank=r, world_size=4) for r in range(4)]
    want = np.flatnonzero(data["train_mask"][new2orig[0]])
    np.testing.assert_array_equal(np.sort(torch.cat(shares).numpy()), want)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    # rank r takes partition r % 3's nodes first, as far as its quota allows
    off = g.book.node_offsets
    for p in range(3):
        mine = [shares[r].numpy() for r in range(4) if r % 3 == p]
        own = sum(int(((s >= off[p]) & (s < off[p + 1])).sum()) for s in mine)
        avail = int(((want >= off[p]) & (want < off[p + 1])).sum())
        assert own == min(avail, sum(len(s) for s in mine))
    emask = np.arange(g.num_edges()) % 2 == 0
    eshares = [edge_split(emask, book, rank=r, world_size=2) for r in range(2)]
    np.testing.assert_array_equal(
        np.sort(torch.cat(eshares).numpy()), np.arange(0, g.num_edges(), 2)
    )
    local = node_split(mask, book, rank=1, world_size=3, force_even=False)
    assert ((local >= off[1]) & (local < off[2])).all()


def test_values_that_do_not_fit_the_dtype_are_refused_not_cast(cora_parts: str) -> None:
    """1e300 into float32 (inf) or NaN / 2**40 into int32 raise and write nothing."""
    from distgnn.errors import TensorError

    with DistGraph(part_config=cora_parts) as g:
        f = DistTensor((g.num_nodes(), 2), torch.float32, "fit_f", "zeros", ctx=g)
        i = DistTensor((g.num_nodes(),), torch.int32, "fit_i", "zeros", ctx=g)
        ids = torch.tensor([0, 5, 2000])
        with pytest.raises(TensorError, match="do not fit float32"):
            f[ids] = torch.full((3, 2), 1e300, dtype=torch.float64)
        with pytest.raises(TensorError, match="do not fit int32"):
            i[ids] = np.array([1.0, float("nan"), 2.0])
        with pytest.raises(TensorError, match="do not fit int32"):
            i[ids] = np.array([1, 2**40, 3], dtype=np.int64)
        assert torch.equal(f[ids], torch.zeros(3, 2))
        assert torch.equal(i[ids], torch.zeros(3, dtype=torch.int32))
        f[ids] = torch.full((3, 2), 0.5, dtype=torch.float64)  # fits: cast as before
        i[ids] = np.array([7, 8, 9], dtype=np.int64)
        assert torch.equal(f[ids], torch.full((3, 2), 0.5))
        assert i[ids].tolist() == [7, 8, 9]


def test_a_context_passed_as_the_graph_name_is_a_short_error(cora_parts: str) -> None:
    """DGL's first argument is the graph name; a context there gets one short line."""
    with DistGraph(part_config=cora_parts) as g, pytest.raises(ConfigError) as e:
        DistGraph(g.ctx)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "graph_name must be a str" in msg and "ctx=" in msg and len(msg) < 300
