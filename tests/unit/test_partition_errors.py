"""Corrupted, missing and malformed partition data is rejected clearly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distgnn.errors import ManifestError, PartitionDataError
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.loader import load_manifest, load_partition
from distgnn.partition.manifest import Manifest, PartitionOptions
from distgnn.partition.partitioner import partition_graph
from distgnn.partition.reuse import find_reusable


@pytest.fixture(scope="module")
def parted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    g = graph_from_arrays(
        {
            "src": rng.integers(0, 50, 300),
            "dst": rng.integers(0, 50, 300),
            "feat": rng.random((50, 3), dtype=np.float32),
        }
    )
    out = tmp_path_factory.mktemp("parts")
    partition_graph(g, 2, str(out), "g", progress=False)
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst / "g.json"


def test_corrupted_file_rejected(parted: Path, tmp_path: Path) -> None:
    url = _copy(parted, tmp_path / "c")
    f = tmp_path / "c" / "g" / "part-00001" / "node" / "_N" / "feat.npy"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    load_partition(str(url), 0)  # the other partition is untouched and loads
    with pytest.raises(PartitionDataError, match=r"feat\.npy.*sha256"):
        load_partition(str(url), 1)
    with pytest.raises(PartitionDataError, match=r"feat\.npy.*sha256"):
        load_partition(str(url), 1, mmap=False)


def test_truncated_and_missing_file(parted: Path, tmp_path: Path) -> None:
    url = _copy(parted, tmp_path / "c")
    f = tmp_path / "c" / "g" / "part-00000" / "graph" / "indices.npy"
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(PartitionDataError, match=r"indices\.npy: size"):
        load_partition(str(url), 0)
    f.unlink()
    with pytest.raises(PartitionDataError, match=r"indices\.npy.*missing"):
        load_partition(str(url), 0)


def _manifest(parted: Path) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((parted / "g.json").read_text())
    return obj


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o.update(version=2), "version"),
        (lambda o: o.update(format="dgl"), "format"),
        (lambda o: o.pop("num_nodes"), "num_nodes"),
        (lambda o: o.update(num_parts="2"), "num_parts"),
        (lambda o: o.update(node_offsets=[0, 60, 50]), "node_offsets"),
        (lambda o: o.update(edge_offsets=[1, 10, 300]), "edge_offsets"),
        (lambda o: o["ntype_offsets"].update(_N=[0, 1, 50]), "ntype_offsets"),
        (lambda o: o["parts"][0].update(path="../../etc"), "parts[0].path"),
        (lambda o: o["parts"][1].update(part_id=0), "parts[1].part_id"),
        (lambda o: o["parts"].pop(), "parts"),
        (lambda o: o["options"].update(method="magic"), "options.method"),
        (
            lambda o: o["parts"][0]["files"]["graph/eid.npy"].update(sha256="x"),
            "parts[0].files.graph/eid.npy.sha256",
        ),
    ],
)
def test_malformed_manifest(parted: Path, mutate: Any, field: str) -> None:
    obj = _manifest(parted)
    mutate(obj)
    with pytest.raises(ManifestError, match=re.escape(f"field '{field}")):
        Manifest.from_dict(obj, "g.json")


def test_manifest_bad_json_and_roundtrip(parted: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.from_json("{nope")
    m = load_manifest(str(parted / "g.json"))
    assert Manifest.from_json(m.to_json()) == m
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "distgnn-partitions", "version": 1}')
    with pytest.raises(ManifestError, match="num_parts"):
        load_manifest(str(bad))


def test_find_reusable(parted: Path) -> None:
    m = load_manifest(str(parted / "g.json"))
    opts = PartitionOptions()
    assert find_reusable(str(parted), "g", m.input_fingerprint, opts) == m
    assert find_reusable(str(parted), "g", "0" * 64, opts) is None
    assert find_reusable(str(parted), "g", m.input_fingerprint, PartitionOptions(seed=1)) is None
    assert find_reusable(str(parted), "other", m.input_fingerprint, opts) is None


def test_find_reusable_hashes_the_input_only_when_needed(parted: Path) -> None:
    """The fingerprint hashes the whole input: skip it when the cheap checks already fail."""
    m = load_manifest(str(parted / "g.json"))
    calls: list[int] = []

    def fingerprint() -> str:
        calls.append(1)
        return m.input_fingerprint

    opts = PartitionOptions()
    assert find_reusable(str(parted), "other", fingerprint, opts) is None
    assert find_reusable(str(parted), "g", fingerprint, PartitionOptions(seed=1)) is None
    assert find_reusable(str(parted), "g", fingerprint, opts, num_parts=m.num_parts + 1) is None
    assert calls == []
    assert find_reusable(str(parted), "g", fingerprint, opts) == m
    assert calls == [1]
