"""The local GraphServer registry and port allocation."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from distgnn.errors import ConfigError
from distgnn.local.ports import PortAllocator, free_port, is_listening
from distgnn.local.registry import (
    ENV_STATE_DIR,
    GraphServerEntry,
    Registry,
    default_state_dir,
    process_create_time,
)


def entry(name: str, pid: int) -> GraphServerEntry:
    return GraphServerEntry(
        name=name,
        servers=["127.0.0.1:4000", "127.0.0.1:4001"],
        token_file="/tmp/x.token",
        manifest_url="file:///tmp/cora.json",
        pid=pid,
        create_time=process_create_time(pid),
    )


def test_register_and_lookup_roundtrip(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "gs")
    path = reg.register(entry("cora", os.getpid()))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    got = reg.lookup("cora")
    assert got.servers == ["127.0.0.1:4000", "127.0.0.1:4001"]
    assert got.pid == os.getpid()
    assert reg.names() == ["cora"]
    reg.remove("cora")
    assert reg.names() == []


def test_missing_entry_names_the_graphserver(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"graphServer\.name.*'nope'"):
        Registry(tmp_path).lookup("nope")


def test_stale_entry_is_reported(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    e = entry("old", child.pid)
    child.wait(timeout=60)
    reg = Registry(tmp_path)
    reg.register(e)
    with pytest.raises(ConfigError, match="stale"):
        reg.lookup("old")
    # a new server may take over a stale name
    reg.register(entry("old", os.getpid()))
    assert reg.lookup("old").pid == os.getpid()


def test_refuses_to_replace_a_live_entry_of_another_process(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reg.register(entry("busy", child.pid))
        with pytest.raises(ConfigError, match="already running"):
            reg.register(entry("busy", os.getpid()))
    finally:
        child.kill()
        child.wait(timeout=60)


def test_remove_only_own_entry(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    reg.register(entry("mine", os.getpid()))
    reg.remove("mine", pid=os.getpid() + 1)
    assert reg.names() == ["mine"]
    reg.remove("mine", pid=os.getpid())
    assert reg.names() == []


def test_malformed_entry_and_bad_names(tmp_path: Path) -> None:
    reg = Registry(tmp_path)
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken\.json"):
        reg.lookup("broken")
    (tmp_path / "partial.json").write_text('{"name": "partial"}', encoding="utf-8")
    with pytest.raises(ConfigError, match="malformed"):
        reg.lookup("partial")
    with pytest.raises(ConfigError, match="not a valid name"):
        reg.path("../escape")


def test_state_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path))
    assert default_state_dir() == tmp_path
    assert Registry.default().root == tmp_path / "graphservers"


def test_ports_are_distinct_and_free() -> None:
    alloc = PortAllocator()
    ports = [alloc.take() for _ in range(5)]
    assert len(set(ports)) == 5
    assert not is_listening(free_port())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert is_listening(s.getsockname()[1])
