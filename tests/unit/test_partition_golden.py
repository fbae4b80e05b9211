"""Partition files stay byte-identical across pipeline changes (format compatibility).

The digests cover every file's sha256 and size in every partition plus the manifest's
offsets and edge cut, for the seeded ``random`` method (independent of the METIS build):
they were computed with the pipeline before its memory rework (in-memory feature gathers,
no streaming), so relabelling, the local CSC, halos and the streamed writers must still
produce exactly those bytes, from in-memory arrays and from memory-mapped input files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from test_partition_roundtrip import hetero_arrays

from distgnn.graph.io import graph_from_arrays, load_graph
from distgnn.partition.manifest import Manifest
from distgnn.partition.partitioner import partition_graph

GOLDEN = {
    ("homo", 1): "363f1b81cc7b09d4a987c4eca50bb2eea8c1ccfab522ad47417897638925ea41",
    ("homo", 2): "eb3570f8ea64de8fc344173b32f132d552b54706efdff6b9c776e2b2b1efb4ee",
    ("hetero", 1): "f529eb368ed2844cba8068c12692d690a7bdc576fc9948c367ac320be0e80c4d",
    ("hetero", 2): "bd4cbf76e4ee4b488b3510af2694620f7a844cbf4f692c535083970b5dfdf2e4",
}


def homo_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    n, e = 500, 4000
    return {
        "src": rng.integers(0, n, e),
        "dst": rng.integers(0, n, e),
        "num_nodes": np.int64(n),
        "feat": rng.random((n, 6), dtype=np.float32),
        "label": rng.integers(0, 7, n),
        "train_mask": rng.random(n) < 0.2,
        "edata/w": rng.random(e, dtype=np.float32),
    }


def digest(m: Manifest) -> str:
    h = hashlib.sha256()
    for p in m.parts:
        for rel, fi in sorted(p.files.items()):
            h.update(f"{p.part_id}/{rel}:{fi.sha256}:{fi.bytes}\n".encode())
    offsets = (m.node_offsets, m.edge_offsets, m.ntype_offsets, m.etype_offsets, m.edge_cut)
    h.update(repr(offsets).encode())
    return h.hexdigest()


@pytest.mark.parametrize(("kind", "hops"), sorted(GOLDEN))
@pytest.mark.parametrize("mapped", [False, True])
def test_partition_files_are_byte_identical(
    tmp_path: Path, kind: str, hops: int, mapped: bool
) -> None:
    arrays = homo_arrays() if kind == "homo" else hetero_arrays()
    if mapped:  # a folder of .npy files: loaded memory-mapped, features streamed from it
        folder = tmp_path / "in"
        for key, a in arrays.items():
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
            np.save(folder / f"{key}.npy", a)
        g = load_graph(str(folder))
        assert any(isinstance(a, np.memmap) for a in g.arrays.values())
    else:
        g = graph_from_arrays(arrays)
    k = 3 if kind == "homo" else 2
    m = partition_graph(
        g, k, str(tmp_path / "out"), "g", method="random", balance_train=True,
        halo_hops=hops, progress=False,
    )  # fmt: skip
    assert digest(m) == GOLDEN[(kind, hops)]
