"""Pods that cannot start, and why, from their status as the kubelet writes it. Pure.

A graph-server pod that crash-loops (``distgnn serve`` exits: a partition URL that does
not exist, missing credentials, a malformed partition file) or a pod that cannot pull its
image changes nothing its StatefulSet or Job reports: it is just not ready. While a
resource's pods are not all ready, the reconcile lists them (read-only, no watch) and
:func:`first_stuck` names the lowest ordinal (a StatefulSet's) or completion index (an
Indexed Job's) that is stuck, in one line that does not change while the pod's state does
not (no restart counts, back-off times or timestamps), so a pass over an unchanged pod
writes nothing. The containers read are the pod's main one and its numbered siblings
(``trainer``, ``trainer-1``) and named native sidecars (init containers with
``restartPolicy: Always``, in ``initContainerStatuses``: the graph server of a
co-located trainer pod). A container the kubelet restarts that last exited non-zero is
crash-looping (whether it restarts: its first matching ``restartPolicyRules`` rule, else
its own ``restartPolicy``, else the pod's: KEP-5307 container restart rules); one it does
not restart (a trainer: ``restartPolicy: Never``) has failed, which its Job reports, so it
is not "stuck". A container that last exited with
:data:`~distgnn.contract.EXIT_CONFIG_ERROR` (2: a configuration or input error, which a
restart cannot cure) is :func:`first_config_error`, and preferred to the pod's other
stuck containers: a server's fails a DistGNNJob at once (``ServerConfigError``), and so
does a trainer container's while its pod has not finished (``TrainerConfigError``): one
the kubelet restarts in place (a container restart rule), or one beside trainer
containers that still run (a co-located pod), which its Job would report only once the
whole pod has failed.

In a pod with a sidecar read (a co-located trainer pod) the line names the stuck
container, the sidecar's or a trainer's (``pod P (container trainer): ...``), and
:attr:`StuckPod.server` says whose it is: the server sidecar's (its crash loop, or the
pod unschedulable, which keeps the server from running too), or the trainers' (the
sidecar itself is fine), so the status blames the servers only for what is theirs
(:func:`split`). :func:`sidecars_ready` counts the pods whose server sidecar is ready.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from distgnn import contract
from distgnn_operator import desired as d
from distgnn_operator import failure as f

SERVER_CONTAINER = d.SERVER_CONTAINER
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
_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class StuckPod:
    """A pod that cannot start, and why."""

    pod: str
    index: int
    """the StatefulSet ordinal or Indexed Job completion index (the sort key)"""
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
    container: str = ""
    """the stuck container, named in the line, in a pod with a sidecar read (its sidecar
    or a trainer container); "": a pod of one kind of container"""
    server: bool = True
    """the stuck container is a graph server (its exit 2 is a ``ServerConfigError``), or
    the whole pod that holds one cannot be scheduled"""

    @property
    def config_error(self) -> bool:
        """Whether the container last exited with the configuration-error status (2): a
        graph server's (:attr:`server`) or a trainer container's."""
        return contract.is_config_error_exit(self.exit_code)

    def describe(self) -> str:
        """``pod NAME[ (container C)]: REASON: WHY``: what a status message says of it."""
        where = (
            f"pod {self.pod} (container {self.container})" if self.container else f"pod {self.pod}"
        )
        return f"{where}: {self.reason}: {self.why}" if self.why else f"{where}: {self.reason}"

    def failure(self) -> f.PodFailure:
        """As a failed pod (the ``PodFailed`` event and the ``Failed`` condition, whose
        message names the exit code itself)."""
        why = self.why.removesuffix(f" (exit code {self.exit_code})")
        return f.PodFailure(
            self.pod, why, self.detail, exit_code=self.exit_code, container=self.container
        )


def index(pod: dict[str, Any]) -> int:
    """An Indexed Job pod's completion index, else a StatefulSet pod's ordinal (its name's
    ``-N``); a huge number when it has neither."""
    rank = f.pod_rank(pod)
    if rank is not None and rank.isdigit():
        return int(rank)
    m = _ORDINAL.search(str((pod.get("metadata") or {}).get("name") or ""))
    return int(m.group(1)) if m else 1 << 30


def _last_termination(cs: dict[str, Any]) -> dict[str, Any]:
    """The container's latest termination: its current state while terminated (between a
    crash and the kubelet's back-off), else ``lastState``; {} when it never terminated."""
    return dict(
        (cs.get("state") or {}).get("terminated")
        or (cs.get("lastState") or {}).get("terminated")
        or {}
    )


