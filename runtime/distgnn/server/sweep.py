"""Owner records of shared-memory folders, and the sweep of folders whose server died.

A server (or a standalone context) writes ``owner.json`` into its tmpfs folder right after
creating it: its PID, the process start time (``/proc/PID/stat`` field 22, clock ticks
since boot), the PID namespace and the boot id. A folder is *stale* when its owner is
gone: no such PID, or a PID whose start time differs (the PID was reused), or another
boot. A folder of another PID namespace (another container sharing ``/dev/shm``) is never
judged, nor is a folder without an owner record (being created, or an older version).
A process killed by SIGKILL cannot clean up, so :func:`sweep_stale` runs when a server
starts and when ``distgnn run`` sees a server die.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass

from distgnn.log import kv

log = logging.getLogger("distgnn.server.sweep")

OWNER_FILE = "owner.json"
PREFIX = "distgnn-"


@dataclass(frozen=True)
class Owner:
    """Who created a shared-memory folder."""

    pid: int
    start: int
    pidns: str
    boot_id: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, process_start(pid) or 0, _pidns(), _boot_id())


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot; None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def write_owner(folder: str) -> None:
    """Record the calling process as the owner of ``folder`` (atomically)."""
    tmp = os.path.join(folder, OWNER_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(Owner.current()), f)
    os.replace(tmp, os.path.join(folder, OWNER_FILE))


def read_owner(folder: str) -> Owner | None:
    """The folder's owner record; None when absent or unreadable."""
    try:
        with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as f:
            d = json.load(f)
        return Owner(int(d["pid"]), int(d["start"]), str(d["pidns"]), str(d["boot_id"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_stale(owner: Owner, me: Owner | None = None) -> bool:
    """Whether ``owner`` is certainly gone (never True for another PID namespace)."""
    me = me or Owner.current()
    if owner.boot_id and me.boot_id and owner.boot_id != me.boot_id:
        return True  # written before the last reboot
    if owner.pidns != me.pidns:
        return False  # another container: its PIDs mean nothing here
    start = process_start(owner.pid)
    return start is None or start != owner.start


def sweep_stale(root: str, prefix: str = PREFIX) -> list[str]:
    """Remove the ``prefix*`` folders under ``root`` whose owner is gone; their paths.

    Safe to call at any time from any process: live owners (same PID and start time),
    folders of other PID namespaces and folders without an owner record are kept.
    """
    me = Owner.current()
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith(prefix):
            continue
        with contextlib.suppress(OSError):
            if not e.is_dir(follow_symlinks=False):
                continue
        owner = read_owner(e.path)
        if owner is None or not is_stale(owner, me):
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        if not os.path.exists(e.path):
            removed.append(e.path)
            log.info("removed shared memory of a dead server", extra=kv(path=e.path, pid=owner.pid))
    return removed
