"""Shared-memory folders of dead servers are swept; live, foreign and unknown ones are kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

from distgnn.server.store import ShmStore, sweep_stale
from distgnn.server.sweep import OWNER_FILE, Owner, is_stale, process_start, read_owner


def _folder(root: Path, name: str, owner: Owner | None) -> Path:
    d = root / name
    d.mkdir()
    (d / "x.npy").write_bytes(b"data")
    if owner is not None:
        (d / OWNER_FILE).write_text(json.dumps(asdict(owner)))
    return d


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    return p.pid


def test_sweep_removes_only_folders_of_dead_owners(tmp_path: Path) -> None:
    me = Owner.current()
    assert me.start == process_start(os.getpid()) and me.start > 0
    dead = _folder(tmp_path, "distgnn-p0-dead", replace(me, pid=_dead_pid()))
    reused = _folder(tmp_path, "distgnn-p1-reused", replace(me, start=me.start - 1))
    rebooted = _folder(tmp_path, "distgnn-p2-boot", replace(me, boot_id="another-boot"))
    alive = _folder(tmp_path, "distgnn-p3-alive", me)
    foreign = _folder(tmp_path, "distgnn-p4-ns", replace(me, pid=_dead_pid(), pidns="pid:[1]"))
    unknown = _folder(tmp_path, "distgnn-p5-noowner", None)
    other = _folder(tmp_path, "other-p6", replace(me, pid=_dead_pid()))
    removed = sweep_stale(str(tmp_path))
    assert sorted(removed) == sorted(str(p) for p in (dead, reused, rebooted))
    for p in (dead, reused, rebooted):
        assert not p.exists()
    for p in (alive, foreign, unknown, other):
        assert (p / "x.npy").exists()
    assert sweep_stale(str(tmp_path / "missing")) == []


def test_store_records_its_owner_and_a_killed_owner_is_swept(tmp_path: Path) -> None:
    store = ShmStore.create(str(tmp_path))
    owner = read_owner(store.root)
    assert owner == Owner.current() and not is_stale(owner)
    assert sweep_stale(str(tmp_path)) == []
    store.close()
    assert not os.path.exists(store.root)
    # a process that creates a store and is killed leaves its folder: the sweep removes it
    code = (
        "import os, signal, sys; from distgnn.server.store import ShmStore; "
        f"s = ShmStore.create({str(tmp_path)!r}); print(s.root, flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    root = r.stdout.strip()
    assert r.returncode == -9 and os.path.isdir(root)
    assert sweep_stale(str(tmp_path)) == [root]
    assert not os.path.exists(root)
