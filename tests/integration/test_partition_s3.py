"""Partitions written to and read from a real S3 server (SeaweedFS), with credentials."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.support.chunked import write_chunked

from distgnn.errors import StorageError
from distgnn.graph.io import load_graph
from distgnn.partition.loader import load_manifest, load_partition
from distgnn.partition.partitioner import partition_graph

pytestmark = pytest.mark.s3


def test_explicit_options_roundtrip(s3, cora_path: Path) -> None:  # type: ignore[no-untyped-def]
    opts = s3.storage_options()
    out = s3.url("explicit")
    m = partition_graph(str(cora_path), 2, out, "cora", storage_options=opts, progress=False)
    back = load_manifest(out + "/cora.json", opts)
    assert back == m
    g = load_graph(str(cora_path))
    p = load_partition(out + "/cora.json", 1, storage_options=opts)
    assert np.array_equal(p.node_data["_N"]["feat"], g.node_data["_N"]["feat"][p.orig_nid])
    assert p.num_owned_edges == m.parts[1].edges


def test_env_credentials_and_s3_input(
    s3,
    cora_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options())
    fs.put_file(str(cora_path), f"{s3.bucket}/input/cora.npz")
    out = s3.url("env")
    m = partition_graph(s3.url("input", "cora.npz"), 2, out, "cora", progress=False)
    p = load_partition(out + "/cora.json", 0)
    assert p.num_owned_nodes == m.parts[0].owned_nodes
    assert m.input_fingerprint == load_graph(str(cora_path)).fingerprint()


def test_wrong_credentials_fail_clearly(s3) -> None:  # type: ignore[no-untyped-def]
    bad = dict(s3.storage_options(), secret="not-the-secret-0123456789")
    with pytest.raises(StorageError) as ei:
        load_manifest(s3.url("explicit", "cora.json"), bad)
    assert "not-the-secret" not in str(ei.value) and s3.secret not in str(ei.value)
    assert "cora.json" in str(ei.value)


def test_chunked_graph_in_s3(  # type: ignore[no-untyped-def]
    s3, cora_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DGL's chunked format in S3: chunks found relative to metadata.json, the graph the
    same as the .npz (csv edges, parquet data, read through s3fs)."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    import s3fs

    with np.load(cora_path, allow_pickle=False) as z:
        write_chunked({k: z[k] for k in z.files}, tmp_path / "c", data_format="parquet")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options())
    fs.put(str(tmp_path / "c") + "/", f"{s3.bucket}/chunked/", recursive=True)
    m = partition_graph(s3.url("chunked", "metadata.json"), 2, s3.url("cp"), "cora", progress=False)
    assert m.input_fingerprint == load_graph(str(cora_path)).fingerprint()
