"""bench/epoch_floor.py: the floor re-runs the timed epoch's own batches; the timeline."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import epoch_floor as ef
from distgnn.sampling import LocalGraph, NeighborSampler
from distgnn.sampling.batches import NodeBatcher
from distgnn.sampling.blocks import blocks_to_arrays
from distgnn.sampling.loader import BatchLoader
from distgnn.sampling.source import LocalSource
from distgnn.train.loop import padded


@pytest.fixture()
def source() -> LocalSource:
    rng = np.random.default_rng(0)
    n, m = 300, 2400
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    return LocalSource(LocalGraph(np.r_[s, d], np.r_[d, s], n))


def record_epoch(loader: BatchLoader, steps: int) -> tuple[list[ef.StepBatch], list[tuple]]:
    """An epoch as the bench's trainer records it: every step's batch identified by its
    epoch and index (a padded step repeats the last), and the batches themselves."""
    epoch = loader.epoch
    indexed = ((i, b) for i, b in enumerate(loader))
    rec, seen = [], []
    for (i, (inp, out, blocks)), w in padded(indexed, steps):
        rec.append(ef.StepBatch(epoch, i, w, *ef.fingerprint(inp)))
        seen.append((inp, out, blocks))
    return rec, seen


def test_the_floor_remakes_exactly_the_batches_the_epoch_trained_on(source: LocalSource) -> None:
    batcher = NodeBatcher(np.arange(0, 300, 2), NeighborSampler([4, 3]), 16, seed=7)
    loader = BatchLoader(source, batcher)
    next(iter(loader))  # epoch 0 partly used (a warm-up), as in the bench
    loader.set_epoch(3)
    steps = len(loader) + 2  # two padded steps: the trainer's last batch again, weight 0
    rec, seen = record_epoch(loader, steps)
    assert len(rec) == steps and [r.epoch for r in rec] == [3] * steps
    assert [r.index for r in rec][-3:] == [len(loader) - 1] * 3
    assert [r.weight for r in rec][-2:] == [0.0, 0.0]
    for step, (inp, out, blocks) in zip(rec, seen, strict=True):
        again = batcher.decode(ef.remake(batcher, source, step))
        assert np.array_equal(again[0].numpy(), inp.numpy())
        assert np.array_equal(again[1].numpy(), out.numpy())  # the same seeds
        a, b = blocks_to_arrays(again[2]), blocks_to_arrays(blocks)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_batch_that_is_not_the_epochs_is_refused(source: LocalSource) -> None:
    batcher = NodeBatcher(np.arange(0, 300, 2), NeighborSampler([4, 3]), 16, seed=7)
    loader = BatchLoader(source, batcher)
    loader.set_epoch(1)
    rec, _ = record_epoch(loader, len(loader))
    other_seed = NodeBatcher(np.arange(0, 300, 2), NeighborSampler([4, 3]), 16, seed=8)
    with pytest.raises(ef.FloorMismatch, match="batch 0 of epoch 1"):
        ef.remake(other_seed, source, rec[0])
    wrong_epoch = ef.StepBatch(2, 0, 1.0, rec[0].inputs, rec[0].checksum)
    with pytest.raises(ef.FloorMismatch):
        ef.remake(batcher, source, wrong_epoch)


def test_timed_compute_times_every_step_after_its_untimed_rebuild() -> None:
    steps = [ef.StepBatch(1, i, 1.0, 0, 0) for i in range(3)]
    calls: list[str] = []
    walls, cpus, firsts = ef.timed_compute(
        steps,
        lambda s: calls.append(f"make {s.index}") or s.index,
        lambda b: calls.append(f"compute {b}"),
        lambda: calls.append("barrier"),
        warmup=2,
        passes=2,
        again=lambda b: calls.append(f"again {b}") or b,
    )
    assert len(walls) == len(cpus) == len(firsts) == 3
    assert all(w <= f for w, f in zip(walls, firsts, strict=True))  # the least of the passes
    assert calls == [
        "make 0", "compute 0", "compute 0", "again 0",
        "barrier", "compute 0", "again 0", "barrier", "compute 0",
        "make 1", "barrier", "compute 1", "again 1", "barrier", "compute 1",
        "make 2", "barrier", "compute 2", "again 2", "barrier", "compute 2",
    ]  # fmt: skip
    calls.clear()  # without `again`, each pass makes the batch again
    ef.timed_compute(steps[:1], lambda s: calls.append("make") or 0, calls.append, passes=2)
    assert calls == ["make", 0, "make", 0, "make", 0]


def test_the_timeline_splits_the_epoch_and_finds_the_slower_rank() -> None:
    # rank 0: first batch at 0.1 s, steps end at 0.4, 0.7, 1.0; rank 1 a little later
    r0 = ef.timeline_floats(
        [0.1, 1.02, 1.10], [[0.4, 0.1, 0.2], [0.7, 0.05, 0.2], [1.0, 0.05, 0.2]]
    )
    r1 = ef.timeline_floats(
        [0.12, 1.05, 1.10], [[0.42, 0.1, 0.25], [0.72, 0.1, 0.2], [1.04, 0.05, 0.3]]
    )
    t = ef.timeline([r0, r1])
    assert t["steps"] == 3
    assert t["epoch_s"] == pytest.approx(1.10)
    assert t["first_batch_s"] == pytest.approx(0.12)
    assert t["step0_s"] == pytest.approx(0.42)
    assert t["last_step_s"] == pytest.approx(1.04 - 0.72)
    assert t["tail_s"] == pytest.approx(1.10 - 1.04)
    assert t["loop_end_by_rank_s"] == pytest.approx([0.02, 0.01])
    # per step the slower rank's work less the faster's: 0.05 + 0.05 + 0.10
    assert t["imbalance_s"] == pytest.approx(0.20)
    assert t["slower_rank_steps"] == [0, 3]
    assert t["compute_by_rank_s"] == pytest.approx([0.6, 0.75])
    lines = ef.timeline_lines([t, t])
    assert "first batch 120" in lines[0] and "imbalance" in lines[2]