def _exits_match(exit_codes: Any, code: int) -> bool:
    """Whether a container restart rule's ``exitCodes`` (``operator`` ``In`` / ``NotIn``
    ``values``) holds for exit status ``code``; a rule without them holds for any."""
    if not isinstance(exit_codes, dict):
        return True
    values = exit_codes.get("values") or []
    return (code in values) != (exit_codes.get("operator") == "NotIn")


def _restarts(c: dict[str, Any], pod_restarts: bool, code: int) -> bool:
    """Whether the kubelet restarts the container after it exits with ``code``: its first
    ``restartPolicyRules`` rule that matches the exit (action ``Restart``; a native
    sidecar, ``restartPolicy: Always``, has none), else its own ``restartPolicy``, else
    the pod's (KEP-5307 container restart rules)."""
    own = c.get("restartPolicy")
    if own != "Always":
        for rule in c.get("restartPolicyRules") or []:
            if isinstance(rule, dict) and _exits_match(rule.get("exitCodes"), code):
                return rule.get("action") == "Restart"
    return own != "Never" if own else pod_restarts


def _watched(
    pod: dict[str, Any], container: str, sidecars: tuple[str, ...]
) -> Iterator[tuple[dict[str, Any], str, bool, dict[str, Any]]]:
    """(status, container name, a sidecar, spec) of the containers read: the named
    sidecars first (the others wait for them), then the main container and its numbered
    siblings."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    specs = {
        str(c.get("name")): c
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    }
    for cs in st.get("initContainerStatuses") or []:
        name = str(cs.get("name") or "")
        if name in sidecars:
            yield cs, name, True, specs.get(name) or {}
    for cs in st.get("containerStatuses") or []:
        name = str(cs.get("name") or "")
        if f.is_container(name, container):
            yield cs, name, False, specs.get(name) or {}


def stuck(
    pod: dict[str, Any], container: str = SERVER_CONTAINER, sidecars: tuple[str, ...] = ()
) -> StuckPod | None:
    """Why this pod cannot start, or None when it is ready, on its way or finished.

    A not-ready container the kubelet restarts that last exited non-zero is
    crash-looping, whether the kubelet shows it waiting (``CrashLoopBackOff``), just
    terminated or running again before its next crash: the same line in each, so the
    status does not flap with the kubelet's restarts. A pod being deleted is never stuck
    (its replacement will say), nor one that has finished (its Job says why it failed).
    The ``container`` (main) or a ``sidecars`` entry named ``server`` is a graph server.
    A container whose last exit was the configuration-error status comes first (it fails
    the job), else the first container that cannot start; a trainer container's exit 2
    counts whether or not the kubelet restarts it, and its line names the container."""
    md = pod.get("metadata") or {}
    if md.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in _DONE:
        return None
    name, n = str(md.get("name") or "?"), index(pod)
    pod_restarts = (pod.get("spec") or {}).get("restartPolicy", "Always") != "Never"
    found = [
        s
        for cs, cname, side, c in _watched(pod, container, sidecars)
        if (s := _container_stuck(name, n, cs, cname, side, c, pod_restarts, container, sidecars))
    ]
    if found:
        return next((s for s in found if s.config_error), found[0])
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == UNSCHEDULABLE
        ):
            why = f.one_line(str(c.get("message") or ""))
            holds_server = SERVER_CONTAINER in (container, *sidecars)
            return StuckPod(name, n, UNSCHEDULABLE, why, server=holds_server)
    return None


def _container_stuck(
    pod: str,
    n: int,
    cs: dict[str, Any],
    cname: str,
    side: bool,
    c: dict[str, Any],
    pod_restarts: bool,
    container: str,
    sidecars: tuple[str, ...],
) -> StuckPod | None:
    """Why one container of a pod that has not finished cannot start (see :func:`stuck`)."""
    if cs.get("ready"):
        return None
    server = (cname if side else container) == SERVER_CONTAINER
    shown = cname if sidecars else ""  # several kinds of container: say which
    term = _last_termination(cs)
    code = f.exit_code(term)
    waiting = (cs.get("state") or {}).get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    if code is not None and code != 0:
        looping = _restarts(c, pod_restarts, code) or reason == CRASH_LOOP
        # a trainer's exit 2 fails the job whether or not it is restarted
        config = not server and contract.is_config_error_exit(code)
        if not (looping or config):  # failed, not stuck: its Job says
            return None
        summary, detail = f.summarize(term.get("message"), term.get("reason"), code)
        if "exit code" not in summary:
            summary = f"{summary} (exit code {code})"
        why = CRASH_LOOP if looping else str(term.get("reason") or "Error")
        return StuckPod(pod, n, why, summary, detail, code, cname if config else shown, server)
    if reason in PULL_REASONS:
        image = cs.get("image") or str(c.get("image") or "?")
        why = f'cannot pull image "{image}" (kubectl describe pod {pod})'
        return StuckPod(pod, n, IMAGE_PULL, why, container=shown, server=server)
    if reason in STUCK_REASONS:
        why = f.one_line(str(waiting.get("message") or ""))
        return StuckPod(pod, n, reason, why, container=shown, server=server)
    return None


def all_stuck(
    pods: Iterable[dict[str, Any]],
    owner_uid: str,
    container: str = SERVER_CONTAINER,
    sidecars: tuple[str, ...] = (),
) -> list[StuckPod]:
    """The stuck pods of the StatefulSet or Job ``owner_uid`` (others in the list are
    skipped), lowest ordinal or completion index first."""
    found = [
        s
        for p in pods
        if d.owned_by(p, owner_uid) and (s := stuck(p, container, sidecars)) is not None
    ]
    return sorted(found, key=lambda s: (s.index, s.pod))


def first_stuck(stuck_pods: list[StuckPod]) -> StuckPod | None:
    """The lowest ordinal or completion index that is stuck."""
    return stuck_pods[0] if stuck_pods else None


def first_config_error(stuck_pods: list[StuckPod]) -> StuckPod | None:
    """The lowest one whose container last exited with the configuration-error status (a
    list of servers' or of trainers' pods: :func:`split` a co-located job's first)."""
    return next((s for s in stuck_pods if s.config_error), None)


def split(stuck_pods: list[StuckPod]) -> tuple[list[StuckPod], list[StuckPod]]:
    """(the servers', the trainers') of a co-located job's stuck pods: a server sidecar
    that cannot start or a pod that cannot be scheduled is the servers'; a trainer
    container that cannot start beside a sidecar that is fine is the trainers'."""
    return [s for s in stuck_pods if s.server], [s for s in stuck_pods if not s.server]


def sidecars_ready(pods: Iterable[dict[str, Any]], owner_uid: str, sidecar: str) -> int:
    """Pods of the Job ``owner_uid`` whose native sidecar ``sidecar`` is ready: a
    co-located job's graph servers that serve, whatever its trainers do."""
    n = 0
    for p in pods:
        md = p.get("metadata") or {}
        if not d.owned_by(p, owner_uid) or md.get("deletionTimestamp"):
            continue
        statuses = (p.get("status") or {}).get("initContainerStatuses") or []
        n += any(cs.get("name") == sidecar and cs.get("ready") for cs in statuses)
    return n
