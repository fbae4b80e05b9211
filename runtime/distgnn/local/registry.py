"""The local GraphServer registry: one JSON file per running ``distgnn run GRAPHSERVER.yaml``.

Entries live in ``$DISTGNN_STATE_DIR/graphservers/NAME.json`` (default state dir:
``~/.local/state/distgnn``), mode 0600. A job naming ``spec.graph.graphServer.name``
looks its servers up here; an entry whose process is gone is reported as stale.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from distgnn.errors import ConfigError

ENV_STATE_DIR = "DISTGNN_STATE_DIR"
"""Folder of local-mode state (default ``~/.local/state/distgnn``)."""


def default_state_dir() -> Path:
    env = os.environ.get(ENV_STATE_DIR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "distgnn"


@dataclass(frozen=True)
class GraphServerEntry:
    """A running local GraphServer as attaching jobs see it."""

    name: str
    servers: list[str]
    """``host:port`` of each partition's server, in partition order."""
    token_file: str
    manifest_url: str
    pid: int
    create_time: float
    """psutil create time of ``pid`` (guards against a reused pid)."""
    started_at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str) -> GraphServerEntry:
        try:
            return cls(
                name=str(d["name"]),
                servers=[str(s) for s in d["servers"]],
                token_file=str(d["token_file"]),
                manifest_url=str(d["manifest_url"]),
                pid=int(d["pid"]),
                create_time=float(d["create_time"]),
                started_at=float(d.get("started_at", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{source}: malformed registry entry ({e!r})") from e

    def alive(self) -> bool:
        """True if the registering process still runs (same pid, same start time)."""
        try:
            proc = psutil.Process(self.pid)
            return (
                abs(proc.create_time() - self.create_time) < 1.0
                and proc.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False


def process_create_time(pid: int) -> float:
    return float(psutil.Process(pid).create_time())


@dataclass(frozen=True)
class Registry:
    """The registry folder; methods read and write one entry each."""

    root: Path

    @classmethod
    def default(cls) -> Registry:
        return cls(default_state_dir() / "graphservers")

    def path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"graphServer.name: {name!r} is not a valid name")
        return self.root / f"{name}.json"

    def token_path(self, name: str) -> Path:
        return self.root / f"{name}.token"

    def register(self, entry: GraphServerEntry) -> Path:
        """Write ``entry`` (0600, atomically); never replaces another process's live entry."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.path(entry.name)
        if target.exists():
            try:
                old = self.read(entry.name)
            except ConfigError:
                old = None
            if old is not None and old.alive() and old.pid != entry.pid:
                raise ConfigError(
                    f"GraphServer {entry.name!r} is already running (pid {old.pid}, "
                    f"registry {target})"
                )
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{entry.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(entry.to_json())
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def read(self, name: str) -> GraphServerEntry:
        """The entry as written, alive or not; ConfigError if there is none."""
        p = self.path(name)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ConfigError(
                f"spec.graph.graphServer.name: no local GraphServer named {name!r} is running "
                f"(no {p}); start one with `distgnn run GRAPHSERVER.yaml`"
            ) from e
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{p}: unreadable registry entry ({e})") from e
        if not isinstance(d, dict):
            raise ConfigError(f"{p}: malformed registry entry (not an object)")
        return GraphServerEntry.from_dict(d, str(p))

    def lookup(self, name: str) -> GraphServerEntry:
        """The live entry for ``name``; a stale one (its process gone) is a ConfigError."""
        entry = self.read(name)
        if not entry.alive():
            raise ConfigError(
                f"spec.graph.graphServer.name: GraphServer {name!r} is registered in "
                f"{self.path(name)} but its process (pid {entry.pid}) is gone: the entry is "
                f"stale; restart it with `distgnn run GRAPHSERVER.yaml` (or delete the file)"
            )
        return entry

    def remove(self, name: str, pid: int | None = None) -> None:
        """Delete the entry (only if it is ``pid``'s, when given) and its token file."""
        p = self.path(name)
        if pid is not None:
            try:
                if self.read(name).pid != pid:
                    return
            except ConfigError:
                pass
        p.unlink(missing_ok=True)
        self.token_path(name).unlink(missing_ok=True)

    def sweep(self) -> list[str]:
        """Remove the entries (and token files) of GraphServers whose process is gone."""
        removed = []
        for name in self.names():
            try:
                entry = self.read(name)
            except ConfigError:
                continue
            if not entry.alive():
                self.remove(name, pid=entry.pid)
                removed.append(name)
        return removed

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))
