"""The compute floor of a timed epoch, and where the epoch's time goes beyond its steps.

**The floor** (issue 17): forward + backward + optimizer step of the same sampled
batches the timed epoch trained on, all of them, measured in isolation with one thread.
Holding the batches during the epoch would slow it (their ~0.1 GB of features each keep
memory from the allocator: the timed steps page-fault fresh memory), so only what
identifies a batch is kept (:class:`StepBatch`: its epoch and index, which determine it,
with a fingerprint of its input node IDs), and after the epoch each is made again from
them (:func:`remake`, untimed; a batch depends only on ``(seed, epoch, index)``), its
features read (untimed) and only its forward + backward + step timed.

**The timeline** (:func:`timeline`): per rank and epoch, the time from the epoch's start
to the first batch in hand, each step's end, make time (sampling + pull) and compute
time, the end of the loop and of the epoch's closing barrier; summarised over ranks
(the slower rank sets each DDP step's pace).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


class FloorMismatch(RuntimeError):
    """A re-made batch is not the batch the epoch trained on."""


@dataclasses.dataclass(frozen=True)
class StepBatch:
    """What one timed step trained on: batch ``index`` of ``epoch`` (with ``weight`` 0 a
    padded repeat of the trainer's last batch), and its input nodes' count and ID sum."""

    epoch: int
    index: int
    weight: float
    inputs: int
    checksum: int


def fingerprint(input_nodes: Any) -> tuple[int, int]:
    """The count and the sum of a batch's input node IDs (a tensor or an array; ~0.1 ms
    for 270k IDs)."""
    return int(input_nodes.numel() if hasattr(input_nodes, "numel") else input_nodes.size), int(
        input_nodes.sum()
    )


def remake(batcher: Any, source: Any, step: StepBatch) -> dict[str, Any]:
    """Batch ``step.index`` of ``step.epoch`` made again (its arrays, as a sampler sends
    them: ``batcher.decode`` gives the batch the loader yields); :class:`FloorMismatch`
    unless its input nodes are the ones the epoch had."""
    arrays: dict[str, Any] = batcher.make(source, step.epoch, step.index)
    got = fingerprint(arrays["input_nodes"])
    if got != (step.inputs, step.checksum):
        raise FloorMismatch(
            f"batch {step.index} of epoch {step.epoch}: input nodes (count, sum) {got}, "
            f"the epoch trained on {(step.inputs, step.checksum)}"
        )
    return arrays


def timed_compute(
    steps: Sequence[StepBatch],
    rebuild: Callable[[StepBatch], Any],
    compute: Callable[[Any], None],
    before_each: Callable[[], None] | None = None,
    warmup: int = 1,
    passes: int = 1,
    again: Callable[[Any], Any] | None = None,
    reused: list[float] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """Per step, the wall seconds of ``compute`` on its batch (``rebuild(step)``: made
    again with its features read, untimed) and its thread-CPU seconds: the least of
    ``passes`` computes, each on the batch as the epoch had it (``again(batch)``: its
    blocks decoded again, without the CSRs a forward builds and keeps; by default made
    again), and the first pass's walls alone. The first batch is first computed
    ``warmup`` times untimed (the heap and the kernels as after the epoch's warm-up
    steps). ``before_each``: called untimed right before each timed compute (a barrier,
    so every rank computes at once). ``reused``: also one more compute of each batch as
    the last pass left it (its blocks' CSRs built and kept, as a batch re-run without
    being made again has them), its wall appended there."""

    def fresh(step: StepBatch, batch: Any) -> Any:
        return again(batch) if again is not None else rebuild(step)

    walls: list[float] = []
    cpus: list[float] = []
    firsts: list[float] = []
    for i, step in enumerate(steps):
        batch = rebuild(step)
        if i == 0 and warmup:
            for _ in range(warmup):
                compute(batch)
            batch = fresh(step, batch)
        best_w = best_c = float("inf")
        for p in range(max(1, passes)):
            if p:
                batch = fresh(step, batch)
            if before_each is not None:
                before_each()
            t0, c0 = time.perf_counter(), time.thread_time()
            compute(batch)
            w, c = time.perf_counter() - t0, time.thread_time() - c0
            if p == 0:
                firsts.append(w)
            best_w, best_c = min(best_w, w), min(best_c, c)
        walls.append(best_w)
        cpus.append(best_c)
        if reused is not None:
            if before_each is not None:
                before_each()
            t0 = time.perf_counter()
            compute(batch)
            reused.append(time.perf_counter() - t0)
        del batch
    return walls, cpus, firsts


# -------------------------------------------------------------------- the timeline
TIMELINE_HEAD = ("first_batch_s", "loop_end_s", "end_s")
"""Per rank and epoch, seconds from the epoch's start (after the barrier every rank
leaves together): the first batch in hand, the step loop done (the loader closed), the
closing barrier passed."""
STEP_FIELDS = ("end_s", "make_s", "compute_s")
"""Per step: its end (from the epoch's start), the making of its batch (sampling + feature
pull, wherever it ran), its forward + backward + optimizer step."""


def timeline_floats(head: Sequence[float], steps: Sequence[Sequence[float]]) -> list[float]:
    """One rank's epoch as a flat float list (every rank's has the same length: DDP
    trainers run the same number of steps)."""
    out = [float(v) for v in head]
    for s in steps:
        out += [float(v) for v in s]
    return out


def timeline(ranks: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Where one epoch's time went, from every rank's :func:`timeline_floats`: the epoch
    (the slowest rank's end), its start to the first batch (slowest rank), the steps, the
    last step's end to the epoch's end, step 0's and the last step's length against the
    median step, and the imbalance: per step the slower rank's work (make + compute) less
    the faster's, summed (DDP syncs every step, so the slower rank sets its pace)."""
    k, f = len(TIMELINE_HEAD), len(STEP_FIELDS)
    per: list[dict[str, Any]] = []
    for vals in ranks:
        head = dict(zip(TIMELINE_HEAD, vals[:k], strict=True))
        body = vals[k:]
        steps = [
            dict(zip(STEP_FIELDS, body[i : i + f], strict=True)) for i in range(0, len(body), f)
        ]
        per.append({**head, "steps": steps})
    n = min(len(r["steps"]) for r in per)
    if n == 0:
        return {"steps": 0}
    ends = [max(r["steps"][i]["end_s"] for r in per) for i in range(n)]
    lengths = [ends[0]] + [ends[i] - ends[i - 1] for i in range(1, n)]
    work = [[r["steps"][i]["make_s"] + r["steps"][i]["compute_s"] for r in per] for i in range(n)]
    med = statistics.median(lengths[1:]) if n > 1 else lengths[0]
    epoch = max(r["end_s"] for r in per)
    return {
        "steps": n,
        "epoch_s": epoch,
        "first_batch_s": max(r["first_batch_s"] for r in per),
        "first_batch_by_rank_s": [r["first_batch_s"] for r in per],
        "step0_s": lengths[0],
        "median_step_s": med,
        "last_step_s": lengths[-1],
        "steps_s": ends[-1],
        "after_first_s": ends[-1] - max(r["first_batch_s"] for r in per),
        "tail_s": epoch - ends[-1],
        "loop_end_by_rank_s": [r["loop_end_s"] - r["steps"][n - 1]["end_s"] for r in per],
        "beyond_median_s": epoch - n * med,
        "imbalance_s": sum(max(w) - min(w) for w in work),
        "make_by_rank_s": [sum(r["steps"][i]["make_s"] for i in range(n)) for r in per],
        "compute_by_rank_s": [sum(r["steps"][i]["compute_s"] for i in range(n)) for r in per],
        "slower_rank_steps": [sum(1 for w in work if w[r] == max(w)) for r in range(len(per))],
        "step_lengths_s": lengths,
        "make_s": [[r["steps"][i]["make_s"] for i in range(n)] for r in per],
        "compute_s": [[r["steps"][i]["compute_s"] for i in range(n)] for r in per],
    }


