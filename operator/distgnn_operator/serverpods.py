"""Graph-server pods that cannot start, and why, from their status as the kubelet writes
it. Pure.

A server pod that crash-loops (``distgnn serve`` exits: a partition URL that does not
exist, missing credentials, a malformed partition file) or cannot pull its image changes
nothing its StatefulSet reports: it is just not ready. While a resource's servers are not
all ready, the reconcile lists them (read-only, no watch) and :func:`first_stuck` names
the lowest ordinal that is stuck, in one line that does not change while the pod's state
does not (no restart counts, back-off times or timestamps), so a pass over an unchanged
pod writes nothing. A server container that last exited with
:data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2: a configuration or input error, which a
restart cannot cure) is :func:`first_config_error`: it fails a DistGNNJob at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn_operator import failure as f

SERVER_CONTAINER = "server"
"""The graph-server container of a server pod."""
CRASH_LOOP = "CrashLoopBackOff"
IMAGE_PULL = "ImagePullBackOff"
PULL_REASONS = frozenset({IMAGE_PULL, "ErrImagePull"})
"""Shown as one reason: the kubelet alternates between them on every pull attempt."""
STUCK_REASONS = frozenset(
    {
        CRASH_LOOP,
        *PULL_REASONS,
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""Waiting reasons of a container that will not start without a change (not
``ContainerCreating`` or ``PodInitializing``, which pass on their own)."""
UNSCHEDULABLE = "Unschedulable"
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class StuckServer:
    """A server pod that cannot start, and why."""

    pod: str
    ordinal: int
    reason: str
    """a container waiting reason (``CrashLoopBackOff``, ``ImagePullBackOff``, ...) or
    ``Unschedulable``"""
    why: str
    """one line: the last termination's root cause (a crash loop), else the waiting or
    scheduling message"""
    detail: str = ""
    """the last termination message (log tail), for an Event"""
    exit_code: int | None = None
    """the last termination's exit status (a crash loop)"""

    @property
    def config_error(self) -> bool:
        """Whether the server exited with the configuration-error status (2)."""
        return contract.is_config_error_exit(self.exit_code)

    def describe(self) -> str:
        """``pod NAME: REASON: WHY``: what a status message says of it."""
        return (
            f"pod {self.pod}: {self.reason}: {self.why}"
            if self.why
            else f"pod {self.pod}: {self.reason}"
        )

    def failure(self) -> f.PodFailure:
        """As a failed pod (the ``PodFailed`` event and the ``Failed`` condition, whose
        message names the exit code itself)."""
        why = self.why.removesuffix(f" (exit code {self.exit_code})")
        return f.PodFailure(self.pod, why, self.detail, exit_code=self.exit_code)


def ordinal(pod: dict[str, Any]) -> int:
    """A StatefulSet pod's ordinal (its name's ``-N``; a huge number when it has none)."""
    m = _ORDINAL.search(str((pod.get("metadata") or {}).get("name") or ""))
    return int(m.group(1)) if m else 1 << 30


def _exit_code(term: dict[str, Any]) -> int | None:
    code = term.get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _last_termination(cs: dict[str, Any]) -> dict[str, Any]:
    """The container's latest termination: its current state while terminated (between a
    crash and the kubelet's back-off), else ``lastState``; {} when it never terminated."""
    return dict(
        (cs.get("state") or {}).get("terminated")
        or (cs.get("lastState") or {}).get("terminated")
        or {}
    )


def _crash(name: str, n: int, term: dict[str, Any]) -> StuckServer:
    code = _exit_code(term)
    summary, detail = f.summarize(term.get("message"), term.get("reason"), code)
    if code is not None and "exit code" not in summary:
        summary = f"{summary} (exit code {code})"
    return StuckServer(name, n, CRASH_LOOP, summary, detail, code)


def stuck(pod: dict[str, Any], container: str = SERVER_CONTAINER) -> StuckServer | None:
    """Why this server pod cannot start, or None when it is ready or on its way.

    A not-ready container that last exited non-zero is crash-looping, whether the
    kubelet shows it waiting (``CrashLoopBackOff``), just terminated or running again
    before its next crash: the same line in each, so the status does not flap with the
    kubelet's restarts. A pod being deleted is never stuck (its replacement will say)."""
    md = pod.get("metadata") or {}
    if md.get("deletionTimestamp"):
        return None
    name, n = str(md.get("name") or "?"), ordinal(pod)
    st = pod.get("status") or {}
    for cs in st.get("containerStatuses") or []:
        if cs.get("name") != container or cs.get("ready"):
            continue
        term = _last_termination(cs)
        if _exit_code(term) not in (None, 0):
            return _crash(name, n, term)
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in PULL_REASONS:
            image = cs.get("image") or _image(pod, container)
            return StuckServer(
                name, n, IMAGE_PULL, f'cannot pull image "{image}" (kubectl describe pod {name})'
            )
        if reason in STUCK_REASONS:
            return StuckServer(name, n, reason, f.one_line(str(waiting.get("message") or "")))
    for c in st.get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == UNSCHEDULABLE
        ):
            return StuckServer(name, n, UNSCHEDULABLE, f.one_line(str(c.get("message") or "")))
    return None


def _image(pod: dict[str, Any], container: str) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == container:
            return str(c.get("image") or "?")
    return "?"


def owned_by_uid(pod: dict[str, Any], uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def all_stuck(pods: Iterable[dict[str, Any]], owner_uid: str) -> list[StuckServer]:
    """The stuck pods of the StatefulSet ``owner_uid`` (others in the list are skipped),
    lowest ordinal first."""
    found = [s for p in pods if owned_by_uid(p, owner_uid) and (s := stuck(p)) is not None]
    return sorted(found, key=lambda s: (s.ordinal, s.pod))


def first_stuck(stuck_pods: list[StuckServer]) -> StuckServer | None:
    """The lowest ordinal that is stuck."""
    return stuck_pods[0] if stuck_pods else None


def first_config_error(stuck_pods: list[StuckServer]) -> StuckServer | None:
    """The lowest ordinal whose server last exited with the configuration-error status."""
    return next((s for s in stuck_pods if s.config_error), None)
