"""Edge sampling before METIS on dense graphs.

METIS's time and memory grow with the adjacency it coarsens, and on dense community
graphs its levels hardly shrink (every level is kept until projection). A uniform random
sample of the input edges keeps every cut's expected size in proportion (a cut of
``c`` input edges keeps ``keep * c`` in expectation, with a relative spread of
``1 / sqrt(keep * c)``: tiny for the cuts that matter), so METIS on the sample finds a
partition close to the full graph's best; :func:`~distgnn.partition.refine.refine_boundary`
then moves boundary nodes on the full graph to recover the rest of the cut.

Only graphs with at least :data:`MIN_DEGREE` input edges per node (counting both ends)
and :data:`MIN_EDGES` edges are sampled, down to :data:`TARGET_DEGREE` per node; sparser
or smaller graphs go to METIS whole (``metis-full`` always does).
"""

from __future__ import annotations

import numpy as np

TARGET_DEGREE = 8.0  # sampled input edge ends per node
MIN_DEGREE = 16.0  # sample only graphs at least this dense (input edge ends per node)
MIN_EDGES = 1 << 18  # smaller graphs: METIS is fast anyway
_BLOCK = 1 << 22  # edges per sampling block (bounds the temporaries)


def keep_fraction(num_nodes: int, num_edges: int) -> float:
    """The fraction of input edges METIS gets: 1.0 (all) unless the graph is dense."""
    if num_nodes == 0 or num_edges < MIN_EDGES:
        return 1.0
    degree = 2.0 * num_edges / num_nodes
    return 1.0 if degree < MIN_DEGREE else TARGET_DEGREE / degree


def sample_edges(
    src: np.ndarray, dst: np.ndarray, keep: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded uniform sample of about ``keep`` of the edges (each kept independently),
    in input order; read block by block, so a memory-mapped input is streamed."""
    e = int(src.shape[0])
    if keep >= 1.0:
        return np.asarray(src), np.asarray(dst)
    rng = np.random.default_rng(seed)
    threshold = int(keep * 65536)
    out_s: list[np.ndarray] = []
    out_d: list[np.ndarray] = []
    for lo in range(0, e, _BLOCK):
        hi = min(e, lo + _BLOCK)
        pick = np.flatnonzero(rng.integers(0, 65536, hi - lo, dtype=np.uint16) < threshold)
        out_s.append(np.take(src[lo:hi], pick))
        out_d.append(np.take(dst[lo:hi], pick))
    if not out_s:
        return np.asarray(src[:0]), np.asarray(dst[:0])
    return np.concatenate(out_s), np.concatenate(out_d)
