"""A DistGNNJob whose ``spec.graph.source.url`` is a chunked graph's metadata.json (DGL's
chunked graph format), run in local mode: partitioned by the same code as ``distgnn
partition``, served and trained to Cora's usual accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_local_run import run, write_manifest
from tests.support.chunked import write_chunked


def test_job_on_a_chunked_graph_trains(tmp_path: Path, cora_path: Path) -> None:
    with np.load(cora_path, allow_pickle=False) as z:
        write_chunked({k: z[k] for k in z.files}, tmp_path / "cora-chunked", chunks=4)
    manifest = write_manifest(
        tmp_path / "job.yaml",
        {
            "apiVersion": "distgnn.dev/v1alpha1",
            "kind": "DistGNNJob",
            "metadata": {"name": "chunked"},
            "spec": {
                "graph": {"source": {"url": "cora-chunked/metadata.json"}},
                "partitioning": {"numParts": 2, "graphName": "cora", "outputURL": "parts"},
                "trainers": {
                    "replicas": 2,
                    "app": {
                        "name": "node-classification",
                        "model": "sage",
                        "epochs": 15,
                        "hidden": 64,
                        "fanouts": [10, 10],
                        "batchSize": 32,
                        "lr": 0.01,
                        "dropout": 0.5,
                        "seed": 0,
                    },
                },
                "runPolicy": {"backoffLimit": 0},
            },
        },
    )
    res = run(manifest, "--workdir", str(tmp_path / "wd"), out_dir=tmp_path / "logs")
    assert res.rc == 0, res.stderr[-5000:]
    metrics = json.loads(res.stdout.strip().splitlines()[-1])
    assert metrics["test_accuracy"] >= 0.72, metrics  # 7 classes; the majority class is 0.32
    m = json.loads((tmp_path / "parts" / "cora.json").read_text(encoding="utf-8"))
    assert (m["num_nodes"], m["num_edges"]) == (2708, 10556)
