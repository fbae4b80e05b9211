"""Per-server limits on what one client (or request) may make a server hold.

Defaults are derived from the memory the server may use (the cgroup limit or the
machine's available memory), the free space of its shared-memory folder and its
file-descriptor limit; every value can be overridden by an environment variable of
:mod:`distgnn.contract` (``DISTGNN_SERVER_*``, ``DISTGNN_HEALTH_*``). The parent
resolves them once and hands them to its workers as JSON. A request beyond a limit is
answered with an ERROR frame naming the limit and its variable.
"""

from __future__ import annotations

import json
import os
import re
import resource
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from distgnn import contract
from distgnn.errors import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

ENV: dict[str, str] = {
    "max_tensors": contract.ENV_SERVER_MAX_TENSORS,
    "max_tensor_bytes": contract.ENV_SERVER_MAX_TENSOR_BYTES,
    "max_request_bytes": contract.ENV_SERVER_MAX_REQUEST_BYTES,
    "max_ids": contract.ENV_SERVER_MAX_IDS,
    "max_reply_bytes": contract.ENV_SERVER_MAX_REPLY_BYTES,
    "max_sample_edges": contract.ENV_SERVER_MAX_SAMPLE_EDGES,
    "max_connections": contract.ENV_SERVER_MAX_CONNECTIONS,
    "idle_timeout": contract.ENV_SERVER_IDLE_TIMEOUT,
    "send_timeout": contract.ENV_SERVER_SEND_TIMEOUT,
    "health_connections": contract.ENV_HEALTH_MAX_CONNECTIONS,
    "health_timeout": contract.ENV_HEALTH_TIMEOUT,
}
"""The environment variable of each overridable field."""

SAMPLE_BYTES_PER_EDGE = 64
"""Peak bytes a sampling request holds per touched edge (positions, seeds, keys, answer)."""


@dataclass(frozen=True)
class ServerLimits:
    """Resource limits of one graph server (the class defaults suit in-process use)."""

    max_tensors: int = 4096
    max_tensor_bytes: int = 64 * GiB
    max_request_bytes: int = 2 * GiB
    max_ids: int = 1 << 27
    max_reply_bytes: int = 8 * GiB
    max_sample_edges: int = 1 << 27
    max_connections: int = 1024
    idle_timeout: float = 600.0
    send_timeout: float = 30.0
    auth_timeout: float = 10.0
    frame_timeout: float = 60.0
    health_connections: int = 8
    health_timeout: float = 2.0

    @classmethod
    def derive(
        cls,
        env: Mapping[str, str] | None = None,
        memory: int | None = None,
        shm_free: int | None = None,
        nofile: int | None = None,
    ) -> ServerLimits:
        """Defaults scaled to this machine, then the environment's overrides."""
        mem = memory if memory is not None else usable_memory()
        fds = nofile if nofile is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        request = _clamp(mem // 16, 64 * MiB, 4 * GiB)
        reply = _clamp(mem // 8, 256 * MiB, 16 * GiB)
        base = cls(
            max_tensor_bytes=max(
                64 * MiB, min(mem, shm_free if shm_free is not None else mem) // 2
            ),
            max_request_bytes=request,
            max_ids=max(1 << 20, request // 16),
            max_reply_bytes=reply,
            max_sample_edges=max(1 << 20, reply // SAMPLE_BYTES_PER_EDGE),
            max_connections=max(16, min(1024, (fds - 64) // 2)) if fds > 0 else 1024,
        )
        return base.with_env(env if env is not None else os.environ)

    def with_env(self, env: Mapping[str, str]) -> ServerLimits:
        """Overrides from ``DISTGNN_SERVER_*`` / ``DISTGNN_HEALTH_*``; ConfigError names one."""
        changes: dict[str, Any] = {}
        for f in fields(self):
            name = ENV.get(f.name)
            raw = env.get(name, "") if name else ""
            if not raw.strip() or name is None:
                continue
            if f.type in ("int", int):
                changes[f.name] = parse_size(raw, name)
            else:
                changes[f.name] = _parse_seconds(raw, name)
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ServerLimits:
        return cls(**json.loads(text))

    def env_name(self, field: str) -> str:
        """The variable that overrides ``field`` (for error messages)."""
        return ENV.get(field, field)


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(raw: str, name: str) -> int:
    """``1024``, ``64M``, ``2GiB`` -> bytes (or a plain count); ConfigError names ``name``."""
    m = _SIZE.match(raw)
    if not m:
        raise ConfigError(f"{name}={raw[:40]!r} is not a positive integer (K/M/G/T suffix allowed)")
    v = int(m.group(1)) * (1024 ** "_KMGT".index(m.group(2).upper() or "_"))
    if v <= 0:
        raise ConfigError(f"{name}={raw[:40]!r} must be > 0")
    return v


def _parse_seconds(raw: str, name: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw[:40]!r} is not a number of seconds") from None
    if not 0 < v < 1e7:
        raise ConfigError(f"{name}={raw[:40]!r} must be > 0 seconds")
    return v


def usable_memory() -> int:
    """Bytes this process may use: the cgroup v2/v1 limit, else MemAvailable, else 4 GiB."""
    limit = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:
            limit = int(raw)
            break
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    vals = [v for v in (limit, avail) if v]
    return min(vals) if vals else 4 * GiB


def shm_free(path: str) -> int:
    """Free bytes of the file system holding ``path`` (the tmpfs of the shared memory)."""
    st = os.statvfs(path)
    return int(st.f_bavail) * int(st.f_frsize)
