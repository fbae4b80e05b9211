"""Where each row of a multi-partition ``DistTensor`` read lands.

A read of IDs owned by several partitions becomes one request per partition (or one
local gather, co-located). :func:`plan_read` decides, per partition, the local row IDs
to ask for and the destinations their rows land in, in order: slices of the output
itself where the IDs come in long runs of one partition, else a scratch array whose
rows are scattered to their positions afterwards (:meth:`ReadPlan.scatter_rows`).

Sampled input nodes are the seeds followed by each hop's new nodes in ascending ID
order, and partitions own contiguous ID ranges: a step's 270k IDs over 2 partitions
are ~10 runs, so almost every row is received (or gathered) straight into its final
position and the plan costs a few scans of the IDs, not a sort (a step's reads: 1.6-1.9
vs 3.5-4.0 ms of the trainer's CPU outside the gathers and receives, measured). Random
IDs (many short runs) go through the scratch array, grouped by partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from distgnn.errors import IDOutOfRange

MIN_DIRECT_RUN = 64
"""Rows of one partition in a row at least this long land in place."""
MAX_SEGMENTS = 8192
"""More long runs than this (a receive or gather each): every row through the scratch
array. Random IDs have none: they go through it because under half the rows are in long
runs."""
SCAN_PARTS = 4
"""Up to this many partitions, IDs are assigned by comparisons and grouped by a scan
per partition (272k IDs in 2 partitions: 0.5 vs 2.0 ms for a stable sort)."""


INT32_ROWS = 2**31 - 1
"""Partitions of up to this many rows are read with int32 local IDs."""


@dataclass
class ReadPlan:
    """Per partition: local row IDs and the destinations their rows fill, in order.

    After every destination is filled, :meth:`scatter_rows` moves the scratch rows to
    positions ``scatter`` of the output (nothing when every row landed in place)."""

    ids: dict[int, np.ndarray] = field(default_factory=dict)
    dests: dict[int, list[np.ndarray]] = field(default_factory=dict)
    scatter: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    scratch: np.ndarray | None = None

    def scatter_rows(self, out: np.ndarray) -> None:
        """``out[scatter] = scratch`` (torch's row copy: several times NumPy's speed)."""
        if self.scratch is None or not self.scatter.size:
            return
        dest = torch.from_numpy(out.reshape(len(out), -1))
        src = torch.from_numpy(self.scratch.reshape(len(self.scratch), -1))
        dest.index_copy_(0, torch.from_numpy(self.scatter), src)


def owners(ids: np.ndarray, offsets: np.ndarray, kind: str, type_str: str) -> np.ndarray:
    """The partition owning each ID (partition p owns ``[offsets[p], offsets[p+1])``), as
    int8 up to ``SCAN_PARTS`` partitions, else int32; ConfigError naming the ``kind``
    and type for IDs outside ``[0, offsets[-1])``."""
    n = int(offsets[-1])
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise IDOutOfRange(f"{kind} IDs out of range [0, {n}) for {type_str}")
    nparts = len(offsets) - 1
    if nparts <= SCAN_PARTS:
        parts = np.zeros(ids.shape, np.int8)
        for o in offsets[1:-1].tolist():
            parts += ids >= o  # bool into int8: adds 0 or 1
        return parts
    return (np.searchsorted(offsets, ids, side="right") - 1).astype(np.int32)


def group(parts: np.ndarray, nparts: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): ``order`` sorts by partition (stable: positions ascending within
    a partition); partition p is ``order[b[p]:b[p+1]]``."""
    if nparts <= SCAN_PARTS:
        idx = [np.flatnonzero(parts == p) for p in range(nparts)]
        counts = np.array([len(i) for i in idx], dtype=np.int64)
        order = np.concatenate(idx) if idx else np.empty(0, np.int64)
    else:
        order = np.argsort(parts, kind="stable")
        counts = np.bincount(parts, minlength=nparts)
    return order, np.concatenate([[0], np.cumsum(counts)])


def plan_read(ids: np.ndarray, parts: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> ReadPlan:
    """The plan for reading global ``ids`` (owners ``parts``) into ``out``. Rows marked
    with the extra partition ``len(offsets) - 1`` are left out: their positions of
    ``out`` are not written (and do not keep the other rows from their place: a
    co-located trainer's cached rows of the other partition leave its own partition's
    long runs in place)."""
    n = parts.size
    nparts = len(offsets) - 1
    starts = np.concatenate([[0], np.flatnonzero(parts[1:] != parts[:-1]) + 1])
    lens = np.diff(np.append(starts, n))
    rp = parts[starts]
    asked = rp != nparts
    long = (lens >= MIN_DIRECT_RUN) & asked
    nlong = int(np.count_nonzero(long))
    if nlong > MAX_SEGMENTS:
        return _grouped(ids, parts, offsets, out)
    in_place = int(lens[long].sum())
    rows = int(lens[asked].sum())
    if in_place * 2 < rows:
        return _grouped(ids, parts, offsets, out)
    plan = ReadPlan()
    chunks: dict[int, list[np.ndarray]] = {}
    at_long = np.flatnonzero(long)
    for s, m, p in zip(
        starts[at_long].tolist(), lens[at_long].tolist(), rp[at_long].tolist(), strict=True
    ):
        chunks.setdefault(p, []).append(ids[s : s + m])
        plan.dests.setdefault(p, []).append(out[s : s + m])
    if in_place < rows:  # the short runs' rows, grouped by partition, through the scratch
        pos = np.flatnonzero(np.repeat(~long & asked, lens))
        sp = parts[pos]
        mine = [(p, pos[sp == p]) for p in np.unique(sp).tolist()]
        plan.scatter = np.concatenate([m for _, m in mine])
        plan.scratch = np.empty((plan.scatter.size, *out.shape[1:]), out.dtype)
        at = 0
        for p, m in mine:
            chunks.setdefault(p, []).append(ids[m])
            plan.dests.setdefault(p, []).append(plan.scratch[at : at + m.size])
            at += m.size
    for p, c in chunks.items():
        plan.ids[p] = local_ids(c, offsets, p)
    return plan


def local_ids(chunks: list[np.ndarray], offsets: np.ndarray, p: int) -> np.ndarray:
    """Partition ``p``'s global IDs ``chunks`` (in order) as local row IDs, in one pass:
    int32 when the partition's rows fit (half the bytes of a PULL request; the servers
    take any integer IDs and the local gather int32 ones), else int64."""
    rows = int(offsets[p + 1] - offsets[p])
    out = np.empty(sum(len(c) for c in chunks), np.int32 if rows <= INT32_ROWS else np.int64)
    at = 0
    for c in chunks:
        np.subtract(c, offsets[p], out=out[at : at + len(c)], casting="unsafe")
        at += len(c)
    return out


def _grouped(ids: np.ndarray, parts: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> ReadPlan:
    """Every row through the scratch array, grouped by partition (skipped rows last)."""
    nparts = len(offsets) - 1
    skipped = int(parts.max(initial=0)) == nparts
    order, b = group(parts, nparts + skipped)
    keep = order[: b[nparts]]
    scratch = np.empty((keep.size, *out.shape[1:]), out.dtype)
    plan = ReadPlan(scatter=keep, scratch=scratch)
    for p in range(nparts):
        if b[p + 1] > b[p]:
            plan.ids[p] = local_ids([ids[order[b[p] : b[p + 1]]]], offsets, p)
            plan.dests[p] = [scratch[b[p] : b[p + 1]]]
    return plan