def timeline_lines(tls: Sequence[dict[str, Any]], indent: str = "  ") -> list[str]:
    """Medians over runs of :func:`timeline`'s figures, as text (ms)."""
    tls = [t for t in tls if t.get("steps")]
    if not tls:
        return []

    def ms(key: str, i: int | None = None) -> str:
        vals = [t[key] if i is None else t[key][i] for t in tls]
        return f"{1e3 * statistics.median(vals):.0f}"

    ranks = range(len(tls[0]["first_batch_by_rank_s"]))
    return [
        f"{indent}epoch {ms('epoch_s')} ms = start -> first batch {ms('first_batch_s')} "
        f"(by rank: {', '.join(ms('first_batch_by_rank_s', r) for r in ranks)}) + "
        f"first batch -> last step's end {ms('after_first_s')} + last step's end -> epoch "
        f"end {ms('tail_s')} (last step's end -> loop closed, by rank: "
        + ", ".join(ms("loop_end_by_rank_s", r) for r in ranks)
        + ")",
        f"{indent}{tls[0]['steps']} steps: step 0 (first batch included) {ms('step0_s')}, "
        f"median {ms('median_step_s')}, last {ms('last_step_s')}; epoch - steps x median "
        f"{ms('beyond_median_s')}",
        f"{indent}per rank, summed over the steps: make (sampling + pull) "
        + ", ".join(ms("make_by_rank_s", r) for r in ranks)
        + "; compute "
        + ", ".join(ms("compute_by_rank_s", r) for r in ranks)
        + f"; imbalance (slower rank's work - faster's, summed) {ms('imbalance_s')}; "
        "steps where each rank was the slower: "
        + ", ".join(
            f"{statistics.median([t['slower_rank_steps'][r] for t in tls]):.0f}" for r in ranks
        ),
    ]
