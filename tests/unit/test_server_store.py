"""The shared-memory store: names, quotas, space reservation, partial files, ownership."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distgnn.server.store import Quota, ShmStore, TensorError, check_name, check_shape


def _zeros(a: np.ndarray) -> None:
    a[...] = 0


@pytest.fixture
def store(tmp_path: Path) -> ShmStore:
    s = ShmStore.create(str(tmp_path))
    s.put("node/_N/feat", np.ones((10, 2), np.float32))
    s.seal()
    return s


def test_names_are_checked_for_charset_length_and_utf8() -> None:
    assert check_name("node/_N/feat") == "node/_N/feat"
    assert check_name("edge/a:b:c/w.adagrad_sum") == "edge/a:b:c/w.adagrad_sum"
    for bad in ("feat", "node/_N/fe at", "node/_N/a/b", "node/_N/\ud800", "x" * 300, 5, None,
                "node/\x00/x", "node/_N/" + "a" * 99):  # fmt: skip
        with pytest.raises(TensorError):
            check_name(bad, client=True)
    with pytest.raises(TensorError, match="longer than"):
        check_name("node/" + "é" * 60 + "/x")  # 120 bytes + the rest: over NAME_MAX once hexed
    assert check_shape([3, 0]) == (3, 0)
    for bad in ([10**30, 0], [True], [], [-1], [1] * 9, "3", [1.0]):
        with pytest.raises(TensorError, match="shape"):
            check_shape(bad)


def test_unknown_or_hostile_names_never_reach_the_file_system(store: ShmStore) -> None:
    for name in ("node/_N/\ud800", "node/_N/" + "a" * 400):
        with pytest.raises(TensorError, match="unknown tensor"):
            store.get(name)


def test_quota_counts_tensors_created_at_run_time_only(tmp_path: Path) -> None:
    s = ShmStore.create(str(tmp_path))
    s.put("node/_N/feat", np.ones((100, 100), np.float32))  # partition data: not counted
    s.seal()
    s.quota = Quota(max_tensors=2, max_bytes=10_000)
    s.init("node/_N/a", np.dtype("int64"), (10,), _zeros, False, "s1")
    s.init("node/_N/b", np.dtype("int64"), (10,), _zeros, False, "s1")
    assert s.usage()[0] == 2
    with pytest.raises(TensorError, match="DISTGNN_SERVER_MAX_TENSORS"):
        s.init("node/_N/c", np.dtype("int64"), (10,), _zeros, False, "s1")
    s.delete("node/_N/a", "s1")
    with pytest.raises(TensorError, match="DISTGNN_SERVER_MAX_TENSOR_BYTES"):
        s.init("node/_N/c", np.dtype("int64"), (2000,), _zeros, False, "s1")
    s.init("node/_N/c", np.dtype("int64"), (10,), _zeros, False, "s1")
    s.close()


def test_tensor_larger_than_free_shared_memory_is_an_error(store: ShmStore) -> None:
    free = os.statvfs(store.root).f_bavail * os.statvfs(store.root).f_frsize
    store.quota = Quota(max_bytes=1 << 62)
    with pytest.raises(TensorError, match="free"):
        store.init("node/_N/huge", np.dtype("float32"), (free // 4 + 1,), _zeros, False, "s")
    assert not [f for f in os.listdir(store.root) if f.endswith(".tmp")]


def test_failed_creates_leave_no_partial_file(store: ShmStore) -> None:
    def boom(a: np.ndarray) -> None:
        raise RuntimeError("fill failed")

    with pytest.raises(RuntimeError):
        store.init("node/_N/x", np.dtype("float32"), (10, 2), boom, False, "s")
    assert sorted(os.listdir(store.root)) == sorted(
        f for f in os.listdir(store.root) if not f.endswith((".tmp", ".jtmp"))
    )
    assert "node/_N/x" not in store.names()
    # a .tmp left by a worker killed while creating is removed by the next create
    stray = os.path.join(store.root, b"node/_N/y".hex() + ".tmp")
    Path(stray).write_bytes(b"\0" * 4096)
    store.init("node/_N/z", np.dtype("float32"), (10, 2), _zeros, False, "s")
    assert not os.path.exists(stray)


def test_reservation_failure_is_an_error_and_removes_the_file(tmp_path: Path) -> None:
    # a file-size limit makes posix_fallocate fail as a full tmpfs would (instead of a
    # SIGBUS when the pages are written)
    code = f"""
import resource, signal, os, numpy as np
from distgnn.server.store import ShmStore, TensorError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
s = ShmStore.create({str(tmp_path)!r})
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    s.init("node/_N/big", np.dtype("float32"), (1 << 22,), lambda a: a.fill(1), False, "s")
except TensorError as e:
    print("refused:", e)
print("left:", [f for f in os.listdir(s.root) if f.endswith(".tmp")])
"""
    r = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "does not fit" in r.stdout
    assert "left: []" in r.stdout


def test_deletion_follows_ownership(store: ShmStore) -> None:
    name = "node/_N/shared"
    assert store.init(name, np.dtype("float32"), (10, 2), _zeros, False, "A") == (True, False)
    assert store.init(name, np.dtype("float32"), (10, 2), _zeros, False, "B") == (False, False)
    with pytest.raises(TensorError, match="held by other sessions"):
        store.delete(name, "C")  # never attached: refused
    with pytest.raises(TensorError, match="holds no reference"):
        store.detach(name, "C")
    assert store.delete(name, "B") is False  # a holder's delete only detaches
    assert name in store.names()
    assert store.attach(name, "C")["shape"] == [10, 2]
    assert store.detach(name, "A") is False
    assert store.detach(name, "C") is True  # the last holder removes it
    assert name not in store.names()
    # the creator may remove it at once with force, even while others hold it
    store.init(name, np.dtype("float32"), (10, 2), _zeros, False, "A")
    store.attach(name, "B")
    with pytest.raises(TensorError, match="held by other sessions"):
        store.delete(name, "C", force=True)
    assert store.delete(name, "A", force=True) is True
    # persistent: only the creator with force
    store.init("node/_N/p", np.dtype("int64"), (10,), _zeros, True, "A")
    with pytest.raises(TensorError, match="persistent"):
        store.delete("node/_N/p", "B", force=True)
    assert store.delete("node/_N/p", "A", force=True) is True


def test_partition_data_names_outside_the_client_charset_still_load(tmp_path: Path) -> None:
    s = ShmStore.create(str(tmp_path))
    s.put("node/paper type/feat v2:x", np.ones(3, np.float32))
    assert s.get("node/paper type/feat v2:x").tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(TensorError, match="name too long"):
        s.put("node/_N/" + "x" * 200, np.ones(3))
    s.close()


def test_a_readonly_view_maps_without_write_access_and_creates_nothing(store: ShmStore) -> None:
    """A co-located trainer's view of the store (``readonly``): the server's writes show
    through the map, the view can neither write the rows nor create or delete tensors."""
    view = ShmStore(store.root, readonly=True)
    a = view.get("node/_N/feat")
    assert not a.flags.writeable and a.tolist() == [[1.0, 1.0]] * 10
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 5
    store.get("node/_N/feat")[3] = 7.0  # the server's write
    assert a[3].tolist() == [7.0, 7.0]
    with pytest.raises(TensorError, match="read-only"):
        view.init("node/_N/x", np.dtype(np.float32), (2,), _zeros, persistent=True)
    with pytest.raises(TensorError, match="read-only"):
        view.delete("node/_N/feat")
    assert view.names() == store.names()
    view.close()
    assert os.path.isdir(store.root)  # not the owner: the folder stays
