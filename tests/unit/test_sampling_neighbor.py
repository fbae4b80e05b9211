"""Multi-layer sampler vs a brute-force reference on small in-memory graphs."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

from distgnn.errors import ConfigError
from distgnn.sampling import Exclusion, LocalGraph, NeighborSampler, to_block


def random_graph(n: int = 60, m: int = 400, seed: int = 0, ntypes: int = 1) -> LocalGraph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    et = rng.integers(0, ntypes, m) if ntypes > 1 else None
    names = [f"_N:r{i}:_N" for i in range(ntypes)]
    w = rng.random(m)
    w[::3] = 0.0
    return LocalGraph(src, dst, n, etype=et, etype_names=names, edata={"w": w})


def in_edges(g: LocalGraph) -> dict[int, list[int]]:
    """Brute force: eids of the in-edges of every node, by a Python loop."""
    out: dict[int, list[int]] = defaultdict(list)
    for e, d in enumerate(g.dst.tolist()):
        out[d].append(e)
    return out


def check_blocks(g: LocalGraph, seeds: np.ndarray, inp, out, blocks) -> None:
    assert np.array_equal(out, seeds)
    assert np.array_equal(blocks[-1].dst_nid, seeds)
    assert np.array_equal(inp, blocks[0].src_nid)
    for lower, upper in itertools.pairwise(blocks):
        assert np.array_equal(lower.dst_nid, upper.src_nid)  # mapping between layers
    for b in blocks:
        assert np.array_equal(b.src_nid[: b.num_dst_nodes()], b.dst_nid)  # dst first
        assert np.unique(b.src_nid).size == b.num_src_nodes()
        # every block edge is a real edge with the right global edge ID
        assert np.array_equal(g.src[b.eid], b.src_nid[b.edge_src])
        assert np.array_equal(g.dst[b.eid], b.dst_nid[b.edge_dst])


@pytest.mark.parametrize("fanouts", [[3, 5], [2, 2, 4], [-1, 2]])
def test_without_replacement_matches_reference(fanouts: list[int]) -> None:
    g = random_graph()
    ref = in_edges(g)
    seeds = np.array([5, 0, 17, 33, 59])
    inp, out, blocks = NeighborSampler(fanouts).sample_blocks(
        g.one_hop(np.random.default_rng(1)), seeds
    )
    check_blocks(g, seeds, inp, out, blocks)
    for b, k in zip(blocks, fanouts, strict=True):
        for i, v in enumerate(b.dst_nid.tolist()):
            got = b.eid[b.edge_dst == i]
            assert np.unique(got).size == got.size  # no repeats
            assert set(got.tolist()) <= set(ref[v])
            want = len(ref[v]) if k == -1 else min(k, len(ref[v]))
            assert got.size == want


def test_with_replacement_counts() -> None:
    g = random_graph(seed=2)
    ref = in_edges(g)
    seeds = np.arange(0, 60, 4)
    inp, out, blocks = NeighborSampler([4, 6], replace=True).sample_blocks(
        g.one_hop(np.random.default_rng(3)), seeds
    )
    check_blocks(g, seeds, inp, out, blocks)
    for b, k in zip(blocks, [4, 6], strict=True):
        counts = np.bincount(b.edge_dst, minlength=b.num_dst_nodes())
        want = np.array([k if ref[v] else 0 for v in b.dst_nid.tolist()])
        assert np.array_equal(counts, want)


def test_sampling_covers_all_neighbours_over_many_draws() -> None:
    g = random_graph(n=10, m=300, seed=4)
    ref = in_edges(g)
    seen: set[int] = set()
    oh = g.one_hop(np.random.default_rng(0))
    for _ in range(200):
        seen |= set(oh(np.array([3]), 2, replace=False, prob=None, edge_dir="in").eid.tolist())
    assert seen == set(ref[3])


def test_prob_zero_weight_never_sampled() -> None:
    g = random_graph(seed=5)
    w = g.edata["w"]
    for replace in (False, True):
        oh = g.one_hop(np.random.default_rng(0))
        hop = oh(np.arange(60), 3, replace=replace, prob="w", edge_dir="in")
        assert hop.eid.size > 0
        assert np.all(w[hop.eid] > 0)


def test_hetero_per_etype_fanout() -> None:
    g = random_graph(ntypes=2, m=600, seed=6)
    seeds = np.arange(10)
    fan = {"_N:r0:_N": 1, "_N:r1:_N": 3}
    inp, out, blocks = NeighborSampler([fan]).sample_blocks(
        g.one_hop(np.random.default_rng(0)), seeds
    )
    check_blocks(g, seeds, inp, out, blocks)
    b = blocks[0]
    assert b.etype is not None and np.array_equal(b.etype, g.etype[b.eid])
    for i in range(10):
        for r, k in ((0, 1), (1, 3)):
            deg = int(np.sum((g.dst == i) & (g.etype == r)))
            assert int(np.sum((b.edge_dst == i) & (b.etype == r))) == min(k, deg)


def test_out_edges_flow_to_seeds() -> None:
    g = random_graph(seed=7)
    seeds = np.array([1, 2, 3])
    _, _, blocks = NeighborSampler([2], edge_dir="out").sample_blocks(
        g.one_hop(np.random.default_rng(0)), seeds
    )
    b = blocks[0]
    # sampled out-edges seed -> nbr; in the block the message goes nbr -> seed
    assert np.array_equal(g.src[b.eid], b.dst_nid[b.edge_dst])


def test_exclusion_by_eid_and_reverse_pair() -> None:
    # a bidirected ring: edge 2i = (i, i+1), edge 2i+1 = (i+1, i)
    n = 12
    a = np.arange(n)
    src = np.stack([a, (a + 1) % n], 1).reshape(-1)
    dst = np.stack([(a + 1) % n, a], 1).reshape(-1)
    g = LocalGraph(src, dst, n)
    seeds = np.array([0, 1])
    excl = Exclusion(eids=np.array([0]), pairs=(np.array([0, 1]), np.array([1, 0])))
    _, _, blocks = NeighborSampler([-1, -1]).sample_blocks(
        g.one_hop(np.random.default_rng(0)), seeds, excl
    )
    for b in blocks:
        assert 0 not in b.eid and 1 not in b.eid  # the seed edge and its reverse
        pairs = set(zip(g.src[b.eid].tolist(), g.dst[b.eid].tolist(), strict=True))
        assert (0, 1) not in pairs and (1, 0) not in pairs
    # without exclusion they are there
    _, _, blocks = NeighborSampler([-1]).sample_blocks(g.one_hop(np.random.default_rng(0)), seeds)
    assert {0, 1} <= set(blocks[0].eid.tolist())


def test_to_block_relabels_compactly() -> None:
    b = to_block(np.array([7, 3]), np.array([9, 3, 1, 9]), np.array([7, 7, 3, 3]), np.arange(4))
    assert b.src_nid.tolist() == [7, 3, 1, 9]
    assert b.edge_src.tolist() == [3, 1, 2, 3]
    assert b.edge_dst.tolist() == [0, 0, 1, 1]


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="fanouts"):
        NeighborSampler([])
    with pytest.raises(ConfigError, match="fanouts"):
        NeighborSampler([-2])
    with pytest.raises(ConfigError, match="edge_dir"):
        NeighborSampler([2], edge_dir="sideways")
    with pytest.raises(ConfigError, match="replace"):
        NeighborSampler([2], "in", None, None, "yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="prefetch_node_feats"):
        NeighborSampler([2], prefetch_node_feats=["feat"])
    with pytest.raises(ConfigError, match="unique"):
        to_block(np.array([1, 1]), np.array([0]), np.array([1]), np.array([0]))
    g = random_graph()
    with pytest.raises(ConfigError, match="prob"):
        g.one_hop(np.random.default_rng(0))(
            np.array([1]), 2, replace=False, prob="nope", edge_dir="in"
        )


def test_positional_arguments_follow_dgl() -> None:
    """DGL's order is (fanouts, edge_dir, prob, mask, replace): a second positional
    argument 'in' is the edge direction, never "sample with replacement"."""
    s = NeighborSampler([5, 5], "in")
    assert (s.edge_dir, s.replace, s.prob) == ("in", False, None)
    g = random_graph()
    seeds = np.arange(10)
    _, _, blocks = s.sample_blocks(g.one_hop(np.random.default_rng(0)), seeds)
    for b in blocks:  # without replacement: no edge is drawn twice for a destination
        assert np.unique(b.eid).size == b.eid.size
    out = NeighborSampler([3], "out")
    assert out.edge_dir == "out" and not out.replace
    masked = NeighborSampler([2], "in", None, "w")  # mask: the 4th positional
    assert masked.prob == "w" and not masked.replace
