"""The root cause of a failed pod, in one line, from its container's termination message.

What a message can hold (``terminationMessagePolicy: FallbackToLogsOnError``):

* a trainer's JSON error object (``distgnn.train.cli``): ``{"error": "RuntimeError",
  "message": "...", "rank": "1", "traceback": "..."}``;
* otherwise the tail of the container log (at most 80 lines / 2 KiB): JSON log lines
  (``distgnn.log``: ``level``, ``msg``, ``exc``), a Python traceback, or the CLI's one-line
  ``distgnn partition: error: ...``.

:func:`summarize` gives ``(summary, detail)``: ``summary`` is one line for the ``Failed``
condition (``RuntimeError: CUDA out of memory``), ``detail`` the traceback or log tail for
an Event. :attr:`PodFailure.exit_code` is the failed container's exit status; a trainer's
:data:`~distgnn.contract.EXIT_CONFIG_ERROR` makes the failure permanent (no restart).
Pure; table-tested.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from distgnn import contract

SUMMARY_MAX = 300
DETAIL_MAX = 1000
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault))(?::\s*(.*))?$")
_CLI_ERROR = re.compile(r"^distgnn [\w-]+: error: .+$")
_ERROR_LEVELS = ("error", "critical", "fatal")


@dataclass(frozen=True)
class PodFailure:
    """The first pod of a batch Job that failed, and why."""

    pod: str
    summary: str
    detail: str = ""
    rank: str | None = None
    finished_at: str = ""
    exit_code: int | None = None
    disrupted: bool = False
    """the pod has the ``DisruptionTarget`` condition (evicted, preempted, node drained)"""
    container: str = ""
    """the failed container, named in the headline ("": the pod's one of its kind)"""

    @property
    def config_error(self) -> bool:
        """Whether the container exited with the configuration-error status (2): a
        trainer's mistake that a restart cannot cure."""
        return contract.is_config_error_exit(self.exit_code)

    def headline(self) -> str:
        """``summary (rank R, pod NAME[, container C])``: the condition message's cause part."""
        where = f"rank {self.rank}, pod {self.pod}" if self.rank is not None else f"pod {self.pod}"
        if self.container:
            where += f", container {self.container}"
        return f"{self.summary} ({where})"


def one_line(text: str, limit: int = SUMMARY_MAX) -> str:
    """First non-empty line, whitespace collapsed, cut to ``limit`` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def tail(text: str, limit: int = DETAIL_MAX) -> str:
    """The last ``limit`` characters (the end of a traceback matters most), marked if cut."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _from_error_object(obj: dict[str, Any]) -> tuple[str, str]:
    err, msg = str(obj.get("error") or "Error"), str(obj.get("message") or "")
    summary = f"{err}: {one_line(msg)}" if msg.strip() else err
    return one_line(summary), tail(str(obj.get("traceback") or ""))


def _from_log(text: str) -> str:
    """The most telling line of a log tail: an error log record, an exception, the CLI error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        rec = _json(ln) if ln.startswith("{") else None
        if isinstance(rec, dict) and str(rec.get("level", "")).lower() in _ERROR_LEVELS:
            msg = str(rec.get("msg") or rec.get("message") or "")
            exc_lines = [x for x in str(rec.get("exc") or "").splitlines() if x.strip()]
            if exc_lines and _EXC_LINE.match(exc_lines[-1].strip()):
                return f"{exc_lines[-1].strip()}" + (f" ({msg})" if msg else "")
            if msg:
                return msg
    for ln in reversed(lines):
        if _CLI_ERROR.match(ln) or _EXC_LINE.match(ln):
            return ln
    return lines[-1] if lines else ""


def summarize(
    message: str | None, reason: str | None = None, exit_code: Any = None
) -> tuple[str, str]:
    """(one-line root cause, detail for an Event) of a terminated container."""
    text = (message or "").strip()
    obj = _json(text) if text.startswith("{") else None
    if isinstance(obj, dict) and ("error" in obj or "traceback" in obj):
        return _from_error_object(obj)
    line = _from_log(text) if text else ""
    if not line:
        why = reason or "Error"
        line = f"{why} (exit code {exit_code})" if exit_code is not None else why
        if reason == "OOMKilled":
            line += ": the container exceeded its memory limit"
    return one_line(line), tail(text)


def is_container(name: str, base: str) -> bool:
    """Whether container ``name`` is ``base`` or one of its numbered siblings
    (``trainer``, ``trainer-1``: the trainers of a co-located pod)."""
    return name == base or (name.startswith(base + "-") and name[len(base) + 1 :].isdigit())


def terminated(pod: dict[str, Any], container: str | None = None) -> dict[str, Any]:
    """The first terminated container state of a pod ({} when none): a failed one first;
    with ``container``, only that container and its numbered siblings count (not an
    injected sidecar; init containers never do)."""
    found = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if container is not None and not is_container(str(cs.get("name") or ""), container):
            continue
        term = (cs.get("state") or {}).get("terminated")
        if term:
            found.append(dict(term))
    failed = [t for t in found if t.get("exitCode") not in (None, 0)]
    return (failed or found or [{}])[0]


def pod_rank(pod: dict[str, Any]) -> str | None:
    """The Indexed Job completion index of a pod (its DDP rank), if any."""
    md = pod.get("metadata") or {}
    for src in (md.get("labels") or {}, md.get("annotations") or {}):
        v = src.get("batch.kubernetes.io/job-completion-index")
        if v is not None:
            return str(v)
    return None


def is_disrupted(pod: dict[str, Any]) -> bool:
    """Whether the pod has the ``DisruptionTarget`` condition: evicted (a node drain, node
    pressure), preempted, or its node lost; not its own failure."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conds)


def exit_code(term: dict[str, Any]) -> int | None:
    """A terminated container state's exit status (None when it has none)."""
    code = term.get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def first_failure(pods: list[dict[str, Any]], container: str | None = None) -> PodFailure | None:
    """The pod that failed first (earliest ``finishedAt``; then lowest rank), summarised;
    ``container``: the container to read (see :func:`terminated`).

    When one DDP rank dies the others fail soon after with connection errors: the first
    failure is the root cause.
    """
    found: list[PodFailure] = []
    for pod in pods:
        term = terminated(pod, container)
        if term.get("exitCode") in (None, 0):
            continue
        summary, detail = summarize(term.get("message"), term.get("reason"), term.get("exitCode"))
        found.append(
            PodFailure(
                pod=str((pod.get("metadata") or {}).get("name") or "?"),
                summary=summary,
                detail=detail,
                rank=pod_rank(pod),
                finished_at=str(term.get("finishedAt") or ""),
                exit_code=exit_code(term),
                disrupted=is_disrupted(pod),
            )
        )
    if not found:
        return None

    def key(f: PodFailure) -> tuple[str, int, str]:
        rank = int(f.rank) if f.rank is not None and f.rank.isdigit() else 1 << 30
        return (f.finished_at or "~", rank, f.pod)

    return min(found, key=key)
