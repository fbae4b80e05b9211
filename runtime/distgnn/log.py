"""Structured logging and progress for long steps.

``setup()`` configures the root logger once per process: key=value text on a
terminal, one JSON object per line otherwise or when ``DISTGNN_LOG_FORMAT=json``.
Pass structured fields with ``extra={"fields": {...}}`` or use :func:`kv`.

Every line also carries the process's context fields: ``job`` (``DISTGNN_JOB_NAME``),
``rank`` (``RANK``) and ``partition`` (``DISTGNN_PART_ID``) when set, plus whatever
:func:`add_context` adds later (a server adds its partition once it knows it). A
launcher passes its own resolved format to its children (``DISTGNN_LOG_FORMAT``, see
:func:`current_format`), so one run logs in one format. Text values longer than
``MAX_TEXT_VALUE`` characters are cut.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

from distgnn import contract
from distgnn.errors import ConfigError

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_KOPF_INTERNAL = {"settings", "k8s_skip"}
"""Extras kopf's per-object loggers attach (the whole OperatorSettings): never printed."""
MAX_TEXT_VALUE = 160
"""Longest value a text line shows (the rest is cut; JSON lines keep structure)."""


def context_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The context fields a process learns from the contract environment."""
    e = os.environ if env is None else env
    out: dict[str, Any] = {}
    for key, var in (
        ("job", contract.ENV_JOB_NAME),
        ("rank", contract.ENV_RANK),
        ("partition", contract.ENV_PART_ID),
    ):
        v = e.get(var)
        if key == "rank" and not v:  # trainers of an Indexed Job: from the completion index
            v = contract.trainer_rank(e)
        if v:
            out[key] = int(v) if v.isdigit() else v
    return out


def _fields(record: logging.LogRecord, context: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(context)
    extra = getattr(record, "fields", None)
    if isinstance(extra, Mapping):
        out.update(extra)
    for k, v in record.__dict__.items():
        if k in _RESERVED or k == "fields" or k in _KOPF_INTERNAL:
            continue
        if k == "k8s_ref" and isinstance(v, Mapping):  # kopf's per-object logger
            out.update({f: v[f] for f in ("kind", "namespace", "name") if v.get(f)})
            continue
        out[k] = v
    return out


class _ContextFormatter(logging.Formatter):
    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.context: dict[str, Any] = dict(context or {})


class JsonFormatter(_ContextFormatter):
    """One JSON object per line: ts, level, logger, msg, context and structured fields."""

    fmt_name = "json"

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj.update(_fields(record, self.context))
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


class TextFormatter(_ContextFormatter):
    """``HH:MM:SS level logger: msg key=value ...``"""

    fmt_name = "text"

    def format(self, record: logging.LogRecord) -> str:
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        extra = " ".join(f"{k}={_short(v)}" for k, v in _fields(record, self.context).items())
        line = f"{t} {record.levelname.lower():<7} {record.name}: {record.getMessage()}"
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    if len(s) > MAX_TEXT_VALUE:
        s = f"{s[:MAX_TEXT_VALUE]}...(+{len(s) - MAX_TEXT_VALUE} chars)"
    return json.dumps(s) if " " in s else s


def _handler() -> logging.Handler | None:
    return next((h for h in logging.getLogger().handlers if getattr(h, "_distgnn", False)), None)


def current_format() -> str | None:
    """``json`` or ``text``: what :func:`setup` chose for this process (None before)."""
    h = _handler()
    return getattr(h.formatter, "fmt_name", None) if h is not None else None


def add_context(**fields: Any) -> None:
    """Add fields to every later line of this process (e.g. ``partition=3``)."""
    h = _handler()
    if h is not None and isinstance(h.formatter, _ContextFormatter):
        h.formatter.context.update(fields)


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""The log levels ``--log-level`` and ``DISTGNN_LOG_LEVEL`` take (any case)."""


def setup(
    level: str | None = None,
    fmt: str | None = None,
    stream: TextIO | None = None,
    context: Mapping[str, Any] | None = None,
) -> None:
    """Configure the root logger (idempotent). Level, format and context (job, rank,
    partition) default to the environment."""
    stream = stream or sys.stderr
    fmt = fmt or os.environ.get(contract.ENV_LOG_FORMAT) or ("text" if stream.isatty() else "json")
    source = "--log-level" if level else contract.ENV_LOG_LEVEL
    level = (level or os.environ.get(contract.ENV_LOG_LEVEL) or "INFO").upper()
    if level not in LEVELS:
        raise ConfigError(f"{source}: unknown log level {level[:40]!r} (use {', '.join(LEVELS)})")
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_distgnn", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream)
    handler._distgnn = True  # type: ignore[attr-defined]
    ctx = context_from_env() if context is None else context
    handler.setFormatter(JsonFormatter(ctx) if fmt == "json" else TextFormatter(ctx))
    root.addHandler(handler)
    root.setLevel(level)


def kv(**fields: Any) -> dict[str, Any]:
    """``log.info("msg", extra=kv(a=1))`` attaches structured fields."""
    return {"fields": fields}


class Progress:
    """Progress of a long step: a live bar on a terminal, periodic log lines otherwise.

    Use as ``with Progress("metis", total=n) as p: p.update(k)``.
    """

    def __init__(
        self,
        step: str,
        total: int | None = None,
        logger: logging.Logger | None = None,
        stream: TextIO | None = None,
        interval: float = 5.0,
        unit: str = "",
    ) -> None:
        self.step, self.total, self.unit = step, total, unit
        self.log = logger or logging.getLogger("distgnn.progress")
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval
        self.done = 0
        self._t0 = self._last = time.monotonic()

    def __enter__(self) -> Progress:
        self.log.info("%s: started", self.step, extra=kv(step=self.step, total=self.total))
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.tty:
            if now - self._last >= 0.1:
                self._last = now
                self._draw()
        elif now - self._last >= self.interval:
            self._last = now
            self.log.info(
                "%s: %s", self.step, self._text(), extra=kv(step=self.step, done=self.done)
            )

    def _text(self) -> str:
        if self.total:
            return f"{self.done}/{self.total}{self.unit} ({100.0 * self.done / self.total:.0f}%)"
        return f"{self.done}{self.unit}"

    def _draw(self) -> None:
        width = 30
        frac = min(1.0, self.done / self.total) if self.total else 0.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(f"\r{self.step}: [{bar}] {self._text()}")
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self.tty:
            self._draw()
            self.stream.write("\n")
        dt = time.monotonic() - self._t0
        self.log.info(
            "%s: done in %.2fs", self.step, dt, extra=kv(step=self.step, seconds=round(dt, 3))
        )


@contextmanager
def step(name: str, logger: logging.Logger | None = None, **fields: Any) -> Iterator[None]:
    """Log the start and duration of a step that has no countable progress."""
    lg = logger or logging.getLogger("distgnn.progress")
    t0 = time.monotonic()
    lg.info("%s: started", name, extra=kv(step=name, **fields))
    yield
    lg.info(
        "%s: done in %.2fs",
        name,
        time.monotonic() - t0,
        extra=kv(step=name, seconds=round(time.monotonic() - t0, 3)),
    )
