"""The typed Cora of examples/dgl/prepare_data.py (papers and synthetic authors; cites,
writes and written-by edges), and a standalone DistGraph of it for in-process apps."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distgnn.train.config import TrainConfig

if TYPE_CHECKING:
    from distgnn.train.graph import TrainGraph

ROOT = Path(__file__).resolve().parents[2]


def typed_cora(cora_path: Path) -> dict[str, np.ndarray]:
    """The R-GCN example's graph: Cora's papers plus synthetic authors."""
    spec = importlib.util.spec_from_file_location("prep", ROOT / "examples/dgl/prepare_data.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with np.load(cora_path, allow_pickle=False) as z:
        arrays: dict[str, np.ndarray] = mod.heterogeneous({k: z[k] for k in z.files})
    return arrays


def without_author_features(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The typed Cora with featureless authors (the R-GCN apps learn an embedding)."""
    return {k: v for k, v in arrays.items() if k != "ndata/author/feat"}


@contextlib.contextmanager
def standalone_graph(arrays: dict[str, np.ndarray], out: Path) -> Iterator[TrainGraph]:
    """``arrays`` in 2 random partitions under ``out``, opened as a standalone DistGraph
    (a TrainGraph whose ``owner`` is the manifest path: inference maps IDs with it)."""
    import distgnn.distributed as dd
    from distgnn.graph.io import graph_from_arrays
    from distgnn.partition.partitioner import partition_graph
    from distgnn.train.layerwise import as_train_graph

    g = graph_from_arrays(arrays, "cora-hetero")
    partition_graph(g, 2, str(out), "cora-hetero", method="random", progress=False)
    with dd.DistGraph.standalone(str(out / "cora-hetero.json")) as dg:
        tg = as_train_graph(dg)
        tg.owner = str(out / "cora-hetero.json")
        yield tg


def checkpoint_table(ckpt_file: Path, name: str) -> np.ndarray:
    """Table ``name`` of a built-in app's checkpoint, assembled from the rows every
    trainer saved beside it (``ckpt-epoch-NNNNN.sparse/tables_RANK``)."""
    import torch

    from distgnn.distributed import rowshards

    part = torch.load(ckpt_file, weights_only=True)["sparse"]
    n, d = part["tables"][name]
    out = np.full((n, d), np.nan, dtype=np.float32)
    for r in range(part["world_size"]):
        saved = rowshards.read(str(ckpt_file.parent / part["path"] / f"tables_{r}"))
        assert saved is not None, r
        rec = saved.tables[name]
        k = rec["ids"]["shape"][0]
        ids_f = saved.file(rec["ids"], np.dtype(np.int64), (k,))
        rows_f = saved.file(rec["arrays"]["weight"], np.dtype(np.float32), (k, d))
        for ids, rows in zip(
            rowshards.stream(ids_f, 4096), rowshards.stream(rows_f, 4096), strict=True
        ):
            out[ids] = rows
    assert not np.isnan(out).any()
    return out


def rgcn_config(**kw: Any) -> TrainConfig:
    """The tests' R-GCN node classification of Cora's papers (typed_cora), small and
    deterministic; ``kw`` overrides any field."""
    base: dict[str, Any] = {
        "model": "rgcn",
        "target_ntype": "paper",
        "label": "labels",
        "epochs": 1,
        "hidden": 16,
        "fanouts": [5, 5],
        "batch_size": 32,
        "lr": 0.02,
        "dropout": 0.0,
    }
    return TrainConfig(**(base | kw)).validate()
