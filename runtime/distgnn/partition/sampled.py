"""``method: metis``: METIS on an edge sample of a dense graph, refined on every edge.

:func:`sampled_metis` samples the edges (:mod:`distgnn.partition.sparsify`; sparse or
small graphs go to METIS whole), partitions the sample with METIS, checks that the sample
represented the graph, for up to :data:`MAX_GROUPED_PARTS` parts regroups its clusters on
the full graph (:mod:`distgnn.partition.regroup`), and refines the partition on the full
graph (:mod:`distgnn.partition.refine`). METIS bisects the sample recursively
(``METIS_PartGraphRecursive``; two parts: one multilevel bisection, where
``METIS_PartGraphKway`` bisects its coarsest graph several times and refines k-way): up
to :data:`MAX_GROUPED_PARTS` parts, after the regrouping and the refinement the cut is the
same or lower (benchmark graphs) in about half METIS's time; more parts (no regrouping),
refined, it cuts less than k-way. From :data:`MANY_PARTS` parts (an even number) the two
halves below the top bisection are bisected at once (:mod:`distgnn.partition.bisect`),
and METIS refines each level with one pass.

The check: METIS fits its partition to the sample, so the fraction of *all* edges cut is
a little above the fraction of sampled edges it cut where the sample shows the graph's
structure (up to 1.12x on dense community graphs, 1.2x on the benchmark graphs), and far
above where the sample is too sparse to show it (1.6-1.9x on graphs whose communities keep
only 30-50 % of the edges: there METIS on the sample and refinement cut 5-30 % more than
METIS on every edge). Above :data:`OVERFIT` the sample's partition is dropped and METIS
runs on every edge.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from distgnn.log import kv, step
from distgnn.partition.assign import metis_assign, metis_run
from distgnn.partition.refine import refine_boundary
from distgnn.partition.regroup import (
    CLUSTERS,
    Clusters,
    find_clusters,
    regroup,
    release_freed,
)
from distgnn.partition.sparsify import keep_fraction

log = logging.getLogger("distgnn.partition")

MAX_GROUPED_PARTS = CLUSTERS // 2  # more parts: no regrouping
MANY_PARTS = 8  # from this many parts: both halves at once, one METIS refinement pass
OVERFIT = 1.4  # all-edge cut fraction / sample cut fraction above which the sample fails
MIN_CUT = 1e-3  # a cut below this fraction of all edges passes whatever the ratio


def count_cut(parts: np.ndarray, src: np.ndarray, dst: np.ndarray) -> int:
    """Input edges whose ends are in different parts (partitions gathered as int16)."""
    small = parts.astype(np.int16 if int(parts.max(initial=0)) < 2**15 else np.int64)
    return int(np.count_nonzero(small[src] != small[dst]))


def representative(cut_all: int, edges_all: int, cut_sample: int, edges_sample: int) -> bool:
    """Whether a partition of an edge sample cut all edges about as it cut the sample."""
    if edges_all == 0 or cut_all <= MIN_CUT * edges_all:
        return True
    return cut_all * max(edges_sample, 1) <= OVERFIT * cut_sample * edges_all


def sampled_metis(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    num_parts: int,
    vweights: np.ndarray | None,
    group: np.ndarray | None,
    *,
    seed: int = 0,
    on_start: Callable[[], object] | None = None,
) -> np.ndarray:
    """The node partition (see the module docstring); ``group``: nodes balanced apart
    (training nodes), kept within their bound by the refinement."""
    e = int(src.shape[0])
    keep = keep_fraction(n, e)
    if keep >= 1.0 or num_parts == 1:
        return metis_assign(src, dst, n, num_parts, vweights=vweights, seed=seed, on_start=on_start)
    # the clusters' grouping: up to CLUSTERS / 2 parts (at least two clusters a part)
    grouped = num_parts <= MAX_GROUPED_PARTS and n >= 2 * CLUSTERS
    with ThreadPoolExecutor(1, thread_name_prefix="clusters") as pool:
        # the clusters for the regrouping need no partition: they are found on another
        # core while the sample is drawn and METIS bisects it (METIS releases the GIL);
        # their own METIS call runs before that one (METIS's random state is shared)
        core_done = threading.Event()
        # the halves below the top bisection take both cores (distgnn.partition.bisect);
        # with 4 parts the cluster step still has the other core then: no gain
        halves = num_parts >= MANY_PARTS and num_parts % 2 == 0
        clusters = (
            pool.submit(_clusters, src, dst, n, vweights, group, seed, core_done)
            if grouped
            else None
        )

        def started() -> None:
            if clusters is None:
                if on_start is not None:
                    on_start()
                return
            core_done.wait()
            # ``on_start`` (the input fingerprint) gets whichever core frees first: the
            # cluster step's or METIS's (called again below), not a third thread beside both;
            # where METIS bisects both halves at once, once METIS is done (during the
            # regrouping and refinement, one core's work)
            if on_start is not None and not halves:
                clusters.add_done_callback(lambda _: on_start())

        # recursive bisection (two parts: one multilevel bisection), the two halves
        # below the top bisection at once (distgnn.partition.bisect): up to 8 parts in
        # about half k-way's time (k-way bisects its coarsest graph several times), and
        # after the regrouping and the refinement it cuts as k-way does, or less; more
        # parts (no regrouping): refined, it cuts less than k-way
        run = metis_run(
            src,
            dst,
            n,
            num_parts,
            vweights=vweights,
            seed=seed,
            on_start=started,
            keep=keep,
            recursive=True,
            # many parts: METIS's own refinement passes are a fifth of its time, and the
            # regrouping and the refinement on every edge follow (same cut, benchmark graphs)
            niter=1 if num_parts >= MANY_PARTS else None,
            halves=halves,
        )
        if on_start is not None:
            on_start()  # METIS is done: if the cluster step is not, its core frees later
        # METIS's freed levels: back to the system (the cluster thread's frees raise
        # glibc's mmap threshold, so METIS's blocks came from the heap, which keeps them)
        release_freed()
        cut_all = count_cut(run.parts, src, dst)
        if not representative(cut_all, e, run.cut, run.edges):
            log.warning(
                "the edge sample does not show this graph's structure: METIS on every edge",
                extra=kv(
                    keep=round(keep, 4),
                    cut_sample=round(run.cut / max(run.edges, 1), 5),
                    cut_all=round(cut_all / e, 5),
                ),
            )
            if clusters is not None:
                clusters.cancel()
            return metis_assign(src, dst, n, num_parts, vweights=vweights, seed=seed)
        parts = run.parts
        if clusters is not None:  # which clusters go together: chosen on every edge
            with step("regroup", log):
                found = clusters.result()
                parts = regroup(
                    parts, src, dst, found, vweights, group, cut=cut_all, num_parts=num_parts
                ).parts
    with step("refine", log, parts=num_parts):
        parts = refine_boundary(parts, src, dst, num_parts, vweights, group).parts
    release_freed()  # relabelling, the next peak, starts from a trimmed heap
    return parts


def _clusters(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    vweights: np.ndarray | None,
    group: np.ndarray | None,
    seed: int,
    core_done: threading.Event,
) -> Clusters:
    try:
        with step("clusters", log, clusters=CLUSTERS):
            return find_clusters(src, dst, n, vweights, group, seed=seed, core_done=core_done.set)
    finally:
        core_done.set()  # also when it failed: METIS is never kept waiting
