"""Partition files that lie: each is refused with a PartitionDataError naming the file,
promptly (no hang), even when its checksum in the manifest was updated to match."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distgnn.errors import ManifestError, PartitionDataError, StorageError
from distgnn.graph.io import graph_from_arrays
from distgnn.partition.loader import LoadCancelled, load_manifest, load_partition
from distgnn.partition.partitioner import partition_graph

PART = "g/part-00000"


@pytest.fixture(scope="module")
def parted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    g = graph_from_arrays(
        {
            "src": rng.integers(0, 60, 400),
            "dst": rng.integers(0, 60, 400),
            "feat": rng.random((60, 4), dtype=np.float32),
        }
    )
    out = tmp_path_factory.mktemp("parts")
    partition_graph(g, 2, str(out), "g", progress=False)
    return out


@pytest.fixture
def copy(parted: Path, tmp_path: Path) -> Path:
    shutil.copytree(parted, tmp_path / "c")
    return tmp_path / "c"


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _set_entry(root: Path, rel: str, data: bytes) -> None:
    """Make the manifest's size and sha256 of ``PART/rel`` describe ``data``."""
    mpath = root / "g.json"
    m: dict[str, Any] = json.loads(mpath.read_text())
    m["parts"][0]["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    mpath.write_text(json.dumps(m))


def _replace(root: Path, rel: str, arr: np.ndarray) -> None:
    data = _npy(arr)
    (root / PART / rel).write_bytes(data)
    _set_entry(root, rel, data)


def _load(root: Path) -> Any:
    return load_partition(str(root / "g.json"), 0)


def test_untampered_partition_loads(copy: Path) -> None:
    p = _load(copy)
    assert p.indptr[-1] == p.indices.shape[0]


@pytest.mark.timeout(60)
def test_symlink_to_dev_zero_is_refused_without_hanging(copy: Path) -> None:
    f = copy / PART / "graph" / "indices.npy"
    f.unlink()
    f.symlink_to("/dev/zero")
    with pytest.raises(PartitionDataError, match=r"indices\.npy: resolves outside"):
        _load(copy)


@pytest.mark.timeout(60)
def test_fifo_is_refused_without_hanging(copy: Path) -> None:
    f = copy / PART / "graph" / "indices.npy"
    f.unlink()
    os.mkfifo(f)
    with pytest.raises(PartitionDataError, match=r"indices\.npy: not a regular file"):
        _load(copy)


def test_symlink_out_of_the_folder_is_refused(copy: Path, tmp_path: Path) -> None:
    f = copy / PART / "node" / "_N" / "feat.npy"
    outside = tmp_path / "elsewhere.npy"
    shutil.move(f, outside)  # same bytes, same checksum: only its place is wrong
    f.symlink_to(outside)
    with pytest.raises(PartitionDataError, match=r"feat\.npy: resolves outside"):
        _load(copy)


def test_symlink_inside_the_folder_is_followed(copy: Path) -> None:
    f = copy / PART / "node" / "_N" / "feat.npy"
    shutil.move(f, f.with_name("feat.real"))
    f.symlink_to("feat.real")
    assert _load(copy).node_data["_N"]["feat"].shape[1] == 4


@pytest.mark.parametrize(
    ("rel", "make", "message"),
    [
        ("node/_N/feat.npy", lambda a: a.astype(">f4"), "dtype >f4 != <f4"),
        ("node/_N/feat.npy", lambda a: a.astype(np.float64), "dtype <f8 != <f4"),
        ("node/_N/feat.npy", lambda a: a[:, :3], r"shape .* per the manifest"),
        ("node/_N/feat.npy", lambda a: np.concatenate([a, a]), r"shape .* per the manifest"),
        ("graph/indices.npy", lambda a: np.where(a == a[0], 10**12, a), r"values outside"),
        ("graph/indices.npy", lambda a: a.astype(">i8"), "native-endian integer"),
        ("graph/indices.npy", lambda a: a.astype(np.float64), "native-endian integer"),
        ("graph/indptr.npy", lambda a: np.minimum(a, a[-1] - 1), "end at"),
        (
            "graph/indptr.npy",
            lambda a: np.where(np.arange(len(a)) == 1, a[-1], a),
            "non-decreasing",
        ),
        ("graph/indptr.npy", lambda a: a[:-1], "entries"),
        ("graph/eid.npy", lambda a: -a - 1, r"values outside"),
        ("graph/halo_nid.npy", lambda a: a + 10**9, r"values outside"),
        ("graph/orig_nid.npy", lambda a: a[:-1], "entries"),
    ],
)
def test_contents_contradicting_the_manifest_are_refused(
    copy: Path, rel: str, make: Any, message: str
) -> None:
    arr = np.load(copy / PART / rel)
    _replace(copy, rel, np.ascontiguousarray(make(arr)))
    with pytest.raises(PartitionDataError, match=message) as ei:
        _load(copy)
    assert rel in str(ei.value)


def test_object_and_fortran_arrays_and_bad_headers_are_refused(copy: Path) -> None:
    rel = "node/_N/feat.npy"
    arr = np.load(copy / PART / rel)
    _replace(copy, rel, np.asfortranarray(arr))
    with pytest.raises(PartitionDataError, match="Fortran"):
        _load(copy)
    data = _npy(arr)
    shape = f"({arr.shape[0]}, 4)".encode()
    assert shape in data
    big = b"(3000000000000, 4)"
    end = data.index(b"\n")  # the header is space-padded up to its newline
    cut = len(big) - len(shape)
    lying = (data[: end - cut] + data[end:]).replace(shape, big, 1)
    assert len(lying) == len(data) and lying != data
    (copy / PART / rel).write_bytes(lying)
    _set_entry(copy, rel, lying)
    with pytest.raises(PartitionDataError, match=r"feat\.npy: header says"):
        _load(copy)
    broken = data.replace(shape, b"(3" + b" " * (len(shape) - 2), 1)  # unbalanced
    (copy / PART / rel).write_bytes(broken)
    _set_entry(copy, rel, broken)
    with pytest.raises(PartitionDataError, match=r"feat\.npy: not a readable \.npy"):
        _load(copy)


def test_checksum_covers_the_bytes_that_are_used(copy: Path) -> None:
    """A writer rewriting a file in place while it is loaded: the load returns the
    verified content or a PartitionDataError, never an EOFError or other content."""
    rel = "node/_N/feat.npy"
    path = copy / PART / rel
    good = path.read_bytes()
    other = _npy(np.zeros_like(np.load(path)))
    assert len(other) == len(good)
    expected = np.load(io.BytesIO(good))
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            for data in (other, good):
                with open(path, "wb") as f:  # truncate, then write: in place
                    f.write(data[:50])
                    f.flush()
                    f.write(data[50:])

    t = threading.Thread(target=rewrite, daemon=True)
    t.start()
    loaded = refused = 0
    try:
        for _ in range(300):
            try:
                p = _load(copy)
            except PartitionDataError:
                refused += 1
                continue
            assert np.array_equal(p.node_data["_N"]["feat"], expected)
            loaded += 1
    finally:
        stop.set()
        t.join(10)
    assert loaded + refused == 300


def test_cancel_stops_loading(copy: Path) -> None:
    calls: list[int] = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(LoadCancelled):
        load_partition(str(copy / "g.json"), 0, cancel=cancel)


def test_deeply_nested_or_huge_partition_manifest(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ManifestError, match="deeper"):
        load_manifest(str(deep))
    res = subprocess.run(
        [sys.executable, "-m", "distgnn.cli", "inspect", str(deep)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(StorageError, match="not a regular file"):
        load_manifest(str(fifo))
    with pytest.raises(StorageError, match="larger than"):
        load_manifest("/dev/zero") if False else load_manifest(str(_zeros(tmp_path)))


def _zeros(tmp_path: Path) -> Path:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 10)
    return big


ENOSPC_WRITER = """
import resource, signal, sys
from distgnn import storage
from distgnn.errors import StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    storage.write_bytes(sys.argv[1], b"x" * 100_000)
except StorageError as e:
    print("refused:", e)
"""


def test_manifest_write_that_fails_leaves_no_partial_file(tmp_path: Path) -> None:
    """A disk that fills up (here: a file-size limit) mid-write leaves the previous
    manifest, or none, under the final name: never a partial one."""
    target = tmp_path / "g.json"
    target.write_text('{"old": true}')
    out = subprocess.run(
        [sys.executable, "-c", ENOSPC_WRITER, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "refused:" in out.stdout
    assert target.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]
