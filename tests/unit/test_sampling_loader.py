"""Loaders: node and edge batches, sampler processes, pickle-free messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distgnn.dataloading import DistEdgeDataLoader, DistNodeDataLoader, negative_sampler
from distgnn.errors import ConfigError, ProtocolError
from distgnn.sampling import LocalGraph, NeighborSampler, open_source, wire
from distgnn.sampling.batches import NodeBatcher
from distgnn.sampling.loader import BatchLoader, SamplerError
from distgnn.sampling.source import LocalSource


@pytest.fixture(scope="module")
def ring_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bidirected random graph with features, saved as a graph file."""
    rng = np.random.default_rng(0)
    n, m = 200, 800
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    path = tmp_path_factory.mktemp("g") / "g.npz"
    np.savez(path, src=np.r_[s, d], dst=np.r_[d, s], feat=rng.random((n, 4)).astype(np.float32))
    return path


def test_wire_roundtrip_and_rejects_garbage() -> None:
    arrays = {"a": np.arange(5), "b": np.ones((2, 3), np.float32), "c": np.array(7)}
    back = wire.decode(wire.encode(arrays))
    assert set(back) == set(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)
    with pytest.raises(ProtocolError):
        wire.decode(b"\x01")
    with pytest.raises(ProtocolError):
        wire.decode(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    with pytest.raises(ProtocolError):
        wire.encode({"o": np.array([object()], dtype=object)})


def test_node_loader_covers_seeds_once_per_epoch(ring_file: Path) -> None:
    g = LocalGraph.from_npz(str(ring_file))
    nids = np.arange(0, 200, 3)
    loader = DistNodeDataLoader(
        g, nids, NeighborSampler([3, 4]), batch_size=16, shuffle=True, seed=5
    )
    assert len(loader) == -(-nids.size // 16)
    epochs = []
    for _ in range(2):
        outs = [out.numpy() for _, out, _ in loader]
        assert np.array_equal(np.sort(np.concatenate(outs)), nids)
        epochs.append(np.concatenate(outs))
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled per epoch
    loader.set_epoch(0)
    again = np.concatenate([out.numpy() for _, out, _ in loader])
    assert np.array_equal(again, epochs[0])  # deterministic per epoch and seed


def test_edge_loader_pairs_negatives_and_exclusion(ring_file: Path) -> None:
    g = LocalGraph.from_npz(str(ring_file))
    eids = np.arange(0, 1600, 7)
    loader = DistEdgeDataLoader(
        g,
        eids,
        NeighborSampler([-1, -1]),
        batch_size=32,
        shuffle=True,
        negative_sampler=negative_sampler.Uniform(3),
        exclude="reverse",
    )
    seen = []
    for inp, pos, neg, blocks in loader:
        nodes = blocks[-1].dst_nid
        assert np.array_equal(inp.numpy(), blocks[0].src_nid)
        ps, pd = nodes[pos.src.numpy()], nodes[pos.dst.numpy()]
        ns, nd = nodes[neg.src.numpy()], nodes[neg.dst.numpy()]
        assert neg.num_edges() == 3 * pos.num_edges()
        assert np.array_equal(ns, np.repeat(ps, 3))
        assert nd.min() >= 0 and nd.max() < g.num_nodes()
        # the positive pairs are the seed edges
        seen.append(ps * 1000 + pd)
        keys = set(zip(ps.tolist(), pd.tolist(), strict=True))
        keys |= {(y, x) for x, y in keys}
        for b in blocks:
            pairs = set(zip(g.src[b.eid].tolist(), g.dst[b.eid].tolist(), strict=True))
            assert not (pairs & keys)  # seeds and reverses excluded
    # every seed edge is a positive pair exactly once per epoch
    assert np.array_equal(np.sort(np.concatenate(seen)), np.sort(g.src[eids] * 1000 + g.dst[eids]))


def test_sampler_processes_match_in_process(ring_file: Path) -> None:
    g = LocalGraph.from_npz(str(ring_file))
    src = LocalSource(g, str(ring_file))
    nids = np.arange(150)
    batcher = NodeBatcher(nids, NeighborSampler([2, 3]), 20, seed=3)
    ref = [(o.numpy(), [b.eid for b in bl]) for _, o, bl in BatchLoader(src, batcher, 0)]
    with BatchLoader(src, batcher, num_samplers=2, timeout=120) as loader:
        for _ in range(2):  # two epochs through the same processes
            got = [(o.numpy(), [b.eid for b in bl]) for _, o, bl in loader]
            assert len(got) == len(ref)
        loader.set_epoch(0)
        it = iter(loader)
        first = next(it)  # leave the epoch unfinished: the next one must drain it
        assert np.array_equal(first[1].numpy(), ref[0][0])
        loader.set_epoch(0)
        got = [(o.numpy(), [b.eid for b in bl]) for _, o, bl in loader]
        procs = list(loader._procs)
    for (o1, e1), (o2, e2) in zip(ref, got, strict=True):
        assert np.array_equal(o1, o2)
        assert all(np.array_equal(a, b) for a, b in zip(e1, e2, strict=True))
    assert procs and all(p._closed for p in procs)  # joined and closed  # type: ignore[attr-defined]


def test_sampler_process_error_is_reported(tmp_path: Path) -> None:
    g = LocalGraph(np.array([0]), np.array([1]), 2)
    src = LocalSource(g, str(tmp_path / "missing.npz"))
    batcher = NodeBatcher(np.arange(2), NeighborSampler([1]), 1)
    with (
        BatchLoader(src, batcher, num_samplers=1, timeout=120) as loader,
        pytest.raises(SamplerError, match=r"missing\.npz"),
    ):
        list(loader)


def test_loader_bad_input() -> None:
    g = LocalGraph(np.array([0]), np.array([1]), 2)
    with pytest.raises(ConfigError, match="num_samplers"):
        DistNodeDataLoader(g, [0], NeighborSampler([1]), num_samplers=1)  # not re-openable
    with pytest.raises(ConfigError, match="num_samplers"):
        BatchLoader(LocalSource(g), NodeBatcher(np.arange(2), NeighborSampler([1]), 1), -1)
    with pytest.raises(ConfigError, match="batch_size"):
        DistNodeDataLoader(g, [0], NeighborSampler([1]), batch_size=0)
    with pytest.raises(ConfigError, match="exclude"):
        DistEdgeDataLoader(g, [0], NeighborSampler([1]), exclude="both")
    with pytest.raises(ConfigError, match="kind"):
        open_source({"kind": "nothing"})


def test_killed_sampler_is_named_with_its_exit_cause(ring_file: Path) -> None:
    import os
    import signal

    g = LocalGraph.from_npz(str(ring_file))
    src = LocalSource(g, str(ring_file))
    batcher = NodeBatcher(np.arange(150), NeighborSampler([2]), 20, seed=3)
    with BatchLoader(src, batcher, num_samplers=2, timeout=120) as loader:
        assert len(list(loader)) == len(batcher)  # one good epoch
        victim = loader._procs[1]
        pid = victim.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        victim.join(30)
        with pytest.raises(SamplerError) as ei:
            list(loader)
    msg = str(ei.value)
    assert f"sampler 1 (pid {pid})" in msg and "killed by SIGKILL" in msg


def test_an_epochs_shuffled_order_is_made_once_and_batches_are_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from distgnn.sampling import batches

    seeds = np.random.default_rng(3).choice(10_000, 997, replace=False)
    b = NodeBatcher(seeds, NeighborSampler([2]), 100, seed=11)
    # the order every process derives from (seed, epoch): the permutation of all seeds
    want = {e: seeds[np.random.default_rng([11, e]).permutation(seeds.size)] for e in (0, 1)}
    made: list[int] = []
    real = batches.shuffled_positions

    def counting(seed: int, epoch: int, n: int) -> np.ndarray:
        made.append(epoch)
        return real(seed, epoch, n)

    monkeypatch.setattr(batches, "shuffled_positions", counting)
    for e in (0, 1):
        for i in (3, 0, 9, 4):  # any batch order, the last batch short
            assert np.array_equal(b.batch_seeds(e, i), want[e][i * 100 : (i + 1) * 100])
    assert made == [0, 1]  # once per epoch, not once per batch
    assert np.array_equal(b.batch_seeds(0, 2), want[0][200:300])  # back to epoch 0: made again
    assert made == [0, 1, 0]
    b.seeds = seeds[::-1].copy()  # new seeds: a new order, not the kept one
    assert np.array_equal(
        b.batch_seeds(0, 0), b.seeds[np.random.default_rng([11, 0]).permutation(997)][:100]
    )
    unshuffled = NodeBatcher(seeds, NeighborSampler([2]), 100, shuffle=False)
    assert np.array_equal(unshuffled.batch_seeds(5, 2), seeds[200:300])
