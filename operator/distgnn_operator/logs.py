"""Short operator log lines: kopf's per-object records made compact, settings logged once.

kopf's object loggers attach ``settings`` (the whole ``OperatorSettings``), ``k8s_skip`` and
``k8s_ref`` to every record they emit. :mod:`distgnn.log` writes every extra attribute of a
record, so without this each line carried the settings' repr (about 1.3 KB). The wrapper
below drops the first two and turns the reference into ``object: KIND NAMESPACE/NAME``,
without touching the record itself (kopf's event poster reads the same record).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf

KOPF_ONLY = ("settings", "k8s_skip", "k8s_ref")


class CompactKopfFormatter(logging.Formatter):
    """Formats with ``inner`` after replacing kopf's bulky record attributes."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        if not any(hasattr(record, k) for k in KOPF_ONLY):
            return self.inner.format(record)
        r = copy.copy(record)
        ref = getattr(r, "k8s_ref", None)
        for k in KOPF_ONLY:
            r.__dict__.pop(k, None)
        if isinstance(ref, dict):
            where = "/".join(str(x) for x in (ref.get("namespace"), ref.get("name")) if x)
            r.__dict__["object"] = f"{ref.get('kind')} {where}"
        return self.inner.format(r)


def compact_kopf_records(logger: logging.Logger | None = None) -> None:
    """Wrap the formatter of every distgnn handler of ``logger`` (default: root), once."""
    for h in (logger or logging.getLogger()).handlers:
        if getattr(h, "_distgnn", False) and not isinstance(h.formatter, CompactKopfFormatter):
            h.setFormatter(CompactKopfFormatter(h.formatter or logging.Formatter()))


def settings_summary(settings: kopf.OperatorSettings, **extra: Any) -> dict[str, Any]:
    """What an operator runs with, in one log line (instead of on every line)."""
    return {
        "peering": None if settings.peering.standalone else settings.peering.name,
        "peering_priority": settings.peering.priority,
        "peering_lifetime_s": settings.peering.lifetime,
        "watch_server_timeout_s": settings.watching.server_timeout,
        "watch_client_timeout_s": settings.watching.client_timeout,
        "request_timeout_s": settings.networking.request_timeout,
        "exit_timeout_s": settings.process.ultimate_exiting_timeout,
        "finalizer": settings.persistence.finalizer,
        **extra,
    }
